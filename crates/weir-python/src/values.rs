//! Python objects to typed state values and back, guided by the state's [`ValueType`].
//!
//! The encoding itself is `weir_types::encode_value`; this file only maps
//! Python's types onto [`Value`] (ints, floats, str, bytes, bool, lists,
//! tuples for structs, pickle for opaque objects) and explains mismatches.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PySequence, PyString, PyTuple,
};
use weir_types::{Value, ValueType, decode_value, encode_value, read_varint, write_varint};

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

/// Why a Python value does not fit a type: where in the value, and what was expected.
#[derive(Debug)]
pub(crate) struct Mismatch {
    /// Where in the value, e.g. `"field 'count' of "`; empty at the top.
    pub(crate) path: String,
    /// `repr()` of the offending part.
    pub(crate) value: String,
    /// The type it had to fit.
    pub(crate) expected: ValueType,
}

impl Mismatch {
    fn new(obj: &Bound<'_, PyAny>, expected: &ValueType) -> Self {
        Self {
            path: String::new(),
            value: short_repr(obj),
            expected: expected.clone(),
        }
    }

    fn within(mut self, part: String) -> Self {
        self.path = format!("{part}{}", self.path);
        self
    }

    /// What a valid value looks like, for the fix in error messages.
    pub(crate) fn hint(&self) -> &'static str {
        python_shape(&self.expected)
    }

    /// The error for a value written to state `state` of type `state_type`;
    /// the hint is about the part that did not fit.
    pub(crate) fn into_error(self, state: &str, state_type: &ValueType) -> PyWeirError {
        PyWeirError::ValueMismatch {
            hint: self.hint(),
            state: state.to_owned(),
            path: self.path,
            value: self.value,
            expected: state_type.to_string(),
        }
    }
}

/// The Python shape of a type, for error messages.
fn python_shape(ty: &ValueType) -> &'static str {
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
pub(crate) fn short_repr(obj: &Bound<'_, PyAny>) -> String {
    const MAX_CHARS: usize = 60;
    let repr = obj
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unprintable object>".to_owned());
    let type_name = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let repr = if repr.chars().count() <= MAX_CHARS {
        repr
    } else {
        let head: String = repr.chars().take(MAX_CHARS).collect();
        format!("{head}...")
    };
    format!("{repr} ({type_name})")
}

