//! The in-process state engine: one operator subtask's keyed state (heap or
//! RocksDB) and operator state, served through [`SubtaskSession`].
//!
//! - [`Subtask`] owns the backends; its session methods loop over a batch's
//!   rows and call the backend, so later rows see earlier rows' writes.
//! - [`Subtask::snapshot_sync`] is the synchronous part of a snapshot; the
//!   returned [`SubtaskSnapshot`] uploads itself ([`SubtaskSnapshot::upload`])
//!   as a cancelable [`UploadFuture`].
//! - [`Subtask::restore`] builds a subtask from a [`SubtaskRestore`] of a
//!   [`weir_checkpoint::RestorePlan`].
//!
//! [`SubtaskSession`]: crate::SubtaskSession

mod accumulator;
mod aggregate;
mod columns;
mod incremental;
mod keyed;
mod restore;
mod session;
mod upload;
pub(crate) mod workdir;

use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};

use weir_state::{HeapKeyedStateBackend, OperatorStateStore, StateId};
use weir_state_rocksdb::{RocksDbKeyedStateBackend, RocksDbOptions};
use weir_types::{Epoch, KeyGroupRange, StateDescriptor, ValueType};

use crate::error::{HostError, Result};
use crate::session::{BackendSpec, SubtaskSpec, render_types};

pub use aggregate::accumulator_type;
pub use incremental::SnapshotFormat;
pub use restore::RestoreOrigin;
pub use upload::{SubtaskSnapshot, SubtaskUpload, UploadFuture};
pub use weir_checkpoint::SubtaskRestore;

use incremental::UploadedCheckpoints;
use keyed::{FoundEntries, KeyedBackend};
use workdir::OwnedDir;

/// One operator subtask's keyed and operator state, in this process.
///
/// Implements [`SubtaskSession`](crate::SubtaskSession). Epochs follow the
/// backend contract of [`weir_state::KeyedStateBackend`]: `begin` starts an
/// attempt (dropping the writes of an earlier attempt of the same epoch),
/// `commit` ends it, and epochs become final when a later `begin` names them
/// (or [`Subtask::finalize_up_to`] does).
pub struct Subtask {
    spec: SubtaskSpec,
    range: KeyGroupRange,
    keyed: KeyedBackend,
    operator: OperatorStateStore,
    /// The incremental checkpoints of this subtask's database whose files
    /// later ones may reference (shared with the uploads that add to it).
    uploaded: Arc<Mutex<UploadedCheckpoints>>,
    /// The newest epoch begun, so a snapshot can finalize everything committed.
    last_begun: Option<Epoch>,
    /// Reused encoding buffer of the per-row paths.
    scratch: Vec<u8>,
    /// Where the last batch read found its entries, for the write after it.
    found: FoundEntries,
    /// The RocksDB directory, removed on drop; declared after `keyed` so the
    /// database closes before its files go.
    _dir: Option<OwnedDir>,
    /// Where the subtask's databases, native checkpoints and restore
    /// downloads live.
    work_dir: PathBuf,
}

impl std::fmt::Debug for Subtask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subtask")
            .field("spec", &self.spec)
            .field("range", &self.range)
            .field("last_begun", &self.last_begun)
            .finish_non_exhaustive()
    }
}

impl Subtask {
    /// Opens empty state. RocksDB lives in a fresh directory under
    /// `work_dir`, removed when the subtask is dropped.
    pub fn open(spec: SubtaskSpec, work_dir: &Path) -> Result<Self> {
        let range = subtask_range(&spec)?;
        match spec.backend {
            BackendSpec::Heap => {
                let heap = HeapKeyedStateBackend::new(spec.max_parallelism, range)?;
                Ok(Self::with_backend(
                    spec,
                    KeyedBackend::Heap(heap),
                    None,
                    work_dir,
                ))
            }
            BackendSpec::RocksDb => {
                let dir = rocksdb_dir(&spec, work_dir)?;
                let options = RocksDbOptions::new(dir.path(), spec.max_parallelism, range);
                let backend = RocksDbKeyedStateBackend::open(options)
                    .map_err(weir_state::StateError::from)?;
                Ok(Self::with_backend(
                    spec,
                    KeyedBackend::RocksDb(Box::new(backend)),
                    Some(dir),
                    work_dir,
                ))
            }
        }
    }

