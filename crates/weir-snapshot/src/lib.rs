//! Snapshot files and asynchronous snapshot tasks.

mod handle;

pub use handle::{
    FullSnapshotHandle, IncrementalSnapshotHandle, KeyedStateHandle, SharedStateFile, StateFile,
};
