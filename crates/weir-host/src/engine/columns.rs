//! Between encoded state values and Arrow arrays of the state's type (the
//! vectorized `get_batch` / `put_batch` path).
//!
//! Supported: bool, int32, int64, float32, float64, string, binary, pickle
//! (as binary) and structs of those, which covers accumulators such as
//! `(count, sum)`. Lists are refused with a message naming the byte-level
//! methods that handle them.
//!
//! Both directions go through the value codec's own walks
//! ([`encode_with`](weir_types::encode_with),
//! [`decode_with`](weir_types::decode_with)), so the bytes are spelled in one
//! place, but neither builds a [`Value`] per row: a row of a batch is read
//! where it lies ([`ArrowColumn`]), and decoded parts go straight to the
//! builder of the field they belong to ([`ColumnBuilder`]). Building a
//! `Value` (a vector per struct, a type check per field) cost more than the
//! state access itself.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int32Builder, Int64Builder,
    NullBufferBuilder, StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array,
    StringArray, StructArray,
};
use arrow_schema::{DataType, Fields};
use weir_types::{Field, Value, ValueBuilder, ValueSource, ValueType, decode_with};

use crate::error::{HostError, Result};

fn unsupported(state: &str, ty: &ValueType) -> HostError {
    HostError::InvalidRequest(format!(
        "state {state:?} holds {ty}; Arrow batches support bool, int32, int64, float32, \
         float64, string, binary, pickle and structs of those; use the encoded-bytes \
         methods (get_values/put_values) for it"
    ))
}

fn mismatch(state: &str, ty: &ValueType, got: &DataType) -> HostError {
    HostError::InvalidRequest(format!(
        "state {state:?} holds {ty} (Arrow {}); the batch is Arrow {got}",
        ty.to_arrow()
    ))
}

/// The builder of one field that is not a struct.
enum LeafBuilder {
    Boolean(BooleanBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Utf8(StringBuilder),
    Binary(BinaryBuilder),
}

impl LeafBuilder {
    fn append_null(&mut self) {
        match self {
            Self::Boolean(b) => b.append_null(),
            Self::Int32(b) => b.append_null(),
            Self::Int64(b) => b.append_null(),
            Self::Float32(b) => b.append_null(),
            Self::Float64(b) => b.append_null(),
            Self::Utf8(b) => b.append_null(),
            Self::Binary(b) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Boolean(b) => Arc::new(b.finish()),
            Self::Int32(b) => Arc::new(b.finish()),
            Self::Int64(b) => Arc::new(b.finish()),
            Self::Float32(b) => Arc::new(b.finish()),
            Self::Float64(b) => Arc::new(b.finish()),
            Self::Utf8(b) => Arc::new(b.finish()),
            Self::Binary(b) => Arc::new(b.finish()),
        }
    }
}

/// A part of the type: a leaf, or a struct whose fields are the nodes after
/// it up to `end`.
enum Node {
    Leaf(LeafBuilder),
    Struct {
        fields: Fields,
        nulls: NullBufferBuilder,
        end: usize,
    },
}

/// Appends values to an Arrow array of one [`ValueType`]: decoded from their
/// encoding ([`ColumnBuilder::append_encoded`]) or given as [`Value`]s.
///
/// The type's parts are kept in the order the codec's walk visits them (a
/// struct before its fields), and a cursor follows the walk: each part it
/// hands over goes to the node under the cursor. After an error the builder
/// is left mid-value; drop it.
pub(crate) struct ColumnBuilder {
    nodes: Vec<Node>,
    /// The node the walk's next part belongs to.
    cursor: usize,
    /// The structs whose fields are being appended, innermost last.
    open: Vec<usize>,
}

impl ColumnBuilder {
    /// A builder for `rows` values of `ty`; `state` names the state in errors.
    pub(crate) fn new(state: &str, ty: &ValueType, rows: usize) -> Result<Self> {
        let mut nodes = Vec::new();
        push_nodes(state, ty, rows, &mut nodes)?;
        Ok(Self {
            nodes,
            cursor: 0,
            open: Vec::new(),
        })
    }

    /// Appends an absent value.
    pub(crate) fn append_null(&mut self) {
        self.null_part();
        self.cursor = 0;
    }

    /// Appends the value encoded in `bytes` (of type `ty`, this builder's).
    pub(crate) fn append_encoded(&mut self, bytes: &[u8], ty: &ValueType) -> Result<()> {
        decode_with(bytes, ty, self)?;
        self.value_done()
    }

