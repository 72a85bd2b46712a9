//! Snapshot files, the asynchronous part of snapshots, and restores.
//!
//! - [`format`]: the canonical key-group-indexed snapshot file, each key
//!   group compressed (none, zstd, lz4) and checksummed on its own.
//! - [`spawn_full_snapshot`]: serializes a [`FrozenKeyedState`](weir_state::FrozenKeyedState)
//!   and streams it to an object store as a cancelable [`SnapshotFuture`].
//! - [`restore_keyed`]: fills a backend from full snapshots, reading only its
//!   key groups, at any parallelism and across backends.
//! - [`spawn_incremental_snapshot`], [`download_incremental`] and
//!   [`SharedFileRegistry`]: RocksDB incremental checkpoints.
//! - [`write_operator_state`] and [`read_operator_state`]: operator state files.
//!
//! Handles store paths relative to a root, so directories can move; [`layout`]
//! names every file and directory of checkpoint and savepoint storage. This
//! crate never creates a tokio runtime; callers pass a [`tokio::runtime::Handle`].
//!
//! ```
//! use std::sync::Arc;
//!
//! use object_store::{memory::InMemory, path::Path};
//! use weir_snapshot::{FullSnapshotOptions, KeyedStateHandle, SnapshotStorage};
//! use weir_state::{HeapKeyedStateBackend, KeyedStateBackend, StateKey};
//! use weir_types::{Attempt, Epoch, KeyGroup, MaxParallelism, StateDescriptor, StateKind, ValueType};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let max = MaxParallelism::new(4)?;
//! let mut backend = HeapKeyedStateBackend::new(max, max.full_range())?;
//! let count = StateDescriptor::new("count", StateKind::Value, ValueType::Int64)?;
//! let id = backend.register_state(&count)?;
//! backend.begin_epoch(Epoch(1), Attempt(0))?;
//! backend.put_value(id, StateKey::new(KeyGroup(2), b"k"), b"42")?;
//! backend.commit_epoch(Epoch(1), Attempt(0))?;
//! backend.finalize_up_to(Epoch(1))?;
//!
//! // The synchronous part, then the asynchronous part on a runtime.
//! let frozen = backend.snapshot_sync()?;
//! let runtime = tokio::runtime::Runtime::new()?;
//! let storage = SnapshotStorage { store: Arc::new(InMemory::new()), root: Path::from("job"), local: None };
//! let future = weir_snapshot::spawn_full_snapshot(
//!     runtime.handle(), frozen, &storage, "chk-1/op/0", FullSnapshotOptions::default(),
//! );
//! let outcome = runtime.block_on(future)?;
//! let handles = [KeyedStateHandle::Full(outcome.handle)];
//!
//! // Restore into a fresh backend (any range, any backend).
//! let mut restored = HeapKeyedStateBackend::new(max, max.full_range())?;
//! runtime.block_on(weir_snapshot::restore_keyed(
//!     &mut restored, &handles, &*storage.store, &storage.root,
//! ))?;
//! let id = restored.register_state(&count)?;
//! let value = restored.get_value(id, StateKey::new(KeyGroup(2), b"k"))?;
//! assert_eq!(value.as_deref(), Some(&b"42"[..]));
//! # Ok(())
//! # }
//! ```

mod error;
mod file;
pub mod format;
mod full;
mod handle;
mod incremental;
pub mod layout;
mod local_files;
mod operator;
mod registry;
mod restore;
mod task;
mod upload;

pub use error::{FormatError, Result, Section, SnapshotError};
pub use file::SnapshotFile;
pub use format::Compression;
pub use full::{FullSnapshotOptions, SnapshotStorage, spawn_full_snapshot};
pub use handle::{
    FullSnapshotHandle, IncrementalSnapshotHandle, KeyedStateHandle, SharedStateFile, StateFile,
};
pub use incremental::{
    IncrementalTarget, LocalCheckpoint, LocalFile, PendingChecksums, download_incremental,
    spawn_incremental_snapshot,
};
pub use local_files::LocalFiles;
pub use operator::{read_operator_state, write_operator_state};
pub use registry::SharedFileRegistry;
pub use restore::{RestoreStats, restore_keyed};
pub use task::{SnapshotFuture, SnapshotMetrics, SnapshotOutcome};
