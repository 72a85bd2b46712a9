//! Python objects as typed values: the walk over Python objects that the core
//! codec calls. [`PyValue`] answers `weir_types::encode_with` (and, as a key,
//! the typed session's key typing); [`PyBuilder`] builds what
//! `weir_types::decode_with` decodes. The bytes are spelled in `weir_types` only.

use std::borrow::Cow;
use std::fmt;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::iter::{BoundListIterator, BoundTupleIterator};
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};
use weir_host::typed::KeySource;
use weir_types::{Field, ValueBuilder, ValueSource, ValueType};

use crate::errors::PyWeirError;

/// The pickle protocol for opaque values: the newest every supported Python reads.
const PICKLE_PROTOCOL: u8 = 5;

static PICKLE_DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static PICKLE_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn pickle_function<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("pickle")?.getattr(name)?.unbind())
    })
    .map(|f| f.bind(py).clone())
}

/// A Python object to encode: ints, floats, str, bytes (or bytearray), bool,
/// a list or tuple for a list, a tuple, list or dict by field name for a
/// struct, anything picklable for pickle; a tuple key is a composite key.
#[derive(Clone)]
pub(crate) struct PyValue<'py>(pub(crate) Bound<'py, PyAny>);

/// The items of a Python list or tuple, or gathered from another iterable.
pub(crate) enum PyItems<'py> {
    List(BoundListIterator<'py>),
    Tuple(BoundTupleIterator<'py>),
    Gathered(std::vec::IntoIter<Bound<'py, PyAny>>),
}

impl<'py> Iterator for PyItems<'py> {
    type Item = PyValue<'py>;

    fn next(&mut self) -> Option<PyValue<'py>> {
        match self {
            PyItems::List(items) => items.next(),
            PyItems::Tuple(items) => items.next(),
            PyItems::Gathered(items) => items.next(),
        }
        .map(PyValue)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            PyItems::List(items) => items.size_hint(),
            PyItems::Tuple(items) => items.size_hint(),
            PyItems::Gathered(items) => items.size_hint(),
        }
    }
}

impl ExactSizeIterator for PyItems<'_> {}

/// The elements of any Python iterable (a list or tuple without copying).
pub(crate) fn items<'py>(obj: &Bound<'py, PyAny>) -> Result<PyItems<'py>, PyWeirError> {
    if let Some(items) = sequence(obj) {
        return Ok(items);
    }
    let gathered: PyResult<Vec<_>> = obj
        .try_iter()
        .map_err(|_| PyWeirError::InvalidArgument("expected a sequence".into()))?
        .collect();
    Ok(PyItems::Gathered(gathered?.into_iter()))
}

fn sequence<'py>(obj: &Bound<'py, PyAny>) -> Option<PyItems<'py>> {
    if let Ok(list) = obj.cast::<PyList>() {
        Some(PyItems::List(list.iter()))
    } else {
        obj.cast::<PyTuple>()
            .ok()
            .map(|tuple| PyItems::Tuple(tuple.iter()))
    }
}

impl PyValue<'_> {
    /// An int that is no bool (an exact int first: the common case).
    fn is_int(&self) -> bool {
        self.0.is_exact_instance_of::<PyInt>()
            || (self.0.is_instance_of::<PyInt>() && !self.0.is_instance_of::<PyBool>())
    }
}

/// Why pickling a value failed.
pub(crate) struct PickleFailed(PyErr);

impl fmt::Display for PickleFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pickle failed: {}", self.0)
    }
}

impl<'py> ValueSource for PyValue<'py> {
    type Items = PyItems<'py>;
    type Error = PickleFailed;

    fn is_null(&self) -> bool {
        self.0.is_none()
    }

    fn boolean(&self) -> Option<bool> {
        self.0.cast::<PyBool>().ok().map(|b| b.is_true())
    }

    fn int32(&self) -> Option<i32> {
        self.is_int().then(|| self.0.extract().ok()).flatten()
    }

    fn int64(&self) -> Option<i64> {
        self.is_int().then(|| self.0.extract().ok()).flatten()
    }

    fn float32(&self) -> Option<f32> {
        // Narrowing is what storing a float32 means.
        #[allow(clippy::cast_possible_truncation)]
        self.float64().map(|v| v as f32)
    }

    fn float64(&self) -> Option<f64> {
        if let Ok(float) = self.0.cast_exact::<PyFloat>() {
            return Some(float.value());
        }
        (self.0.is_instance_of::<PyFloat>() || self.is_int())
            .then(|| self.0.extract().ok())
            .flatten()
    }

    fn utf8(&self) -> Option<&str> {
        self.0.cast::<PyString>().ok()?.to_str().ok()
    }

    fn binary(&self) -> Option<Cow<'_, [u8]>> {
        if let Ok(bytes) = self.0.cast::<PyBytes>() {
            return Some(Cow::Borrowed(bytes.as_bytes()));
        }
        self.0
            .cast::<PyByteArray>()
            .ok()
            .map(|bytes| Cow::Owned(bytes.to_vec()))
    }

    fn pickled(&self) -> Result<Option<Cow<'_, [u8]>>, PickleFailed> {
        let py = self.0.py();
        let pickled = pickle_function(py, &PICKLE_DUMPS, "dumps")
            .and_then(|dumps| dumps.call1((&self.0, PICKLE_PROTOCOL)))
            .map_err(PickleFailed)?;
        let bytes = pickled
            .cast::<PyBytes>()
            .map_err(|e| PickleFailed(e.into()))?;
        Ok(Some(Cow::Owned(bytes.as_bytes().to_vec())))
    }

    fn list(&self) -> Option<PyItems<'py>> {
        sequence(&self.0)
    }

    fn fields(&self, fields: &[Field]) -> Option<PyItems<'py>> {
        let Ok(dict) = self.0.cast::<PyDict>() else {
            return sequence(&self.0);
        };
        if dict.len() != fields.len() {
            return None;
        }
        let values = fields
            .iter()
            .map(|field| dict.get_item(&field.name).ok().flatten())
            .collect::<Option<Vec<_>>>()?;
        Some(PyItems::Gathered(values.into_iter()))
    }

    fn describe(&self) -> String {
        short_repr(&self.0)
    }
}

