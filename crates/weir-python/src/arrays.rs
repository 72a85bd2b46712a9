//! Arrow arrays across the Python boundary through the Arrow PyCapsule
//! interface (`__arrow_c_array__`): the buffers are shared, not copied, and
//! no IPC stream is written on one side to be parsed on the other.
//!
//! Glue only: the batch state calls of a vectorized function pass whole
//! columns each way, and writing and parsing a stream for each of them was a
//! visible share of the vectorized path's profile (`benchmarks/PROFILE.md`).

use std::ptr::NonNull;

use arrow_array::ffi::{FFI_ArrowArray, from_ffi, to_ffi};
use arrow_array::{ArrayRef, make_array};
use arrow_schema::ffi::FFI_ArrowSchema;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use crate::errors::PyWeirError;
use crate::values::short_repr;

/// An array Weir made, handed to Python: `pyarrow.array(exported)` imports
/// it without a copy (any consumer of `__arrow_c_array__` can).
#[pyclass(module = "weir._internal", name = "ExportedArray", frozen)]
pub struct PyExportedArray {
    array: ArrayRef,
}

impl PyExportedArray {
    pub(crate) fn new(array: ArrayRef) -> Self {
        Self { array }
    }
}

#[pymethods]
impl PyExportedArray {
    /// The array as an `arrow_schema` and an `arrow_array` capsule. A
    /// requested schema is not applied: the protocol lets a producer ignore
    /// it, and the array already has the state's type.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> Result<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>), PyWeirError> {
        let _ = requested_schema;
        let (array, schema) = to_ffi(&self.array.to_data()).map_err(|e| {
            PyWeirError::InvalidArgument(format!("cannot export an array to Arrow: {e}"))
        })?;
        // Each capsule owns its struct; a consumer that imports it moves the
        // contents out, and dropping the struct releases whatever is left.
        Ok((
            PyCapsule::new_with_value(py, schema, c"arrow_schema")?,
            PyCapsule::new_with_value(py, array, c"arrow_array")?,
        ))
    }
}

/// The array an object exports through `__arrow_c_array__` (a pyarrow
/// `Array` or `RecordBatch`, the latter as a struct array of its columns),
/// sharing its buffers.
pub(crate) fn import_array(obj: &Bound<'_, PyAny>) -> Result<ArrayRef, PyWeirError> {
    if !obj.hasattr("__arrow_c_array__")? {
        return Err(PyWeirError::InvalidArgument(format!(
            "{} is not an Arrow array: pass a pyarrow Array (combine a ChunkedArray's chunks \
             first) or any object with __arrow_c_array__",
            short_repr(obj)
        )));
    }
    let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) =
        obj.call_method0("__arrow_c_array__")?.extract()?;
    let schema: NonNull<FFI_ArrowSchema> = schema.pointer_checked(Some(c"arrow_schema"))?.cast();
    let array: NonNull<FFI_ArrowArray> = array.pointer_checked(Some(c"arrow_array"))?.cast();
    // SAFETY: the Arrow PyCapsule interface guarantees that capsules named
    // "arrow_schema" and "arrow_array" hold a valid ArrowSchema and
    // ArrowArray that describe the same data. `from_raw` moves the array out
    // and marks the capsule's copy released, so its destructor frees nothing
    // twice; the schema is only borrowed while its capsule is alive.
    #[allow(unsafe_code)]
    let data = unsafe { from_ffi(FFI_ArrowArray::from_raw(array.as_ptr()), schema.as_ref()) };
    let data = data.map_err(|e| {
        PyWeirError::InvalidArgument(format!("cannot read {} as Arrow: {e}", short_repr(obj)))
    })?;
    Ok(make_array(data))
}