/// Converts a non-None Python value to a [`Value`] of type `ty`.
pub(crate) fn to_value(obj: &Bound<'_, PyAny>, ty: &ValueType) -> Result<Value, Mismatch> {
    let mismatch = || Mismatch::new(obj, ty);
    let is_int = || obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>();
    Ok(match ty {
        ValueType::Boolean => {
            Value::Boolean(obj.cast::<PyBool>().map_err(|_| mismatch())?.is_true())
        }
        ValueType::Int32 if is_int() => Value::Int32(obj.extract().map_err(|_| mismatch())?),
        ValueType::Int64 if is_int() => Value::Int64(obj.extract().map_err(|_| mismatch())?),
        ValueType::Float32 | ValueType::Float64 if obj.is_instance_of::<PyFloat>() || is_int() => {
            let v: f64 = obj.extract().map_err(|_| mismatch())?;
            if matches!(ty, ValueType::Float32) {
                // Narrowing is what storing a float32 means.
                #[allow(clippy::cast_possible_truncation)]
                Value::Float32(v as f32)
            } else {
                Value::Float64(v)
            }
        }
        ValueType::Utf8 => Value::Utf8(
            obj.cast::<PyString>()
                .map_err(|_| mismatch())?
                .to_str()
                .map_err(|_| mismatch())?
                .to_owned(),
        ),
        ValueType::Binary => {
            if let Ok(bytes) = obj.cast::<PyBytes>() {
                Value::Binary(bytes.as_bytes().to_vec())
            } else {
                Value::Binary(obj.cast::<PyByteArray>().map_err(|_| mismatch())?.to_vec())
            }
        }
        ValueType::Pickle => {
            let py = obj.py();
            let dumps = pickle_function(py, &PICKLE_DUMPS, "dumps").map_err(|_| mismatch())?;
            let pickled = dumps
                .call1((obj, PICKLE_PROTOCOL))
                .map_err(|err| Mismatch {
                    path: String::new(),
                    value: format!("{} (pickle failed: {err})", short_repr(obj)),
                    expected: ty.clone(),
                })?;
            Value::Binary(
                pickled
                    .cast::<PyBytes>()
                    .map_err(|_| mismatch())?
                    .as_bytes()
                    .to_vec(),
            )
        }
        ValueType::List { item } => {
            if !(obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>()) {
                return Err(mismatch());
            }
            let seq = obj.cast::<PySequence>().map_err(|_| mismatch())?;
            let mut items = Vec::with_capacity(seq.len().unwrap_or(0));
            for (i, element) in seq.try_iter().map_err(|_| mismatch())?.enumerate() {
                let element = element.map_err(|_| mismatch())?;
                items.push(if element.is_none() {
                    Value::Null
                } else {
                    to_value(&element, item).map_err(|m| m.within(format!("item {i} of ")))?
                });
            }
            Value::List(items)
        }
        ValueType::Struct { fields } => {
            let values: Vec<Bound<'_, PyAny>> = if let Ok(dict) = obj.cast::<PyDict>() {
                if dict.len() != fields.len() {
                    return Err(mismatch());
                }
                fields
                    .iter()
                    .map(|f| dict.get_item(&f.name).ok().flatten().ok_or_else(mismatch))
                    .collect::<Result<_, _>>()?
            } else if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
                let seq = obj.cast::<PySequence>().map_err(|_| mismatch())?;
                if seq.len().map_err(|_| mismatch())? != fields.len() {
                    return Err(mismatch());
                }
                seq.try_iter()
                    .map_err(|_| mismatch())?
                    .collect::<PyResult<_>>()
                    .map_err(|_| mismatch())?
            } else {
                return Err(mismatch());
            };
            let mut out = Vec::with_capacity(fields.len());
            for (field, value) in fields.iter().zip(&values) {
                if value.is_none() {
                    if !field.nullable {
                        return Err(Mismatch::new(value, &field.data_type)
                            .within(format!("non-nullable field '{}' of ", field.name)));
                    }
                    out.push(Value::Null);
                } else {
                    out.push(
                        to_value(value, &field.data_type)
                            .map_err(|m| m.within(format!("field '{}' of ", field.name)))?,
                    );
                }
            }
            Value::Struct(out)
        }
        _ => return Err(mismatch()),
    })
}

/// Encodes a non-None Python value of type `ty` for state `state`.
pub(crate) fn encode(
    obj: &Bound<'_, PyAny>,
    ty: &ValueType,
    state: &str,
    out: &mut Vec<u8>,
) -> Result<(), PyWeirError> {
    let start = out.len();
    if write_direct(obj, ty, out) {
        return Ok(());
    }
    // Not a common shape (a dict for a struct, a pickled object, an int subclass...)
    // or not a fit: the general path converts it, or says exactly what does not fit.
    out.truncate(start);
    let value = to_value(obj, ty).map_err(|m| m.into_error(state, ty))?;
    encode_value(&value, ty, out)?;
    Ok(())
}

