//! `weir._internal.ValueType` and `weir._internal.StateDescriptor`: the
//! core's value types and state descriptors as frozen Python objects.
//!
//! Glue only: Arrow types arrive through the Arrow PyCapsule interface
//! (`__arrow_c_schema__`) and are mapped by `ValueType::from_arrow_field`;
//! descriptors are validated by `StateDescriptor::validated`. Both pickle
//! (functions holding them are shipped to Spark workers).

use std::ptr::NonNull;

use arrow_schema::ffi::FFI_ArrowSchema;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyCapsuleMethods, PyTuple};
use weir_types::{StateDescriptor, TtlConfig, ValueType};

use crate::errors::PyWeirError;
use crate::values::short_repr;

/// The Arrow field an object exports through `__arrow_c_schema__`.
fn arrow_field(obj: &Bound<'_, PyAny>) -> Result<arrow_schema::Field, PyWeirError> {
    if !obj.hasattr("__arrow_c_schema__")? {
        return Err(PyWeirError::InvalidArgument(format!(
            "{} is not an Arrow type: pass a pyarrow type or field (any object with \
             __arrow_c_schema__)",
            short_repr(obj)
        )));
    }
    let capsule = obj.call_method0("__arrow_c_schema__")?;
    let capsule = capsule.cast::<PyCapsule>().map_err(PyErr::from)?;
    let pointer: NonNull<FFI_ArrowSchema> = capsule.pointer_checked(Some(c"arrow_schema"))?.cast();
    // SAFETY: the Arrow PyCapsule interface guarantees that a capsule named
    // "arrow_schema" holds a valid ArrowSchema owned by the capsule, which
    // `capsule` keeps alive; no Python code runs while the reference lives.
    #[allow(unsafe_code)]
    let schema = unsafe { pointer.as_ref() };
    arrow_schema::Field::try_from(schema).map_err(|e| {
        PyWeirError::InvalidArgument(format!(
            "cannot read the Arrow type of {}: {e}",
            short_repr(obj)
        ))
    })
}

/// The type of a state value or key column.
#[pyclass(module = "weir._internal", name = "ValueType", frozen, eq, hash)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PyValueType {
    pub(crate) inner: ValueType,
}

#[pymethods]
impl PyValueType {
    /// The type of an Arrow type or field; a field tagged
    /// `weir.encoding = pickle` is the pickle type.
    #[staticmethod]
    fn from_arrow(arrow: &Bound<'_, PyAny>) -> Result<Self, PyWeirError> {
        let field = arrow_field(arrow)?;
        Ok(Self {
            inner: ValueType::from_arrow_field(&field)?,
        })
    }

    /// Opaque objects, stored pickled.
    #[staticmethod]
    fn pickle() -> Self {
        Self {
            inner: ValueType::Pickle,
        }
    }

    #[staticmethod]
    fn _from_bytes(data: &[u8]) -> Result<Self, PyWeirError> {
        Ok(Self {
            inner: from_bytes(data)?,
        })
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(slf, &slf.get().inner)
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        format!("ValueType({})", self.inner)
    }
}

/// Names a keyed state, its kind, its types and its time-to-live.
#[pyclass(module = "weir._internal", name = "StateDescriptor", frozen, eq, hash)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PyStateDescriptor {
    pub(crate) inner: StateDescriptor,
}

#[pymethods]
impl PyStateDescriptor {
    #[new]
    #[pyo3(signature = (
        name, kind, value_type, *, user_key_type = None, ttl_millis = None,
        ttl_update = "on_create_and_write"
    ))]
    fn new(
        name: String,
        kind: &str,
        value_type: &PyValueType,
        user_key_type: Option<&PyValueType>,
        ttl_millis: Option<u64>,
        ttl_update: &str,
    ) -> Result<Self, PyWeirError> {
        let ttl = match ttl_millis {
            Some(ttl_millis) => Some(TtlConfig {
                ttl_millis,
                update: ttl_update.parse()?,
            }),
            None => None,
        };
        let inner = StateDescriptor {
            name,
            kind: kind.parse()?,
            value_type: value_type.inner.clone(),
            user_key_type: user_key_type.map(|t| t.inner.clone()),
            ttl,
        }
        .validated()?;
        Ok(Self { inner })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind.as_str()
    }

    #[getter]
    fn value_type(&self) -> PyValueType {
        PyValueType {
            inner: self.inner.value_type.clone(),
        }
    }

    #[getter]
    fn user_key_type(&self) -> Option<PyValueType> {
        self.inner
            .user_key_type
            .clone()
            .map(|inner| PyValueType { inner })
    }

    #[getter]
    fn ttl_millis(&self) -> Option<u64> {
        self.inner.ttl.map(|ttl| ttl.ttl_millis)
    }

    #[staticmethod]
    fn _from_bytes(data: &[u8]) -> Result<Self, PyWeirError> {
        Ok(Self {
            inner: from_bytes::<StateDescriptor>(data)?.validated()?,
        })
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(slf, &slf.get().inner)
    }

    fn __repr__(&self) -> String {
        let d = &self.inner;
        let user_key = d
            .user_key_type
            .as_ref()
            .map_or_else(String::new, |t| format!(", user_key_type={t}"));
        let ttl = d
            .ttl
            .map_or_else(String::new, |t| format!(", ttl_millis={}", t.ttl_millis));
        format!(
            "StateDescriptor({:?}, {}, value_type={}{user_key}{ttl})",
            d.name, d.kind, d.value_type
        )
    }
}

/// `(type(obj)._from_bytes, (serialized,))`: how a frozen core value pickles.
pub(crate) fn reduce<'py, T: serde::Serialize>(
    obj: &Bound<'py, impl pyo3::PyClass>,
    value: &T,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = obj.py();
    let bytes = serde_json::to_vec(value).map_err(|e| {
        PyWeirError::Io(format!("cannot serialize {}: {e}", obj.as_any().get_type()))
    })?;
    let restore = obj.as_any().get_type().getattr("_from_bytes")?;
    PyTuple::new(
        py,
        [
            restore,
            PyTuple::new(py, [PyBytes::new(py, &bytes)])?.into_any(),
        ],
    )
}

/// A value serialized by [`reduce`].
pub(crate) fn from_bytes<T: serde::de::DeserializeOwned>(data: &[u8]) -> Result<T, PyWeirError> {
    serde_json::from_slice(data).map_err(|e| {
        PyWeirError::InvalidArgument(format!("not a pickled value of this Weir version: {e}"))
    })
}