    /// Appends `value`, which must have this builder's type.
    pub(crate) fn append(&mut self, value: &Value) -> Result<()> {
        self.append_part(value)?;
        self.value_done()
    }

    fn append_part(&mut self, value: &Value) -> Result<()> {
        match value {
            Value::Null => self.null(),
            Value::Boolean(v) => self.boolean(*v),
            Value::Int32(v) => self.int32(*v),
            Value::Int64(v) => self.int64(*v),
            Value::Float32(v) => self.float32(*v),
            Value::Float64(v) => self.float64(*v),
            Value::Utf8(v) => self.utf8(v),
            Value::Binary(v) => self.binary(v),
            Value::List(_) => Err(does_not_fit("a list")),
            Value::Struct(fields) => {
                self.begin_structure()?;
                for field in fields {
                    self.append_part(field)?;
                }
                self.structure(Vec::new())
            }
        }
    }

    /// Checks that the walk ended with the value's last part.
    fn value_done(&mut self) -> Result<()> {
        if self.cursor != self.nodes.len() || !self.open.is_empty() {
            return Err(does_not_fit("a value with fewer fields"));
        }
        self.cursor = 0;
        Ok(())
    }

    /// Appends a null to the node under the cursor (to every node of a
    /// struct: a null struct row still has a row in each field).
    fn null_part(&mut self) {
        let end = match &self.nodes[self.cursor] {
            Node::Leaf(_) => self.cursor + 1,
            Node::Struct { end, .. } => *end,
        };
        for node in &mut self.nodes[self.cursor..end] {
            match node {
                Node::Leaf(leaf) => leaf.append_null(),
                Node::Struct { nulls, .. } => nulls.append_null(),
            }
        }
        self.cursor = end;
    }

    /// The leaf under the cursor, which takes the walk's next scalar.
    fn leaf(&mut self, kind: &'static str) -> Result<&mut LeafBuilder> {
        let at = self.cursor;
        self.cursor += 1;
        match self.nodes.get_mut(at) {
            Some(Node::Leaf(leaf)) => Ok(leaf),
            _ => Err(does_not_fit(kind)),
        }
    }
}

fn does_not_fit(part: &str) -> HostError {
    // The decoder produced a value of the state's own type, so this means
    // the stored bytes and the descriptor disagree.
    HostError::InvalidRequest(format!(
        "a stored value ({part}) does not fit the state's Arrow type"
    ))
}

/// Appends the nodes of `ty` (see [`Node`]) to `nodes`.
fn push_nodes(state: &str, ty: &ValueType, rows: usize, nodes: &mut Vec<Node>) -> Result<()> {
    let leaf = match ty {
        ValueType::Boolean => LeafBuilder::Boolean(BooleanBuilder::with_capacity(rows)),
        ValueType::Int32 => LeafBuilder::Int32(Int32Builder::with_capacity(rows)),
        ValueType::Int64 => LeafBuilder::Int64(Int64Builder::with_capacity(rows)),
        ValueType::Float32 => LeafBuilder::Float32(Float32Builder::with_capacity(rows)),
        ValueType::Float64 => LeafBuilder::Float64(Float64Builder::with_capacity(rows)),
        ValueType::Utf8 => LeafBuilder::Utf8(StringBuilder::with_capacity(rows, rows * 8)),
        ValueType::Binary | ValueType::Pickle => {
            LeafBuilder::Binary(BinaryBuilder::with_capacity(rows, rows * 8))
        }
        ValueType::Struct { fields } => {
            let DataType::Struct(arrow_fields) = ty.to_arrow() else {
                return Err(unsupported(state, ty));
            };
            let at = nodes.len();
            nodes.push(Node::Struct {
                fields: arrow_fields,
                nulls: NullBufferBuilder::new(rows),
                end: 0,
            });
            for field in fields {
                push_nodes(state, &field.data_type, rows, nodes)?;
            }
            let after = nodes.len();
            if let Node::Struct { end, .. } = &mut nodes[at] {
                *end = after;
            }
            return Ok(());
        }
        ValueType::List { .. } => return Err(unsupported(state, ty)),
    };
    nodes.push(Node::Leaf(leaf));
    Ok(())
}

impl ColumnBuilder {
    /// The finished array.
    pub(crate) fn finish(mut self) -> Result<ArrayRef> {
        let mut nodes = self.nodes.iter_mut();
        finish_node(&mut nodes)
    }
}

/// Finishes the node `nodes` yields next, with the fields that follow it.
fn finish_node<'a>(nodes: &mut impl Iterator<Item = &'a mut Node>) -> Result<ArrayRef> {
    match nodes.next() {
        Some(Node::Leaf(leaf)) => Ok(leaf.finish()),
        Some(Node::Struct { fields, nulls, .. }) => {
            let arrays = (0..fields.len())
                .map(|_| finish_node(nodes))
                .collect::<Result<Vec<_>>>()?;
            // The length is given for a struct without fields, which has no
            // field array to take it from.
            let rows = nulls.len();
            let array =
                StructArray::try_new_with_length(fields.clone(), arrays, nulls.finish(), rows)
                    .map_err(|e| {
                        HostError::InvalidRequest(format!(
                            "stored values do not form a valid struct array: {e}"
                        ))
                    })?;
            Ok(Arc::new(array))
        }
        None => unreachable!("a struct node is followed by its fields"),
    }
}

