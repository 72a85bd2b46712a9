//! The synchronous snapshot part of the RocksDB backend: a RocksDB snapshot
//! (a sequence number; no data is copied and nothing is flushed) that the
//! asynchronous part reads key group by key group.
//!
//! The snapshot borrows the database, so the view owns an `Arc` of it and
//! ties the snapshot to that owner with `self_cell`; the database stays open
//! for as long as any view exists. This module only reads.

use std::sync::Arc;

use rocksdb::{ReadOptions, SnapshotWithThreadMode};
use weir_state::{EntryPayload, FrozenKeyedState, Result, StateEntry, StateError, StateId};
use weir_types::{KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor, StateKind};

use crate::database::Db;
use crate::error::RocksDbError;
use crate::key::{decode_row_key, key_group_bound};

type DbSnapshot<'db> = SnapshotWithThreadMode<'db, Db>;

self_cell::self_cell!(
    /// A RocksDB snapshot together with the database it reads.
    struct OwnedSnapshot {
        owner: Arc<Db>,
        #[covariant]
        dependent: DbSnapshot,
    }
);

/// An immutable view of a [`RocksDbKeyedStateBackend`](crate::RocksDbKeyedStateBackend)
/// at the moment of `snapshot_sync`; later writes never show through it.
pub struct RocksDbFrozenState {
    snapshot: OwnedSnapshot,
    descriptors: Vec<StateDescriptor>,
    cf_names: Vec<String>,
    key_group_range: KeyGroupRange,
    max_parallelism: MaxParallelism,
}

impl RocksDbFrozenState {
    /// Takes a snapshot of `db` now.
    pub(crate) fn new(
        db: Arc<Db>,
        descriptors: Vec<StateDescriptor>,
        cf_names: Vec<String>,
        key_group_range: KeyGroupRange,
        max_parallelism: MaxParallelism,
    ) -> Self {
        Self {
            snapshot: OwnedSnapshot::new(db, |db| db.snapshot()),
            descriptors,
            cf_names,
            key_group_range,
            max_parallelism,
        }
    }
}

impl FrozenKeyedState for RocksDbFrozenState {
    fn descriptors(&self) -> &[StateDescriptor] {
        &self.descriptors
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.key_group_range
    }

    fn max_parallelism(&self) -> MaxParallelism {
        self.max_parallelism
    }

    fn for_each_entry(
        &self,
        key_group: KeyGroup,
        visit: &mut dyn FnMut(StateEntry<'_>) -> Result<()>,
    ) -> Result<()> {
        if !self.key_group_range.contains(key_group) {
            return Err(StateError::KeyGroupOutOfRange {
                key_group,
                range: self.key_group_range,
            });
        }
        self.snapshot.with_dependent(|db, snapshot| {
            for (index, (descriptor, cf_name)) in
                self.descriptors.iter().zip(&self.cf_names).enumerate()
            {
                let state =
                    StateId(u32::try_from(index).expect("invariant: fewer than 2^32 states"));
                let cf = db.cf_handle(cf_name).ok_or_else(|| StateError::Storage {
                    message: format!("column family {cf_name} is missing"),
                })?;
                let mut read_options = ReadOptions::default();
                // A snapshot scan reads everything once; keep the cache for the live job.
                read_options.fill_cache(false);
                read_options.set_iterate_lower_bound(key_group_bound(key_group.0.into()));
                read_options.set_iterate_upper_bound(key_group_bound(u32::from(key_group.0) + 1));
                let mut rows = snapshot.raw_iterator_cf_opt(&cf, read_options);
                rows.seek_to_first();
                while let (Some(row), Some(value)) = (rows.key(), rows.value()) {
                    let decoded =
                        decode_row_key(row).ok_or(StateError::Corrupt { what: "row key" })?;
                    let payload = match descriptor.kind {
                        StateKind::Map => EntryPayload::MapEntry {
                            user_key: decoded.user_key,
                            value,
                        },
                        StateKind::List => EntryPayload::List(value),
                        StateKind::Value | StateKind::Reducing | StateKind::Aggregating => {
                            EntryPayload::Value(value)
                        }
                    };
                    let empty_list =
                        matches!(payload, EntryPayload::List(items) if items.is_empty());
                    if !empty_list {
                        visit(StateEntry {
                            state,
                            key_group: decoded.key_group,
                            key: decoded.key,
                            namespace: decoded.namespace,
                            payload,
                        })?;
                    }
                    rows.next();
                }
                rows.status()
                    .map_err(RocksDbError::engine("scan snapshot"))
                    .map_err(StateError::from)?;
            }
            Ok(())
        })
    }
}