/// Appends the encoding of the common shapes of Python values straight from the
/// objects, without the intermediate [`Value`] (which allocates per struct and
/// string): the bytes are exactly `encode_value(to_value(obj, ty), ty)`. Returns
/// false, with `out` partly written, for anything else; the caller then takes
/// the general path.
fn write_direct(obj: &Bound<'_, PyAny>, ty: &ValueType, out: &mut Vec<u8>) -> bool {
    match ty {
        ValueType::Boolean => match obj.cast::<PyBool>() {
            Ok(b) => {
                out.push(u8::from(b.is_true()));
                true
            }
            Err(_) => false,
        },
        // An exact int is never a bool; int subclasses take the general path.
        ValueType::Int64 if obj.is_exact_instance_of::<PyInt>() => obj
            .extract::<i64>()
            .map(|v| out.extend_from_slice(&v.to_le_bytes()))
            .is_ok(),
        ValueType::Int32 if obj.is_exact_instance_of::<PyInt>() => obj
            .extract::<i32>()
            .map(|v| out.extend_from_slice(&v.to_le_bytes()))
            .is_ok(),
        ValueType::Float64
            if obj.is_exact_instance_of::<PyFloat>() || obj.is_exact_instance_of::<PyInt>() =>
        {
            obj.extract::<f64>()
                .map(|v| out.extend_from_slice(&v.to_le_bytes()))
                .is_ok()
        }
        ValueType::Utf8 => match obj.cast::<PyString>().map(|s| s.to_str()) {
            Ok(Ok(text)) => {
                write_varint(text.len() as u64, out);
                out.extend_from_slice(text.as_bytes());
                true
            }
            _ => false,
        },
        ValueType::Binary => match obj.cast::<PyBytes>() {
            Ok(bytes) => {
                let bytes = bytes.as_bytes();
                write_varint(bytes.len() as u64, out);
                out.extend_from_slice(bytes);
                true
            }
            Err(_) => false,
        },
        ValueType::List { item } => {
            if let Ok(list) = obj.cast_exact::<PyList>() {
                write_items(list.iter(), item, out)
            } else if let Ok(tuple) = obj.cast_exact::<PyTuple>() {
                write_items(tuple.iter(), item, out)
            } else {
                false
            }
        }
        ValueType::Struct { fields } => {
            let Ok(tuple) = obj.cast_exact::<PyTuple>() else {
                return false;
            };
            if tuple.len() != fields.len() {
                return false;
            }
            fields.iter().zip(tuple.iter()).all(|(field, value)| {
                if value.is_none() {
                    out.push(0);
                    field.nullable
                } else {
                    if field.nullable {
                        out.push(1);
                    }
                    write_direct(&value, &field.data_type, out)
                }
            })
        }
        _ => false,
    }
}

/// Appends the encoding of a key of the declared column `types` straight from the
/// Python key (what `encode_key` writes for its columns); false, with `out` partly
/// written, for anything else (the caller takes the general path, which also
/// explains a key that does not fit).
pub(crate) fn write_key_direct(
    key: &Bound<'_, PyAny>,
    types: &[ValueType],
    out: &mut Vec<u8>,
) -> bool {
    let column = |obj: &Bound<'_, PyAny>, ty: &ValueType, out: &mut Vec<u8>| {
        out.push(1);
        !obj.is_none() && write_direct(obj, ty, out)
    };
    match types {
        [ty] => column(key, ty, out),
        _ => match key.cast_exact::<PyTuple>() {
            Ok(tuple) if tuple.len() == types.len() => tuple
                .iter()
                .zip(types)
                .all(|(obj, ty)| column(&obj, ty, out)),
            _ => false,
        },
    }
}

/// A list's count, then each item with its presence byte (see [`write_direct`]).
fn write_items<'py>(
    items: impl ExactSizeIterator<Item = Bound<'py, PyAny>>,
    item: &ValueType,
    out: &mut Vec<u8>,
) -> bool {
    write_varint(items.len() as u64, out);
    let mut items = items;
    items.all(|element| {
        if element.is_none() {
            out.push(0);
            true
        } else {
            out.push(1);
            write_direct(&element, item, out)
        }
    })
}

/// Decodes stored bytes of type `ty` into a Python object.
pub(crate) fn decode<'py>(
    py: Python<'py>,
    bytes: &[u8],
    ty: &ValueType,
) -> PyResult<Bound<'py, PyAny>> {
    let mut rest = bytes;
    if let Some(obj) = read_direct(py, &mut rest, ty)?
        && rest.is_empty()
    {
        return Ok(obj);
    }
    // Malformed bytes: the general decoder names what is wrong.
    let value = decode_value(bytes, ty).map_err(PyWeirError::from)?;
    from_value(py, value, ty)
}