/// Appends a scalar to the leaf under the cursor, if it has the scalar's type.
macro_rules! append_scalar {
    ($builder:expr, $variant:ident, $kind:literal, $value:expr) => {
        match $builder.leaf($kind)? {
            LeafBuilder::$variant(leaf) => {
                leaf.append_value($value);
                Ok(())
            }
            _ => Err(does_not_fit($kind)),
        }
    };
}

/// The decoder's walk hands each part to the node under the cursor.
impl ValueBuilder for ColumnBuilder {
    type Output = ();
    type Error = HostError;

    fn null(&mut self) -> Result<()> {
        if self.cursor >= self.nodes.len() {
            return Err(does_not_fit("a null"));
        }
        self.null_part();
        Ok(())
    }
    fn boolean(&mut self, v: bool) -> Result<()> {
        append_scalar!(self, Boolean, "a boolean", v)
    }
    fn int32(&mut self, v: i32) -> Result<()> {
        append_scalar!(self, Int32, "an int32", v)
    }
    fn int64(&mut self, v: i64) -> Result<()> {
        append_scalar!(self, Int64, "an int64", v)
    }
    fn float32(&mut self, v: f32) -> Result<()> {
        append_scalar!(self, Float32, "a float32", v)
    }
    fn float64(&mut self, v: f64) -> Result<()> {
        append_scalar!(self, Float64, "a float64", v)
    }
    fn utf8(&mut self, v: &str) -> Result<()> {
        append_scalar!(self, Utf8, "a string", v)
    }
    fn binary(&mut self, v: &[u8]) -> Result<()> {
        append_scalar!(self, Binary, "bytes", v)
    }
    fn pickled(&mut self, v: &[u8]) -> Result<()> {
        self.binary(v)
    }
    fn list(&mut self, _items: Vec<()>) -> Result<()> {
        Err(does_not_fit("a list"))
    }
    fn begin_structure(&mut self) -> Result<()> {
        match self.nodes.get(self.cursor) {
            Some(Node::Struct { .. }) => {
                self.open.push(self.cursor);
                self.cursor += 1;
                Ok(())
            }
            _ => Err(does_not_fit("a struct")),
        }
    }
    fn structure(&mut self, _fields: Vec<()>) -> Result<()> {
        let cursor = self.cursor;
        match self.open.pop().map(|at| &mut self.nodes[at]) {
            Some(Node::Struct { nulls, end, .. }) if *end == cursor => {
                nulls.append_non_null();
                Ok(())
            }
            _ => Err(does_not_fit("a struct with other fields")),
        }
    }
}