impl<'py> KeySource for PyValue<'py> {
    fn columns(&self) -> Option<PyItems<'py>> {
        self.0
            .cast::<PyTuple>()
            .ok()
            .map(|tuple| PyItems::Tuple(tuple.iter()))
    }

    /// A Python int is Spark's `LongType`.
    fn column_type(&self) -> Result<ValueType, &'static str> {
        let column = &self.0;
        if column.is_instance_of::<PyBool>() {
            Ok(ValueType::Boolean)
        } else if column.is_instance_of::<PyInt>() {
            self.int64()
                .map(|_| ValueType::Int64)
                .ok_or("an int key must fit in 64 bits (Spark's LongType)")
        } else if let Ok(text) = column.cast::<PyString>() {
            text.to_str()
                .map(|_| ValueType::Utf8)
                .map_err(|_| "a str key must be valid UTF-8")
        } else if column.is_instance_of::<PyBytes>() {
            Ok(ValueType::Binary)
        } else if column.is_instance_of::<PyFloat>() {
            Ok(ValueType::Float64)
        } else {
            Err("a key is an int, str, bytes, bool or float, or a tuple of those (a composite key)")
        }
    }
}

/// Builds Python objects: int and float for numbers, str, bytes, bool, lists
/// as lists, structs as tuples, pickled objects unpickled.
pub(crate) struct PyBuilder<'py>(pub(crate) Python<'py>);

impl<'py> ValueBuilder for PyBuilder<'py> {
    type Output = Bound<'py, PyAny>;
    type Error = PyWeirError;

    fn null(&mut self) -> Result<Self::Output, PyWeirError> {
        Ok(self.0.None().into_bound(self.0))
    }
    fn boolean(&mut self, v: bool) -> Result<Self::Output, PyWeirError> {
        Ok(PyBool::new(self.0, v).to_owned().into_any())
    }
    fn int32(&mut self, v: i32) -> Result<Self::Output, PyWeirError> {
        Ok(PyInt::new(self.0, v).into_any())
    }
    fn int64(&mut self, v: i64) -> Result<Self::Output, PyWeirError> {
        Ok(PyInt::new(self.0, v).into_any())
    }
    fn float32(&mut self, v: f32) -> Result<Self::Output, PyWeirError> {
        self.float64(f64::from(v))
    }
    fn float64(&mut self, v: f64) -> Result<Self::Output, PyWeirError> {
        Ok(PyFloat::new(self.0, v).into_any())
    }
    fn utf8(&mut self, v: &str) -> Result<Self::Output, PyWeirError> {
        Ok(PyString::new(self.0, v).into_any())
    }
    fn binary(&mut self, v: &[u8]) -> Result<Self::Output, PyWeirError> {
        Ok(PyBytes::new(self.0, v).into_any())
    }
    fn pickled(&mut self, v: &[u8]) -> Result<Self::Output, PyWeirError> {
        let loads = pickle_function(self.0, &PICKLE_LOADS, "loads")?;
        Ok(loads.call1((PyBytes::new(self.0, v),))?)
    }
    fn list(&mut self, items: Vec<Self::Output>) -> Result<Self::Output, PyWeirError> {
        Ok(PyList::new(self.0, items)?.into_any())
    }
    fn structure(&mut self, fields: Vec<Self::Output>) -> Result<Self::Output, PyWeirError> {
        Ok(PyTuple::new(self.0, fields)?.into_any())
    }
}

/// What a Python value of type `ty` looks like, for the fix in error messages.
pub(crate) fn python_shape(ty: &ValueType) -> &'static str {
    match ty {
        ValueType::Boolean => "a bool",
        ValueType::Int32 => "an int in the signed 32-bit range",
        ValueType::Int64 => "an int in the signed 64-bit range",
        ValueType::Float32 | ValueType::Float64 => "a float (or int)",
        ValueType::Utf8 => "a str",
        ValueType::Binary => "bytes or a bytearray",
        ValueType::List { .. } => "a list (or tuple) of items of the item type",
        ValueType::Struct { .. } => {
            "a tuple (or list) with one value per field, or a dict by field name"
        }
        ValueType::Pickle => "a picklable object",
    }
}

/// `repr(obj)` cut to a length that keeps error messages readable.
pub(crate) fn cut_repr(obj: &Bound<'_, PyAny>) -> String {
    const MAX_CHARS: usize = 60;
    let repr = obj
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unprintable object>".to_owned());
    if repr.chars().count() <= MAX_CHARS {
        repr
    } else {
        let head: String = repr.chars().take(MAX_CHARS).collect();
        format!("{head}...")
    }
}

/// [`cut_repr`] with the object's type.
pub(crate) fn short_repr(obj: &Bound<'_, PyAny>) -> String {
    let type_name = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    format!("{} ({type_name})", cut_repr(obj))
}
