//! The types state values and keys may have, and their Arrow equivalents.

use std::fmt;

use arrow_schema::{DataType, Field as ArrowField, Fields};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TypesError};

/// Arrow field metadata marking a binary column as pickled Python objects.
const PICKLE_METADATA_KEY: &str = "weir.encoding";
const PICKLE_METADATA_VALUE: &str = "pickle";

/// The type of a state value or key column; recorded in snapshots so they are
/// self-describing and restores can check compatibility.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ValueType {
    /// Arrow `bool`.
    Boolean,
    /// Arrow `int32`.
    Int32,
    /// Arrow `int64`.
    Int64,
    /// Arrow `float32`.
    Float32,
    /// Arrow `float64`.
    Float64,
    /// Arrow `utf8`.
    Utf8,
    /// Arrow `binary`.
    Binary,
    /// Arrow `list<item>`; items may be null.
    List {
        /// The item type.
        item: Box<ValueType>,
    },
    /// Arrow `struct<...>`.
    Struct {
        /// The fields in order.
        fields: Vec<Field>,
    },
    /// An opaque Python object serialized with `pickle` (Arrow `binary`
    /// tagged with field metadata `weir.encoding = pickle`).
    Pickle,
}

/// A named field of a struct type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Field {
    /// The field name.
    pub name: String,
    /// The field type.
    pub data_type: ValueType,
    /// Whether the field may be null.
    pub nullable: bool,
}

impl Field {
    /// A field.
    pub fn new(name: impl Into<String>, data_type: ValueType, nullable: bool) -> Self {
        Self {
            name: name.into(),
            data_type,
            nullable,
        }
    }
}

impl ValueType {
    /// The Arrow field for a value of this type named `name`.
    pub fn to_arrow_field(&self, name: &str, nullable: bool) -> ArrowField {
        let field = ArrowField::new(name, self.to_arrow(), nullable);
        if matches!(self, ValueType::Pickle) {
            field.with_metadata(std::collections::HashMap::from([(
                PICKLE_METADATA_KEY.to_owned(),
                PICKLE_METADATA_VALUE.to_owned(),
            )]))
        } else {
            field
        }
    }

    /// The Arrow data type (pickle is `binary`; see [`ValueType::to_arrow_field`]).
    pub fn to_arrow(&self) -> DataType {
        match self {
            ValueType::Boolean => DataType::Boolean,
            ValueType::Int32 => DataType::Int32,
            ValueType::Int64 => DataType::Int64,
            ValueType::Float32 => DataType::Float32,
            ValueType::Float64 => DataType::Float64,
            ValueType::Utf8 => DataType::Utf8,
            ValueType::Binary | ValueType::Pickle => DataType::Binary,
            ValueType::List { item } => DataType::List(item.to_arrow_field("item", true).into()),
            ValueType::Struct { fields } => DataType::Struct(Fields::from(
                fields
                    .iter()
                    .map(|f| f.data_type.to_arrow_field(&f.name, f.nullable))
                    .collect::<Vec<_>>(),
            )),
        }
    }

    /// The Weir type of an Arrow field (honouring the pickle marker).
    pub fn from_arrow_field(field: &ArrowField) -> Result<Self> {
        if field
            .metadata()
            .get(PICKLE_METADATA_KEY)
            .map(String::as_str)
            == Some(PICKLE_METADATA_VALUE)
        {
            return Ok(ValueType::Pickle);
        }
        Self::from_arrow(field.data_type())
    }

    /// The type of a key column of Spark SQL type `name`, which decides how
    /// Spark hashes its values: `int`, `long`, `string`, `binary`, `double`
    /// or `boolean`.
    pub fn of_spark_column(name: &str) -> Result<Self> {
        Ok(match name {
            "int" => ValueType::Int32,
            "long" => ValueType::Int64,
            "string" => ValueType::Utf8,
            "binary" => ValueType::Binary,
            "double" => ValueType::Float64,
            "boolean" => ValueType::Boolean,
            _ => {
                return Err(TypesError::UnknownName {
                    what: "key column type",
                    name: name.to_owned(),
                    expected: "int, long, string, binary, double or boolean",
                });
            }
        })
    }

    /// The Weir type of an Arrow data type.
    pub fn from_arrow(data_type: &DataType) -> Result<Self> {
        Ok(match data_type {
            DataType::Boolean => ValueType::Boolean,
            DataType::Int32 => ValueType::Int32,
            DataType::Int64 => ValueType::Int64,
            DataType::Float32 => ValueType::Float32,
            DataType::Float64 => ValueType::Float64,
            DataType::Utf8 | DataType::LargeUtf8 => ValueType::Utf8,
            DataType::Binary | DataType::LargeBinary => ValueType::Binary,
            DataType::List(item) | DataType::LargeList(item) => ValueType::List {
                item: Box::new(Self::from_arrow_field(item)?),
            },
            DataType::Struct(fields) => ValueType::Struct {
                fields: fields
                    .iter()
                    .map(|f| {
                        Ok(Field::new(
                            f.name(),
                            Self::from_arrow_field(f)?,
                            f.is_nullable(),
                        ))
                    })
                    .collect::<Result<_>>()?,
            },
            other => {
                return Err(TypesError::UnsupportedArrowType {
                    arrow: other.to_string(),
                });
            }
        })
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueType::Boolean => f.write_str("bool"),
            ValueType::Int32 => f.write_str("int32"),
            ValueType::Int64 => f.write_str("int64"),
            ValueType::Float32 => f.write_str("float32"),
            ValueType::Float64 => f.write_str("float64"),
            ValueType::Utf8 => f.write_str("string"),
            ValueType::Binary => f.write_str("binary"),
            ValueType::Pickle => f.write_str("pickle"),
            ValueType::List { item } => write!(f, "list<{item}>"),
            ValueType::Struct { fields } => {
                f.write_str("struct<")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: {}", field.name, field.data_type)?;
                }
                f.write_str(">")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrow_round_trip() {
        let t = ValueType::Struct {
            fields: vec![
                Field::new("count", ValueType::Int64, false),
                Field::new(
                    "names",
                    ValueType::List {
                        item: Box::new(ValueType::Utf8),
                    },
                    true,
                ),
                Field::new("blob", ValueType::Pickle, true),
            ],
        };
        let field = t.to_arrow_field("v", false);
        assert_eq!(ValueType::from_arrow_field(&field).expect("supported"), t);
        assert_eq!(
            t.to_string(),
            "struct<count: int64, names: list<string>, blob: pickle>"
        );
    }

    #[test]
    fn unsupported_arrow_types_are_errors() {
        let err = ValueType::from_arrow(&DataType::Float16).expect_err("unsupported");
        assert!(err.to_string().contains("Float16"), "{err}");
    }
}