/// Reads one value of type `ty` from the front of `buf` straight into a Python
/// object (what `from_value(decode_value(..))` builds, without the intermediate
/// [`Value`]); `Ok(None)` when the bytes are malformed.
fn read_direct<'py>(
    py: Python<'py>,
    buf: &mut &[u8],
    ty: &ValueType,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if buf.len() < n {
            return None;
        }
        let (head, rest) = buf.split_at(n);
        *buf = rest;
        Some(head)
    }
    fn fixed<const N: usize>(buf: &mut &[u8]) -> Option<[u8; N]> {
        take(buf, N).and_then(|bytes| bytes.try_into().ok())
    }
    fn sized<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
        let n = usize::try_from(read_varint(buf)?).ok()?;
        take(buf, n)
    }
    Ok(Some(match ty {
        ValueType::Boolean => match take(buf, 1) {
            Some([0]) => PyBool::new(py, false).to_owned().into_any(),
            Some([1]) => PyBool::new(py, true).to_owned().into_any(),
            _ => return Ok(None),
        },
        ValueType::Int32 => match fixed(buf) {
            Some(b) => i32::from_le_bytes(b).into_pyobject(py)?.into_any(),
            None => return Ok(None),
        },
        ValueType::Int64 => match fixed(buf) {
            Some(b) => i64::from_le_bytes(b).into_pyobject(py)?.into_any(),
            None => return Ok(None),
        },
        ValueType::Float32 => match fixed(buf) {
            Some(b) => f64::from(f32::from_le_bytes(b))
                .into_pyobject(py)?
                .into_any(),
            None => return Ok(None),
        },
        ValueType::Float64 => match fixed(buf) {
            Some(b) => f64::from_le_bytes(b).into_pyobject(py)?.into_any(),
            None => return Ok(None),
        },
        ValueType::Utf8 => match sized(buf).map(std::str::from_utf8) {
            Some(Ok(text)) => PyString::new(py, text).into_any(),
            _ => return Ok(None),
        },
        ValueType::Binary => match sized(buf) {
            Some(bytes) => PyBytes::new(py, bytes).into_any(),
            None => return Ok(None),
        },
        ValueType::Pickle => match sized(buf) {
            Some(bytes) => {
                pickle_function(py, &PICKLE_LOADS, "loads")?.call1((PyBytes::new(py, bytes),))?
            }
            None => return Ok(None),
        },
        ValueType::List { item } => {
            let Some(n) = read_varint(buf).and_then(|n| usize::try_from(n).ok()) else {
                return Ok(None);
            };
            // Each item takes at least one byte: bound the allocation by the input.
            if n > buf.len() {
                return Ok(None);
            }
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                match read_nullable(py, buf, item)? {
                    Some(element) => items.push(element),
                    None => return Ok(None),
                }
            }
            PyList::new(py, items)?.into_any()
        }
        ValueType::Struct { fields } => {
            let mut items = Vec::with_capacity(fields.len());
            for field in fields {
                let value = if field.nullable {
                    read_nullable(py, buf, &field.data_type)?
                } else {
                    read_direct(py, buf, &field.data_type)?
                };
                match value {
                    Some(value) => items.push(value),
                    None => return Ok(None),
                }
            }
            PyTuple::new(py, items)?.into_any()
        }
    }))
}

/// A presence byte, then a value if present (None when absent).
fn read_nullable<'py>(
    py: Python<'py>,
    buf: &mut &[u8],
    ty: &ValueType,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some((&presence, rest)) = buf.split_first() else {
        return Ok(None);
    };
    *buf = rest;
    match presence {
        0 => Ok(Some(py.None().into_bound(py))),
        1 => read_direct(py, buf, ty),
        _ => Ok(None),
    }
}

