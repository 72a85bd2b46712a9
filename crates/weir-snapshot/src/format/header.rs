//! The header of a snapshot file: what the file holds and how to decode it.
//!
//! Stored as JSON (small, and readable in a hex dump); every field is
//! validated on decode because the file may come from anywhere.

use serde::{Deserialize, Serialize};
use weir_types::{KeyGroupRange, MaxParallelism, StateDescriptor, ValueType};

use super::Compression;
use crate::error::FormatError;

/// What a snapshot file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    /// The max parallelism of the state (the number of key groups).
    pub max_parallelism: MaxParallelism,
    /// The key groups the file covers; blocks lie inside it.
    pub key_group_range: KeyGroupRange,
    /// The states; an entry's state index points into this list.
    pub descriptors: Vec<StateDescriptor>,
    /// The types of the key columns, when known, so tools can decode keys.
    pub key_types: Option<Vec<ValueType>>,
    /// How blocks are compressed.
    pub compression: Compression,
}

impl SnapshotHeader {
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a header always serializes to JSON")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        let header: SnapshotHeader =
            serde_json::from_slice(bytes).map_err(|source| FormatError::Header { source })?;
        header.validated()
    }

    /// Checks what serde cannot: valid descriptors, unique names, a range
    /// inside the max parallelism.
    pub(crate) fn validated(self) -> Result<Self, FormatError> {
        let invalid = |source| FormatError::InvalidHeader { source };
        let range = KeyGroupRange::new(self.key_group_range.start(), self.key_group_range.end())
            .map_err(invalid)?;
        if !range.fits(self.max_parallelism) {
            return Err(invalid(weir_types::TypesError::InvalidKeyGroup {
                key_group: range.end().saturating_sub(1),
                max: self.max_parallelism.get(),
            }));
        }
        let mut descriptors = Vec::with_capacity(self.descriptors.len());
        for d in self.descriptors {
            let d = d.validated().map_err(invalid)?;
            if descriptors
                .iter()
                .any(|o: &StateDescriptor| o.name == d.name)
            {
                return Err(invalid(weir_types::TypesError::InvalidDescriptor {
                    name: d.name,
                    reason: "the snapshot lists this state name twice",
                }));
            }
            descriptors.push(d);
        }
        Ok(Self {
            descriptors,
            ..self
        })
    }
}

#[cfg(test)]
mod tests {
    use weir_types::StateKind;

    use super::*;

    fn header() -> SnapshotHeader {
        SnapshotHeader {
            max_parallelism: MaxParallelism::new(8).expect("valid"),
            key_group_range: KeyGroupRange::new(2, 6).expect("valid"),
            descriptors: vec![
                StateDescriptor::new("v", StateKind::Value, ValueType::Int64).expect("valid"),
                StateDescriptor::map("m", ValueType::Utf8, ValueType::Binary).expect("valid"),
            ],
            key_types: Some(vec![ValueType::Utf8]),
            compression: Compression::Lz4,
        }
    }

    #[test]
    fn header_round_trips() {
        let h = header();
        assert_eq!(SnapshotHeader::decode(&h.encode()).expect("valid"), h);
    }

    #[test]
    fn invalid_headers_are_rejected() {
        let mut h = header();
        h.key_group_range = KeyGroupRange::new(2, 9).expect("valid range");
        assert!(SnapshotHeader::decode(&h.encode()).is_err());

        let mut h = header();
        h.descriptors.push(h.descriptors[0].clone());
        assert!(SnapshotHeader::decode(&h.encode()).is_err());

        let text = String::from_utf8(header().encode()).expect("json is utf-8");
        let reversed = text.replace("\"start\":2,\"end\":6", "\"start\":6,\"end\":2");
        assert_ne!(reversed, text);
        assert!(SnapshotHeader::decode(reversed.as_bytes()).is_err());
        assert!(SnapshotHeader::decode(b"{").is_err());
    }
}