    /// A subtask over `keyed` (in `dir`, for RocksDB), with empty operator
    /// state and no epoch begun.
    fn with_backend(
        spec: SubtaskSpec,
        keyed: KeyedBackend,
        dir: Option<OwnedDir>,
        work_dir: &Path,
    ) -> Self {
        Self {
            range: keyed.key_group_range(),
            spec,
            keyed,
            operator: OperatorStateStore::new(),
            uploaded: Arc::default(),
            last_begun: None,
            scratch: Vec::new(),
            found: FoundEntries::default(),
            _dir: dir,
            work_dir: work_dir.to_owned(),
        }
    }

    /// Records the key columns' types (kept in snapshots); setting them again
    /// must give the same types.
    pub fn set_key_types(&mut self, types: Vec<ValueType>) -> Result<()> {
        match &self.spec.key_types {
            Some(existing) if *existing != types => Err(HostError::InvalidRequest(format!(
                "the key columns of operator {} are [{}]; they cannot change to [{}]",
                self.spec.uid,
                render_types(existing),
                render_types(&types)
            ))),
            Some(_) => Ok(()),
            None => {
                self.spec.key_types = Some(types);
                Ok(())
            }
        }
    }

    /// The keyed states registered so far, indexed by [`StateId`].
    pub fn descriptors(&self) -> &[StateDescriptor] {
        self.keyed.descriptors()
    }

    /// The last finalized epoch, if any.
    pub fn last_final_epoch(&self) -> Option<Epoch> {
        self.keyed.last_final_epoch()
    }

    /// Makes every epoch `<= epoch` final (they must be committed).
    pub fn finalize_up_to(&mut self, epoch: Epoch) -> Result<()> {
        self.keyed.finalize_up_to(epoch)?;
        self.operator.finalize_up_to(epoch)?;
        Ok(())
    }

    /// Makes every epoch begun so far final; fails if the newest one is
    /// still open (commit it first).
    pub fn finalize_all(&mut self) -> Result<()> {
        match self.last_begun {
            Some(epoch) => self.finalize_up_to(epoch),
            None => Ok(()),
        }
    }

    /// Makes a RocksDB subtask's files stable: every epoch (all must be
    /// final) written, memtables flushed, no compaction running or queued
    /// (see `RocksDbKeyedStateBackend::wait_for_compactions`). Tests and
    /// benchmarks that compare what two incremental checkpoints share call
    /// it first; a heap subtask has nothing to wait for.
    pub fn wait_for_compactions(&mut self) -> Result<()> {
        if let KeyedBackend::RocksDb(backend) = &mut self.keyed {
            backend
                .wait_for_compactions()
                .map_err(weir_state::StateError::from)?;
        }
        Ok(())
    }

    /// Drops the writes of `epoch` and every later epoch (an aborted epoch).
    pub fn discard_from(&mut self, epoch: Epoch) -> Result<()> {
        self.keyed.discard_from(epoch)?;
        self.operator.discard_from(epoch)?;
        Ok(())
    }

    /// The incremental checkpoints of this subtask's database.
    fn lock_uploaded(&self) -> std::sync::MutexGuard<'_, UploadedCheckpoints> {
        incremental::lock(&self.uploaded)
    }

    /// The descriptor of a registered keyed state.
    fn descriptor(&self, state: StateId) -> Result<&StateDescriptor> {
        self.keyed
            .descriptors()
            .get(state.0 as usize)
            .ok_or(HostError::State(weir_state::StateError::UnknownState(
                state,
            )))
    }
}

/// The key groups the subtask `spec` names owns.
fn subtask_range(spec: &SubtaskSpec) -> Result<KeyGroupRange> {
    Ok(KeyGroupRange::for_subtask(
        spec.max_parallelism,
        spec.parallelism,
        spec.subtask,
    )?)
}

/// A fresh directory for a subtask's RocksDB database under `work_dir`.
fn rocksdb_dir(spec: &SubtaskSpec, work_dir: &Path) -> Result<OwnedDir> {
    OwnedDir::create(work_dir, &format!("rocksdb-{}-{}", spec.uid, spec.subtask))
}
