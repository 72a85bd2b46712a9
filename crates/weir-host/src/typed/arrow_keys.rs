//! Keys read straight from the Arrow columns of a batch: the vectorized path
//! encodes a batch's keys without turning each one into a language object.
//!
//! A cell answers the accessors its column's type can: exact integers widen
//! (an `int32` column serves an `int64` key, as a Python `int` does) and
//! `float64` narrows to `float32` as storing one means; anything else is a
//! mismatch that [`TypedSession::keys`](super::TypedSession::keys) reports
//! with the key and both types.

use std::borrow::Cow;
use std::convert::Infallible;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use weir_types::{Field, ValueSource, ValueType};

use super::keys::KeySource;

/// Row `row` of a batch's key columns: one cell for a key of one column, the
/// row of every column for a composite key.
#[derive(Clone)]
pub enum ArrowKey<'a> {
    /// A composite key: the row across several columns.
    Row {
        /// The key columns.
        columns: &'a [ArrayRef],
        /// The row.
        row: usize,
    },
    /// One column's value in a row.
    Cell {
        /// The column.
        array: &'a dyn Array,
        /// The row.
        row: usize,
    },
}

impl<'a> ArrowKey<'a> {
    /// The key in row `row` of `columns`.
    pub fn new(columns: &'a [ArrayRef], row: usize) -> Self {
        match columns {
            [one] => ArrowKey::Cell {
                array: one.as_ref(),
                row,
            },
            _ => ArrowKey::Row { columns, row },
        }
    }

    fn cell(&self) -> Option<(&'a dyn Array, usize)> {
        match *self {
            ArrowKey::Cell { array, row } => Some((array, row)),
            ArrowKey::Row { .. } => None,
        }
    }

    fn integer(&self) -> Option<i64> {
        let (array, row) = self.cell()?;
        macro_rules! read {
            ($($kind:ty),*) => {
                $(if let Some(a) = array.as_primitive_opt::<$kind>() {
                    return Some(i64::from(a.value(row)));
                })*
            };
        }
        read!(
            Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type
        );
        None
    }
}

impl ValueSource for ArrowKey<'_> {
    type Items = std::vec::IntoIter<Self>;
    type Error = Infallible;

    fn is_null(&self) -> bool {
        self.cell().is_some_and(|(array, row)| array.is_null(row))
    }

    fn boolean(&self) -> Option<bool> {
        let (array, row) = self.cell()?;
        Some(array.as_boolean_opt()?.value(row))
    }

    fn int32(&self) -> Option<i32> {
        i32::try_from(self.integer()?).ok()
    }

    fn int64(&self) -> Option<i64> {
        self.integer()
    }

    fn float32(&self) -> Option<f32> {
        let (array, row) = self.cell()?;
        if let Some(a) = array.as_primitive_opt::<Float32Type>() {
            return Some(a.value(row));
        }
        self.float64().map(|v| v as f32)
    }

    fn float64(&self) -> Option<f64> {
        let (array, row) = self.cell()?;
        if let Some(a) = array.as_primitive_opt::<Float64Type>() {
            return Some(a.value(row));
        }
        Some(f64::from(
            array.as_primitive_opt::<Float32Type>()?.value(row),
        ))
    }

    fn utf8(&self) -> Option<&str> {
        let (array, row) = self.cell()?;
        match array.data_type() {
            DataType::Utf8 => Some(array.as_string::<i32>().value(row)),
            DataType::LargeUtf8 => Some(array.as_string::<i64>().value(row)),
            _ => None,
        }
    }

    fn binary(&self) -> Option<Cow<'_, [u8]>> {
        let (array, row) = self.cell()?;
        match array.data_type() {
            DataType::Binary => Some(Cow::Borrowed(array.as_binary::<i32>().value(row))),
            DataType::LargeBinary => Some(Cow::Borrowed(array.as_binary::<i64>().value(row))),
            _ => None,
        }
    }

    fn pickled(&self) -> Result<Option<Cow<'_, [u8]>>, Infallible> {
        Ok(None)
    }

    fn list(&self) -> Option<Self::Items> {
        None
    }

    fn fields(&self, _fields: &[Field]) -> Option<Self::Items> {
        None
    }

    fn describe(&self) -> String {
        match *self {
            ArrowKey::Cell { array, row } => {
                let value = display_cell(array, row);
                format!("{value} ({})", array.data_type())
            }
            ArrowKey::Row { columns, row } => {
                let cells: Vec<String> = columns
                    .iter()
                    .map(|c| display_cell(c.as_ref(), row))
                    .collect();
                format!("({})", cells.join(", "))
            }
        }
    }
}

/// A cell as error messages show it.
fn display_cell(array: &dyn Array, row: usize) -> String {
    let cell = ArrowKey::Cell { array, row };
    if array.is_null(row) {
        return "null".to_owned();
    }
    if let Some(v) = cell.integer() {
        return v.to_string();
    }
    if let Some(v) = cell.float64() {
        return v.to_string();
    }
    if let Some(v) = cell.boolean() {
        return v.to_string();
    }
    if let Some(v) = cell.utf8() {
        return format!("{v:?}");
    }
    format!("a {} value", array.data_type())
}

impl KeySource for ArrowKey<'_> {
    fn columns(&self) -> Option<Self::Items> {
        match *self {
            ArrowKey::Row { columns, row } => Some(
                columns
                    .iter()
                    .map(|array| ArrowKey::Cell {
                        array: array.as_ref(),
                        row,
                    })
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            ArrowKey::Cell { .. } => None,
        }
    }

    fn column_type(&self) -> Result<ValueType, &'static str> {
        let (array, _) = self
            .cell()
            .ok_or("a key column is a scalar: a boolean, number, string or bytes")?;
        ValueType::from_arrow(array.data_type())
            .ok()
            .filter(|ty| {
                !matches!(
                    ty,
                    ValueType::List { .. } | ValueType::Struct { .. } | ValueType::Pickle
                )
            })
            .ok_or("a key column is a scalar: a boolean, number, string or bytes")
    }
}
