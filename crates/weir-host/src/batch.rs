//! The keys of one batch of state accesses.

use arrow_array::{Array, BinaryArray, UInt16Array};
use weir_state::StateKey;
use weir_types::KeyGroup;

use crate::error::{HostError, Result};

/// One row per access: the key group and the encoded key (see
/// [`weir_types::encode_key`]); the namespace is always empty.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyBatch {
    key_groups: UInt16Array,
    keys: BinaryArray,
}

impl KeyBatch {
    /// Pairs key groups with keys; both must have the same length and no nulls.
    pub fn new(key_groups: UInt16Array, keys: BinaryArray) -> Result<Self> {
        if key_groups.len() != keys.len() {
            return Err(HostError::InvalidRequest(format!(
                "a key batch has {} key groups but {} keys; send one key group per key",
                key_groups.len(),
                keys.len()
            )));
        }
        if key_groups.null_count() > 0 || keys.null_count() > 0 {
            return Err(HostError::InvalidRequest(
                "a key batch may not contain nulls; every row needs a key group and a key".into(),
            ));
        }
        Ok(Self { key_groups, keys })
    }

    /// A batch from `(key group, encoded key)` pairs.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (KeyGroup, &'a [u8])>) -> Self {
        let (groups, keys): (Vec<u16>, Vec<&[u8]>) =
            pairs.into_iter().map(|(g, k)| (g.0, k)).unzip();
        Self {
            key_groups: UInt16Array::from(groups),
            keys: BinaryArray::from(keys),
        }
    }

    /// The rows `rows` (indices, repeats allowed) as a new batch.
    pub fn select(&self, rows: &[usize]) -> Result<Self> {
        let len = self.len();
        if let Some(&bad) = rows.iter().find(|&&row| row >= len) {
            return Err(HostError::InvalidRequest(format!(
                "row {bad} is out of range for a key batch of {len} rows"
            )));
        }
        Ok(Self::from_pairs(rows.iter().map(|&row| {
            (KeyGroup(self.key_groups.value(row)), self.keys.value(row))
        })))
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The state key of row `i` (panics when `i >= len()`, like slice indexing).
    pub fn key(&self, i: usize) -> StateKey<'_> {
        StateKey::new(KeyGroup(self.key_groups.value(i)), self.keys.value(i))
    }

    /// The key-group column.
    pub fn key_groups(&self) -> &UInt16Array {
        &self.key_groups
    }

    /// The key column.
    pub fn keys(&self) -> &BinaryArray {
        &self.keys
    }
}
