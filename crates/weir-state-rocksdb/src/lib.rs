//! The RocksDB keyed state backend (Flink's `EmbeddedRocksDBStateBackend`):
//! state beyond memory, epoch versions, cheap synchronous snapshots and
//! incremental native checkpoints.
//!
//! - [`RocksDbKeyedStateBackend`] implements
//!   [`KeyedStateBackend`](weir_state::KeyedStateBackend). Each state is a
//!   column family; a row key is `[key group: 2 bytes BE][varint key
//!   len][key][varint namespace len][namespace]` (plus the user key of map
//!   entries), so key groups are contiguous key ranges. List appends are
//!   RocksDB merges and never read.
//! - [`RocksDbKeyedStateBackend::native_checkpoint`] hard-links the
//!   database's immutable SST files into a directory ([`NativeCheckpoint`]);
//!   uploading them, and sharing them across checkpoints, is `weir-snapshot`'s
//!   job. [`RocksDbKeyedStateBackend::restore_from_native`] opens downloaded
//!   checkpoints again for any key-group range (rescaling).
//!
//! ```
//! use weir_state::{KeyedStateBackend, StateKey};
//! use weir_state_rocksdb::{RocksDbKeyedStateBackend, RocksDbOptions};
//! use weir_types::{Attempt, Epoch, KeyGroup, MaxParallelism, StateDescriptor, StateKind, ValueType};
//!
//! let dir = tempfile::tempdir()?;
//! let max = MaxParallelism::new(128)?;
//! let mut backend = RocksDbKeyedStateBackend::open(RocksDbOptions::new(dir.path(), max, max.full_range()))?;
//! let count = backend.register_state(&StateDescriptor::new("count", StateKind::Value, ValueType::Int64)?)?;
//! let key = StateKey::new(KeyGroup(3), b"k");
//! backend.begin_epoch(Epoch(1), Attempt(0))?;
//! backend.put_value(count, key, b"1")?;
//! backend.commit_epoch(Epoch(1), Attempt(0))?;
//! backend.finalize_up_to(Epoch(1))?;
//! assert_eq!(backend.get_value(count, key)?.as_deref(), Some(&b"1"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This crate does no uploads and knows nothing of checkpoint storage.

mod backend;
mod bulk;
mod checkpoint;
mod database;
mod error;
mod fold;
mod frozen;
mod hashed_rows;
mod key;
mod options;
mod overlay;
mod restore;

pub use backend::RocksDbKeyedStateBackend;
pub use checkpoint::{NativeCheckpoint, NativeFile, PendingNativeCheckpoint};
pub use error::{Result, RocksDbError};
pub use frozen::RocksDbFrozenState;
pub use options::{Compression, PredefinedOptions, RocksDbOptions};
