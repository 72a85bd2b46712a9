//! Identifiers as newtypes, so a checkpoint id is never passed as an epoch.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TypesError};

macro_rules! numeric_id {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl From<$inner> for $name {
            fn from(v: $inner) -> Self {
                Self(v)
            }
        }
    };
}

numeric_id!(
    /// A checkpoint (or savepoint) number, increasing over the life of a job.
    CheckpointId(u64)
);
numeric_id!(
    /// A micro-epoch: one Spark job over the source range planned for it.
    Epoch(u64)
);
numeric_id!(
    /// The attempt number of an epoch's task for one subtask (Spark task retries).
    Attempt(u32)
);
numeric_id!(
    /// The index of a parallel instance of an operator, `0..parallelism`.
    SubtaskIndex(u32)
);

/// The user-assigned, stable id of an operator; it keys state in savepoints.
///
/// Restricted to characters that are safe in file and object-store paths.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OperatorUid(String);

impl OperatorUid {
    /// Validates and wraps a uid.
    pub fn new(uid: impl Into<String>) -> Result<Self> {
        let uid = uid.into();
        let ok = !uid.is_empty()
            && uid.len() <= 128
            && uid != "."
            && uid != ".."
            && uid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if ok {
            Ok(Self(uid))
        } else {
            Err(TypesError::InvalidOperatorUid { uid })
        }
    }

    /// The uid as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OperatorUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for OperatorUid {
    type Error = TypesError;
    fn try_from(s: String) -> Result<Self> {
        Self::new(s)
    }
}

impl From<OperatorUid> for String {
    fn from(u: OperatorUid) -> String {
        u.0
    }
}

/// The id of a job: names its directory in checkpoint storage.
///
/// Same character rules as [`OperatorUid`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(OperatorUid);

impl JobId {
    /// Validates and wraps a job id.
    pub fn new(id: impl Into<String>) -> Result<Self> {
        OperatorUid::new(id).map(Self)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl TryFrom<String> for JobId {
    type Error = TypesError;
    fn try_from(s: String) -> Result<Self> {
        Self::new(s)
    }
}

impl From<JobId> for String {
    fn from(j: JobId) -> String {
        j.0.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_reject_path_tricks() {
        assert!(OperatorUid::new("avg-1.v2").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "ü"] {
            assert!(OperatorUid::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(OperatorUid::new("x".repeat(129)).is_err());
    }

    #[test]
    fn uid_serde_validates() {
        let ok: OperatorUid = serde_json::from_str("\"avg\"").expect("valid uid");
        assert_eq!(ok.as_str(), "avg");
        assert!(serde_json::from_str::<OperatorUid>("\"../x\"").is_err());
    }
}
