//! State handles: what a subtask acks for a checkpoint and what `_metadata`
//! records, so a restore can find the bytes again.
//!
//! Every path is relative: to the job's checkpoint directory
//! (`<checkpoint dir>/<job id>/`) for checkpoints, to the savepoint directory
//! for savepoints, so the directory can be moved.

use serde::{Deserialize, Serialize};

use crate::error::{Result, SnapshotError};
use weir_types::{KeyGroupRange, MaxParallelism, StateDescriptor};

/// One stored file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateFile {
    /// Path relative to the checkpoint (or savepoint) root, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE) of the whole file.
    pub crc32: u32,
}

impl StateFile {
    /// Fails with [`SnapshotError::FileMismatch`] unless the bytes found
    /// have this file's size.
    pub(crate) fn check_size(&self, size: u64) -> Result<()> {
        self.check("size", self.size, size)
    }

    /// Fails with [`SnapshotError::FileMismatch`] unless the bytes found
    /// have this file's checksum.
    pub(crate) fn check_crc32(&self, crc32: u32) -> Result<()> {
        self.check("crc32", u64::from(self.crc32), u64::from(crc32))
    }

    fn check(&self, what: &'static str, expected: u64, actual: u64) -> Result<()> {
        if expected == actual {
            return Ok(());
        }
        Err(SnapshotError::FileMismatch {
            path: self.path.clone(),
            what,
            expected,
            actual,
        })
    }
}

/// A canonical, key-group-indexed snapshot file: any backend can restore
/// any key-group range of it (rescaling); savepoints are always this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FullSnapshotHandle {
    /// The key groups the file covers.
    pub key_group_range: KeyGroupRange,
    /// The file.
    pub file: StateFile,
    /// Number of entries, for statistics.
    pub entries: u64,
}

/// A RocksDB incremental checkpoint: native SST files shared with earlier
/// checkpoints (reference-counted in the `shared/` directory) plus the
/// files private to this checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalSnapshotHandle {
    /// The key groups the database held.
    pub key_group_range: KeyGroupRange,
    /// The max parallelism of the state.
    pub max_parallelism: MaxParallelism,
    /// The states, in the database's column-family order.
    pub descriptors: Vec<StateDescriptor>,
    /// Immutable SST files under `shared/`, possibly uploaded by an earlier
    /// checkpoint; `path` is unique per file content.
    pub shared: Vec<SharedStateFile>,
    /// Files of this checkpoint only (MANIFEST, CURRENT, OPTIONS, ...).
    pub private: Vec<SharedStateFile>,
}

/// A database file together with the name it must have when restored.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SharedStateFile {
    /// The file name inside the database directory (e.g. `000042.sst`).
    pub local_name: String,
    /// Where it is stored.
    pub file: StateFile,
}

/// The keyed state of one subtask in one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum KeyedStateHandle {
    /// A canonical snapshot file.
    Full(FullSnapshotHandle),
    /// A RocksDB incremental checkpoint.
    Incremental(IncrementalSnapshotHandle),
}

impl KeyedStateHandle {
    /// The key groups the handle covers.
    pub fn key_group_range(&self) -> KeyGroupRange {
        match self {
            KeyedStateHandle::Full(h) => h.key_group_range,
            KeyedStateHandle::Incremental(h) => h.key_group_range,
        }
    }

    /// Every file the handle references.
    pub fn files(&self) -> Vec<&StateFile> {
        match self {
            KeyedStateHandle::Full(h) => vec![&h.file],
            KeyedStateHandle::Incremental(h) => {
                h.shared.iter().chain(&h.private).map(|f| &f.file).collect()
            }
        }
    }
}
