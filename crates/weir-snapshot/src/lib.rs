//! Snapshot files, the asynchronous part of snapshots, and restores.
//!
//! - [`format`]: the canonical key-group-indexed snapshot file, each key
//!   group compressed (none, zstd, lz4) and checksummed on its own (B4).
//! - [`spawn_full_snapshot`]: serializes a [`FrozenKeyedState`](weir_state::FrozenKeyedState)
//!   and streams it to an object store as a cancelable [`SnapshotFuture`] (C8).
//! - [`restore_keyed`]: fills a backend from full snapshots, reading only its
//!   key groups, at any parallelism and across backends (P5).
//! - [`spawn_incremental_snapshot`], [`download_incremental`] and
//!   [`SharedFileRegistry`]: RocksDB incremental checkpoints (B3).
//! - [`write_operator_state`] and [`read_operator_state`]: operator state files (S8).
//!
//! Handles store paths relative to a root, so directories can move. This
//! crate never creates a tokio runtime; callers pass a [`tokio::runtime::Handle`].

mod error;
mod file;
pub mod format;
mod full;
mod handle;
mod incremental;
mod location;
mod operator;
mod registry;
mod restore;
mod task;
mod upload;

pub use error::{FormatError, Result, Section, SnapshotError};
pub use file::SnapshotFile;
pub use full::{FullSnapshotOptions, SnapshotStorage, spawn_full_snapshot};
pub use handle::{
    FullSnapshotHandle, IncrementalSnapshotHandle, KeyedStateHandle, SharedStateFile, StateFile,
};
pub use incremental::{
    IncrementalTarget, LocalCheckpoint, LocalFile, download_incremental, spawn_incremental_snapshot,
};
pub use location::shared_dir;
pub use operator::{read_operator_state, write_operator_state};
pub use registry::SharedFileRegistry;
pub use restore::{RestoreStats, restore_keyed};
pub use task::{SnapshotFuture, SnapshotMetrics, SnapshotOutcome};
