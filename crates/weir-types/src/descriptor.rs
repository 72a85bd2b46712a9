//! State descriptors: a state's name, kind, types and TTL.

use serde::{Deserialize, Serialize};

use crate::error::{Result, TypesError};
use crate::value_type::ValueType;

/// The kinds of keyed state (Flink's `ValueState`, `ListState`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateKind {
    /// One value per key and namespace.
    Value,
    /// An appendable list per key and namespace.
    List,
    /// A value folded with a reduce function on `add`.
    Reducing,
    /// An accumulator folded with an aggregate function on `add`.
    Aggregating,
    /// A map from user keys to values per key and namespace.
    Map,
}

impl StateKind {
    /// The name users know this kind by.
    pub fn as_str(self) -> &'static str {
        match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Reducing => "reducing",
            StateKind::Aggregating => "aggregating",
            StateKind::Map => "map",
        }
    }
}

impl std::str::FromStr for StateKind {
    type Err = TypesError;

    fn from_str(name: &str) -> Result<Self> {
        Ok(match name {
            "value" => StateKind::Value,
            "list" => StateKind::List,
            "reducing" => StateKind::Reducing,
            "aggregating" => StateKind::Aggregating,
            "map" => StateKind::Map,
            _ => {
                return Err(TypesError::UnknownName {
                    what: "state kind",
                    name: name.to_owned(),
                    expected: "value, list, reducing, aggregating or map",
                });
            }
        })
    }
}

impl std::fmt::Display for StateKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When a state entry's time-to-live is refreshed (Flink's `UpdateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TtlUpdate {
    /// Refreshed when the entry is created or written.
    OnCreateAndWrite,
    /// Refreshed on reads too.
    OnReadAndWrite,
}

impl std::str::FromStr for TtlUpdate {
    type Err = TypesError;

    /// `on_create_and_write` or `on_read_and_write`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "on_create_and_write" => Ok(TtlUpdate::OnCreateAndWrite),
            "on_read_and_write" => Ok(TtlUpdate::OnReadAndWrite),
            _ => Err(TypesError::UnknownName {
                what: "time-to-live update type",
                name: name.to_owned(),
                expected: "on_create_and_write or on_read_and_write",
            }),
        }
    }
}

/// Time-to-live of state entries; expired entries are never returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TtlConfig {
    /// How long an entry lives after its last refresh, in milliseconds.
    pub ttl_millis: u64,
    /// What refreshes it.
    pub update: TtlUpdate,
}

/// Describes one keyed state of an operator; its name is unique per operator.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateDescriptor {
    /// The state's name, unique within its operator.
    pub name: String,
    /// Its kind.
    pub kind: StateKind,
    /// The type of values (list items for lists, map values for maps,
    /// accumulators for aggregating state).
    pub value_type: ValueType,
    /// The type of user keys; `Some` exactly for map state.
    pub user_key_type: Option<ValueType>,
    /// Time-to-live, if any.
    pub ttl: Option<TtlConfig>,
}

impl StateDescriptor {
    /// A descriptor of a non-map state.
    pub fn new(name: impl Into<String>, kind: StateKind, value_type: ValueType) -> Result<Self> {
        Self {
            name: name.into(),
            kind,
            value_type,
            user_key_type: None,
            ttl: None,
        }
        .validated()
    }

    /// A map state descriptor.
    pub fn map(
        name: impl Into<String>,
        user_key_type: ValueType,
        value_type: ValueType,
    ) -> Result<Self> {
        Self {
            name: name.into(),
            kind: StateKind::Map,
            value_type,
            user_key_type: Some(user_key_type),
            ttl: None,
        }
        .validated()
    }

    /// The same descriptor with a time-to-live.
    pub fn with_ttl(mut self, ttl: TtlConfig) -> Result<Self> {
        self.ttl = Some(ttl);
        self.validated()
    }

    /// Checks the parts fit together; deserialized descriptors should pass
    /// through this too.
    pub fn validated(self) -> Result<Self> {
        if self.name.is_empty() || self.name.len() > 256 {
            return Err(TypesError::InvalidStateName { name: self.name });
        }
        let reason = match (self.kind, &self.user_key_type) {
            (StateKind::Map, None) => Some("map state needs a user key type"),
            (StateKind::Map, Some(_)) | (_, None) => None,
            (_, Some(_)) => Some("only map state has a user key type"),
        };
        let reason = reason.or(match self.ttl {
            Some(TtlConfig { ttl_millis: 0, .. }) => Some("a time-to-live must be positive"),
            _ => None,
        });
        match reason {
            Some(reason) => Err(TypesError::InvalidDescriptor {
                name: self.name,
                reason,
            }),
            None => Ok(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_needs_user_key_type() {
        assert!(StateDescriptor::new("m", StateKind::Map, ValueType::Int64).is_err());
        assert!(StateDescriptor::map("m", ValueType::Utf8, ValueType::Int64).is_ok());
        assert!(StateDescriptor::new("", StateKind::Value, ValueType::Int64).is_err());
    }

    #[test]
    fn kinds_parse_from_their_names() {
        for kind in [
            StateKind::Value,
            StateKind::List,
            StateKind::Reducing,
            StateKind::Aggregating,
            StateKind::Map,
        ] {
            assert_eq!(kind.as_str().parse::<StateKind>(), Ok(kind));
        }
        let err = "counter".parse::<StateKind>().expect_err("unknown");
        assert!(err.to_string().contains("use value, list"), "{err}");
    }

    #[test]
    fn zero_ttl_is_rejected() {
        let d = StateDescriptor::new("v", StateKind::Value, ValueType::Int64).expect("valid");
        let ttl = TtlConfig {
            ttl_millis: 0,
            update: TtlUpdate::OnCreateAndWrite,
        };
        assert!(d.with_ttl(ttl).is_err());
    }
}