/// A column of a batch, checked against the state's type and cast once, so
/// its rows are read without a check each.
pub(crate) enum ArrowColumn<'a> {
    Boolean(&'a BooleanArray),
    Int32(&'a Int32Array),
    Int64(&'a Int64Array),
    Float32(&'a Float32Array),
    Float64(&'a Float64Array),
    Utf8(&'a StringArray),
    Binary(&'a BinaryArray),
    Struct {
        array: &'a StructArray,
        fields: Vec<ArrowColumn<'a>>,
    },
}

impl<'a> ArrowColumn<'a> {
    /// `array` as values of `ty`: the error says how they differ (before any
    /// row is written, so a wrong batch changes nothing).
    pub(crate) fn new(state: &str, ty: &ValueType, array: &'a dyn Array) -> Result<Self> {
        let column = match ty {
            ValueType::Boolean => array.as_boolean_opt().map(Self::Boolean),
            ValueType::Int32 => array.as_primitive_opt::<Int32Type>().map(Self::Int32),
            ValueType::Int64 => array.as_primitive_opt::<Int64Type>().map(Self::Int64),
            ValueType::Float32 => array.as_primitive_opt::<Float32Type>().map(Self::Float32),
            ValueType::Float64 => array.as_primitive_opt::<Float64Type>().map(Self::Float64),
            ValueType::Utf8 => array.as_string_opt::<i32>().map(Self::Utf8),
            ValueType::Binary | ValueType::Pickle => array.as_binary_opt::<i32>().map(Self::Binary),
            ValueType::Struct { fields } => match array.as_struct_opt() {
                Some(s) if s.num_columns() == fields.len() => Some(Self::Struct {
                    array: s,
                    fields: fields
                        .iter()
                        .zip(s.columns())
                        .map(|(f, column)| Self::new(state, &f.data_type, column.as_ref()))
                        .collect::<Result<_>>()?,
                }),
                _ => None,
            },
            ValueType::List { .. } => return Err(unsupported(state, ty)),
        };
        column.ok_or_else(|| mismatch(state, ty, array.data_type()))
    }

    /// Row `row`, to encode.
    pub(crate) fn row(&'a self, row: usize) -> ArrowCell<'a> {
        ArrowCell { column: self, row }
    }

    fn array(&self) -> &dyn Array {
        match self {
            Self::Boolean(a) => *a,
            Self::Int32(a) => *a,
            Self::Int64(a) => *a,
            Self::Float32(a) => *a,
            Self::Float64(a) => *a,
            Self::Utf8(a) => *a,
            Self::Binary(a) => *a,
            Self::Struct { array, .. } => *array,
        }
    }
}

/// One row of an [`ArrowColumn`], which the codec's walk encodes.
#[derive(Clone, Copy)]
pub(crate) struct ArrowCell<'a> {
    column: &'a ArrowColumn<'a>,
    row: usize,
}

/// The fields of a struct row, as cells.
pub(crate) struct ArrowFields<'a> {
    fields: std::slice::Iter<'a, ArrowColumn<'a>>,
    row: usize,
}

impl<'a> Iterator for ArrowFields<'a> {
    type Item = ArrowCell<'a>;

    fn next(&mut self) -> Option<ArrowCell<'a>> {
        let row = self.row;
        self.fields.next().map(|column| ArrowCell { column, row })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.fields.size_hint()
    }
}

impl ExactSizeIterator for ArrowFields<'_> {}

/// The value at the cell's row if its column is a `$variant` array.
macro_rules! value_at {
    ($cell:expr, $variant:ident) => {
        match $cell.column {
            ArrowColumn::$variant(array) => Some(array.value($cell.row)),
            _ => None,
        }
    };
}

/// Each accessor answers for the one array type that [`ArrowColumn::new`]
/// matched to the state's type, so no value is converted.
impl<'a> ValueSource for ArrowCell<'a> {
    type Items = ArrowFields<'a>;
    type Error = Infallible;

    fn is_null(&self) -> bool {
        self.column.array().is_null(self.row)
    }
    fn boolean(&self) -> Option<bool> {
        value_at!(self, Boolean)
    }
    fn int32(&self) -> Option<i32> {
        value_at!(self, Int32)
    }
    fn int64(&self) -> Option<i64> {
        value_at!(self, Int64)
    }
    fn float32(&self) -> Option<f32> {
        value_at!(self, Float32)
    }
    fn float64(&self) -> Option<f64> {
        value_at!(self, Float64)
    }
    fn utf8(&self) -> Option<&str> {
        value_at!(self, Utf8)
    }
    fn binary(&self) -> Option<Cow<'_, [u8]>> {
        value_at!(self, Binary).map(Cow::Borrowed)
    }
    /// A pickle state's column holds the pickled bytes.
    fn pickled(&self) -> std::result::Result<Option<Cow<'_, [u8]>>, Infallible> {
        Ok(self.binary())
    }
    fn list(&self) -> Option<ArrowFields<'a>> {
        None
    }
    fn fields(&self, fields: &[Field]) -> Option<ArrowFields<'a>> {
        match self.column {
            ArrowColumn::Struct {
                fields: columns, ..
            } if columns.len() == fields.len() => Some(ArrowFields {
                fields: columns.iter(),
                row: self.row,
            }),
            _ => None,
        }
    }
    fn describe(&self) -> String {
        format!(
            "row {} of an Arrow {} column",
            self.row,
            self.column.array().data_type()
        )
    }
}