/// A [`Value`] of type `ty` as a Python object (structs become tuples).
pub(crate) fn from_value<'py>(
    py: Python<'py>,
    value: Value,
    ty: &ValueType,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match (value, ty) {
        (Value::Null, _) => py.None().into_bound(py),
        (Value::Binary(bytes), ValueType::Pickle) => {
            pickle_function(py, &PICKLE_LOADS, "loads")?.call1((PyBytes::new(py, &bytes),))?
        }
        (Value::Boolean(b), _) => PyBool::new(py, b).to_owned().into_any(),
        (Value::Int32(v), _) => v.into_pyobject(py)?.into_any(),
        (Value::Int64(v), _) => v.into_pyobject(py)?.into_any(),
        (Value::Float32(v), _) => f64::from(v).into_pyobject(py)?.into_any(),
        (Value::Float64(v), _) => v.into_pyobject(py)?.into_any(),
        (Value::Utf8(s), _) => PyString::new(py, &s).into_any(),
        (Value::Binary(bytes), _) => PyBytes::new(py, &bytes).into_any(),
        (Value::List(items), ValueType::List { item }) => {
            let list = PyList::empty(py);
            for v in items {
                list.append(from_value(py, v, item)?)?;
            }
            list.into_any()
        }
        (Value::Struct(values), ValueType::Struct { fields }) => {
            let items = values
                .into_iter()
                .zip(fields)
                .map(|(v, f)| from_value(py, v, &f.data_type))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_any()
        }
        (value, ty) => {
            return Err(PyWeirError::from(weir_types::TypesError::TypeMismatch {
                expected: ty.clone(),
                value: value.to_string(),
            })
            .into());
        }
    })
}

/// The key columns of a Python key and their inferred types: a tuple is a
/// composite key, anything else one column (int is Spark's LongType).
pub(crate) fn key_columns(
    obj: &Bound<'_, PyAny>,
) -> Result<(Vec<Value>, Vec<ValueType>), PyWeirError> {
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        if tuple.is_empty() {
            return Err(PyWeirError::InvalidKey {
                key: short_repr(obj),
                reason: "an empty tuple has no key columns",
            });
        }
        let mut values = Vec::with_capacity(tuple.len());
        let mut types = Vec::with_capacity(tuple.len());
        for column in tuple.iter() {
            let (value, ty) = key_column(&column, obj)?;
            values.push(value);
            types.push(ty);
        }
        Ok((values, types))
    } else {
        let (value, ty) = key_column(obj, obj)?;
        Ok((vec![value], vec![ty]))
    }
}

fn key_column(
    column: &Bound<'_, PyAny>,
    key: &Bound<'_, PyAny>,
) -> Result<(Value, ValueType), PyWeirError> {
    let invalid = |reason| PyWeirError::InvalidKey {
        key: short_repr(key),
        reason,
    };
    if let Ok(b) = column.cast::<PyBool>() {
        Ok((Value::Boolean(b.is_true()), ValueType::Boolean))
    } else if column.is_instance_of::<PyInt>() {
        let v: i64 = column
            .extract()
            .map_err(|_| invalid("an int key must fit in 64 bits (Spark's LongType)"))?;
        Ok((Value::Int64(v), ValueType::Int64))
    } else if let Ok(s) = column.cast::<PyString>() {
        let s = s
            .to_str()
            .map_err(|_| invalid("a str key must be valid UTF-8"))?;
        Ok((Value::Utf8(s.to_owned()), ValueType::Utf8))
    } else if let Ok(b) = column.cast::<PyBytes>() {
        Ok((Value::Binary(b.as_bytes().to_vec()), ValueType::Binary))
    } else if column.is_instance_of::<PyFloat>() {
        Ok((
            Value::Float64(column.extract().map_err(|_| invalid("bad float"))?),
            ValueType::Float64,
        ))
    } else if column.is_none() {
        Err(invalid(
            "a key (column) may not be None: map missing keys to a value in the key selector",
        ))
    } else {
        Err(invalid(
            "a key is an int, str, bytes, bool or float, or a tuple of those (a composite key)",
        ))
    }
}