#[cfg(test)]
mod tests {
    use weir_types::{decode_value, encode_value, encode_with};

    use super::*;

    /// A struct with every supported leaf, a nested struct and a struct
    /// without fields, nullable and not.
    fn nested() -> ValueType {
        let inner = ValueType::Struct {
            fields: vec![
                Field::new("n", ValueType::Int32, false),
                Field::new("label", ValueType::Utf8, true),
            ],
        };
        ValueType::Struct {
            fields: vec![
                Field::new("flag", ValueType::Boolean, false),
                Field::new("count", ValueType::Int64, false),
                Field::new("ratio", ValueType::Float32, true),
                Field::new("sum", ValueType::Float64, false),
                Field::new("empty", ValueType::Struct { fields: Vec::new() }, false),
                Field::new("inner", inner, true),
                Field::new("raw", ValueType::Binary, true),
                Field::new("object", ValueType::Pickle, false),
            ],
        }
    }

    fn values() -> Vec<Value> {
        let row = |i: i64, inner: Value, ratio: Value| {
            Value::Struct(vec![
                Value::Boolean(i % 2 == 0),
                Value::Int64(i),
                ratio,
                Value::Float64(i as f64 / 2.0),
                Value::Struct(Vec::new()),
                inner,
                if i == 1 {
                    Value::Null
                } else {
                    Value::Binary(vec![i as u8; 3])
                },
                Value::Binary(vec![0x80, i as u8]),
            ])
        };
        vec![
            row(
                0,
                Value::Struct(vec![Value::Int32(7), Value::Utf8("x".into())]),
                Value::Float32(0.5),
            ),
            row(1, Value::Null, Value::Null),
            Value::Null,
            row(
                3,
                Value::Struct(vec![Value::Int32(-1), Value::Null]),
                Value::Float32(1.5),
            ),
        ]
    }

    /// Decoding into the builder and encoding its array's rows give back the
    /// codec's own bytes: the batch path reads and writes what
    /// `encode_value` / `decode_value` do.
    #[test]
    fn arrays_read_and_write_what_the_value_codec_does() {
        let ty = nested();
        let values = values();
        let mut decoded = ColumnBuilder::new("acc", &ty, values.len()).expect("supported");
        let mut given = ColumnBuilder::new("acc", &ty, values.len()).expect("supported");
        let mut encoded = Vec::new();
        for value in &values {
            given.append(value).expect("fits");
            if *value == Value::Null {
                decoded.append_null();
                encoded.push(None);
            } else {
                let mut bytes = Vec::new();
                encode_value(value, &ty, &mut bytes).expect("encodes");
                decoded.append_encoded(&bytes, &ty).expect("decodes");
                encoded.push(Some(bytes));
            }
        }
        let array = decoded.finish().expect("valid");
        assert_eq!(&array, &given.finish().expect("valid"));
        let column = ArrowColumn::new("acc", &ty, array.as_ref()).expect("fits");
        for (row, expected) in encoded.iter().enumerate() {
            let cell = column.row(row);
            assert_eq!(cell.is_null(), expected.is_none(), "row {row}");
            if let Some(expected) = expected {
                let mut bytes = Vec::new();
                encode_with(&cell, &ty, &mut bytes)
                    .map_err(|e| e.into_type_mismatch())
                    .expect("encodes");
                assert_eq!(&bytes, expected, "row {row}");
                assert_eq!(
                    decode_value(&bytes, &ty).expect("decodes"),
                    values[row],
                    "row {row}"
                );
            }
        }
    }

    #[test]
    fn values_of_another_shape_are_refused() {
        let ty = nested();
        let mut builder = ColumnBuilder::new("acc", &ty, 1).expect("supported");
        let short = Value::Struct(vec![Value::Boolean(true)]);
        assert!(builder.append(&short).is_err(), "a field missing");
        let mut builder = ColumnBuilder::new("acc", &ValueType::Int64, 1).expect("supported");
        let err = builder
            .append(&Value::Utf8("1".into()))
            .expect_err("a string");
        assert!(err.to_string().contains("does not fit"), "{err}");
        let mut bytes = Vec::new();
        encode_value(&Value::Int32(1), &ValueType::Int32, &mut bytes).expect("encodes");
        let mut builder = ColumnBuilder::new("acc", &ValueType::Int64, 1).expect("supported");
        assert!(
            builder.append_encoded(&bytes, &ValueType::Int64).is_err(),
            "4 bytes"
        );
    }
}
