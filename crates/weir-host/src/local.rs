//! All subtasks of one operator in one process: what `weir.testing`'s
//! keyed operator harness drives, with real snapshots, savepoints and
//! rescaling restores.
//!
//! [`LocalOperator::snapshot`] runs the same path a job does: finalize,
//! take every subtask's synchronous part, upload them all (key-group-indexed
//! files), complete a checkpoint (`_metadata`) in a private checkpoint
//! directory under the work dir, and copy it into a self-contained savepoint
//! that `weir savepoint info` reads. [`LocalOperator::restore`] plans the
//! restore with [`RestorePlan`] exactly like a restarted job.

use std::path::Path;
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, BinaryArray};
use tokio::runtime::Runtime;
use weir_checkpoint::{
    CheckpointError, CheckpointKind, CheckpointMetadata, CheckpointStorage, JobOperator,
    OperatorRestore, OperatorStateMeta, ResolvedSnapshot, RestorePlan, StorageLocation,
    StorageOptions, create_savepoint, layout,
};
use weir_state::{RedistributionMode, StateId};
use weir_types::{
    Attempt, CheckpointId, Epoch, JobId, KeyGroup, KeyGroupRange, MaxParallelism, OperatorUid,
    StateDescriptor, SubtaskIndex, ValueType,
};

use crate::batch::KeyBatch;
use crate::engine::workdir::OwnedDir;
use crate::engine::{RestoreOrigin, Subtask};
use crate::error::{HostError, Result};
use crate::session::{Aggregation, BackendSpec, MapEntries, SubtaskSession, SubtaskSpec};

/// The parallel subtasks of one operator in this process, plus the runtime
/// that uploads their snapshots.
pub struct LocalOperator {
    uid: OperatorUid,
    parallelism: u32,
    max_parallelism: MaxParallelism,
    subtasks: Vec<Subtask>,
    runtime: Runtime,
    /// Where checkpoints are completed before they are copied into
    /// savepoints; removed with the operator (declared after the subtasks).
    checkpoints: OwnedDir,
    /// The id the next snapshot uses (after a restore: the restored id + 1).
    next_checkpoint: CheckpointId,
    /// The newest epoch the state includes, recorded as the cut epoch.
    cut_epoch: Epoch,
}

impl std::fmt::Debug for LocalOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalOperator")
            .field("uid", &self.uid)
            .field("parallelism", &self.parallelism)
            .field("max_parallelism", &self.max_parallelism)
            .field("next_checkpoint", &self.next_checkpoint)
            .finish_non_exhaustive()
    }
}

impl LocalOperator {
    /// `parallelism` empty subtasks of operator `uid`; RocksDB databases and
    /// checkpoints live in fresh directories under `work_dir`.
    pub fn new(
        uid: OperatorUid,
        parallelism: u32,
        max_parallelism: MaxParallelism,
        backend: BackendSpec,
        work_dir: &Path,
    ) -> Result<Self> {
        let mut operator = Self::without_subtasks(uid, parallelism, max_parallelism, work_dir)?;
        operator.subtasks = (0..parallelism)
            .map(|i| Subtask::open(operator.subtask_spec(i, &backend), work_dir))
            .collect::<Result<_>>()?;
        Ok(operator)
    }

    /// The operator before its subtasks are opened or restored.
    fn without_subtasks(
        uid: OperatorUid,
        parallelism: u32,
        max_parallelism: MaxParallelism,
        work_dir: &Path,
    ) -> Result<Self> {
        max_parallelism.check_parallelism(parallelism)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-local-snapshot")
            .enable_all()
            .build()
            .map_err(|e| HostError::io("starting the snapshot runtime", e))?;
        Ok(Self {
            checkpoints: OwnedDir::create(work_dir, &format!("checkpoints-{uid}"))?,
            uid,
            parallelism,
            max_parallelism,
            subtasks: Vec::new(),
            runtime,
            next_checkpoint: CheckpointId(1),
            cut_epoch: Epoch(0),
        })
    }

    /// The spec of subtask `index` on `backend`.
    fn subtask_spec(&self, index: u32, backend: &BackendSpec) -> SubtaskSpec {
        SubtaskSpec {
            uid: self.uid.clone(),
            subtask: SubtaskIndex(index),
            parallelism: self.parallelism,
            max_parallelism: self.max_parallelism,
            backend: backend.clone(),
            key_types: None,
        }
    }

    /// Restores operator `uid` from a savepoint or checkpoint directory
    /// (path or URL of the directory holding `_metadata`, or of `_metadata`
    /// itself) at any parallelism. Refuses state of other uids unless
    /// `allow_non_restored_state`, and refuses a max parallelism change.
    /// Subtasks of an operator the snapshot has no state of start empty.
    pub fn restore(
        from: &str,
        uid: OperatorUid,
        parallelism: u32,
        max_parallelism: MaxParallelism,
        backend: BackendSpec,
        work_dir: &Path,
        allow_non_restored_state: bool,
    ) -> Result<Self> {
        let mut operator = Self::without_subtasks(uid, parallelism, max_parallelism, work_dir)?;
        let location = StorageLocation::parse(from, &StorageOptions::default())?;
        let job = [JobOperator {
            uid: operator.uid.clone(),
            max_parallelism,
            parallelism,
        }];
        let specs: Vec<SubtaskSpec> = (0..parallelism)
            .map(|i| operator.subtask_spec(i, &backend))
            .collect();
        let (subtasks, checkpoint, cut_epoch) = operator.runtime.block_on(async {
            let snapshot = ResolvedSnapshot::open(&location).await?;
            let metadata = snapshot.metadata();
            let plan = RestorePlan::new(metadata, &job, allow_non_restored_state)?;
            let mut subtasks = Vec::with_capacity(specs.len());
            if let Some(OperatorRestore::Restored(restored)) = plan.operators.get(&job[0].uid) {
                let storage = snapshot.state_storage().await?;
                let origin = RestoreOrigin {
                    checkpoint: metadata.checkpoint_id,
                    location: from,
                };
                for (spec, planned) in specs.into_iter().zip(&restored.subtasks) {
                    let mut subtask = Subtask::restore(
                        spec,
                        work_dir,
                        planned,
                        &restored.states,
                        (&storage, origin),
                    )
                    .await?;
                    if let Some(types) = &restored.key_types {
                        subtask.set_key_types(types.clone())?;
                    }
                    subtasks.push(subtask);
                }
            } else {
                for spec in specs {
                    subtasks.push(Subtask::open(spec, work_dir)?);
                }
            }
            Ok::<_, HostError>((subtasks, metadata.checkpoint_id, metadata.cut_epoch))
        })?;
        operator.subtasks = subtasks;
        operator.next_checkpoint = CheckpointId(checkpoint.0 + 1);
        operator.cut_epoch = cut_epoch;
        Ok(operator)
    }

    /// The operator's uid.
    pub fn uid(&self) -> &OperatorUid {
        &self.uid
    }

    /// The number of subtasks.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }

    /// The number of key groups.
    pub fn max_parallelism(&self) -> MaxParallelism {
        self.max_parallelism
    }

    /// The newest epoch any subtask made final, if any.
    pub fn last_final_epoch(&self) -> Option<Epoch> {
        self.subtasks
            .iter()
            .filter_map(Subtask::last_final_epoch)
            .max()
    }

    /// Subtask `index` (`< parallelism`).
    pub fn subtask_mut(&mut self, index: usize) -> Result<&mut Subtask> {
        let parallelism = self.parallelism;
        self.subtasks.get_mut(index).ok_or_else(|| {
            HostError::InvalidRequest(format!(
                "subtask {index} does not exist; the operator has parallelism {parallelism}"
            ))
        })
    }

    /// The index of the subtask owning `key_group`.
    pub fn subtask_of(&self, key_group: KeyGroup) -> Result<usize> {
        Ok(self
            .max_parallelism
            .subtask_of(key_group, self.parallelism)?
            .0 as usize)
    }

    /// Records the key columns' types on every subtask.
    pub fn set_key_types(&mut self, types: Vec<ValueType>) -> Result<()> {
        for subtask in &mut self.subtasks {
            subtask.set_key_types(types.clone())?;
        }
        Ok(())
    }

    /// Registers a keyed state on every subtask; they all give it one id.
    pub fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId> {
        let mut ids = self
            .subtasks
            .iter_mut()
            .map(|s| s.register_state(descriptor));
        let first = ids.next().transpose()?.ok_or_else(no_subtasks)?;
        for id in ids {
            if id? != first {
                return Err(HostError::InvalidRequest(format!(
                    "state {:?} got different ids in different subtasks; register states in \
                     the same order on every subtask",
                    descriptor.name
                )));
            }
        }
        Ok(first)
    }

    /// Starts `attempt` of `epoch` on every subtask, first making epochs
    /// `<= final_epoch` final (see [`SubtaskSession::begin`]).
    pub fn begin(
        &mut self,
        epoch: Epoch,
        attempt: Attempt,
        final_epoch: Option<Epoch>,
    ) -> Result<()> {
        for subtask in &mut self.subtasks {
            subtask.begin(epoch, attempt, final_epoch)?;
        }
        if let Some(epoch) = final_epoch {
            self.cut_epoch = self.cut_epoch.max(epoch);
        }
        Ok(())
    }

    /// Ends `attempt` of `epoch` on every subtask.
    pub fn commit(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        for subtask in &mut self.subtasks {
            subtask.commit(epoch, attempt)?;
        }
        Ok(())
    }

    /// Makes every epoch `<= epoch` final on every subtask.
    pub fn finalize_up_to(&mut self, epoch: Epoch) -> Result<()> {
        for subtask in &mut self.subtasks {
            subtask.finalize_up_to(epoch)?;
        }
        self.cut_epoch = self.cut_epoch.max(epoch);
        Ok(())
    }

    /// Writes a self-contained savepoint of the current state under `dir`
    /// (local path or URL) and returns the savepoint directory's path or
    /// URL. Every committed epoch becomes final first; an epoch still open
    /// is an error. Each call uses a new checkpoint id (one past any
    /// savepoint of this operator already in `dir`).
    pub fn snapshot(&mut self, dir: &str) -> Result<String> {
        for subtask in &mut self.subtasks {
            subtask.finalize_all()?;
            if let Some(epoch) = subtask.last_final_epoch() {
                self.cut_epoch = self.cut_epoch.max(epoch);
            }
        }
        let key_types = self
            .subtasks
            .iter()
            .find_map(|s| s.spec().key_types.clone());
        let states = self.descriptors();
        if key_types.is_none() && !states.is_empty() {
            return Err(HostError::InvalidRequest(format!(
                "operator {} has keyed state but no key types; call set_key_types before \
                 snapshotting so the savepoint can decode its keys",
                self.uid
            )));
        }
        let savepoints = StorageLocation::parse(dir, &StorageOptions::default())?;
        let job = JobId::new(self.uid.as_str())?;
        let checkpoints = StorageLocation::parse(
            &self.checkpoints.path().to_string_lossy(),
            &StorageOptions::default(),
        )?;
        let storage = CheckpointStorage::filesystem(&checkpoints, job.clone())?;
        let id =
            self.runtime
                .block_on(free_savepoint_id(&savepoints, &job, self.next_checkpoint))?;
        let snapshots = self
            .subtasks
            .iter_mut()
            .map(Subtask::snapshot_sync)
            .collect::<Result<Vec<_>>>()?;
        let state_storage = storage.state_storage();
        let uploads: Vec<_> = snapshots
            .into_iter()
            .map(|s| s.upload(self.runtime.handle(), &state_storage, id))
            .collect();
        let mut metadata =
            CheckpointMetadata::new(job, id, CheckpointKind::Checkpoint, self.cut_epoch);
        metadata.timestamp_millis = now_millis();
        let mut operator = OperatorStateMeta {
            uid: self.uid.clone(),
            parallelism: self.parallelism,
            max_parallelism: self.max_parallelism,
            key_types,
            states,
            subtasks: Vec::with_capacity(uploads.len()),
        };
        let path = self.runtime.block_on(async {
            for upload in uploads {
                operator.subtasks.push(upload.await?.meta);
            }
            metadata.operators.push(operator);
            storage.complete(&metadata).await?;
            let savepoint = create_savepoint(&storage.open(id).await?, &savepoints).await?;
            // The savepoint is self-contained: the checkpoint is not needed.
            storage.discard(id).await?;
            Ok::<_, HostError>(savepoint.base().url().to_owned())
        })?;
        self.next_checkpoint = CheckpointId(id.0 + 1);
        Ok(path)
    }

    /// Every keyed state registered on any subtask, each name once, in
    /// registration order.
    fn descriptors(&self) -> Vec<StateDescriptor> {
        let mut all: Vec<StateDescriptor> = Vec::new();
        for subtask in &self.subtasks {
            for d in subtask.descriptors() {
                if !all.iter().any(|known| known.name == d.name) {
                    all.push(d.clone());
                }
            }
        }
        all
    }
}

/// A [`LocalOperator`] shared by the sessions on its subtasks; closing it
/// releases its state and ends them all.
#[derive(Debug, Clone)]
pub struct SharedOperator(Arc<Mutex<Option<LocalOperator>>>);

impl SharedOperator {
    /// Shares `operator`.
    pub fn new(operator: LocalOperator) -> Self {
        Self(Arc::new(Mutex::new(Some(operator))))
    }

    /// Runs `f` on the operator; fails once it is closed.
    pub fn with<R>(&self, f: impl FnOnce(&mut LocalOperator) -> Result<R>) -> Result<R> {
        let mut guard = self.0.lock().map_err(|_| {
            HostError::InvalidRequest(
                "the local operator failed in an earlier call; create a new one".into(),
            )
        })?;
        let operator = guard.as_mut().ok_or_else(|| {
            HostError::InvalidRequest(
                "the local operator is closed; create a new one to keep going".into(),
            )
        })?;
        f(operator)
    }

    /// Releases the state (RocksDB files, checkpoint directory); idempotent.
    pub fn close(&self) {
        // A poisoned lock still holds the operator: drop it all the same.
        let mut guard = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard = None;
    }

    /// A session on subtask `index`.
    pub fn session(&self, index: u32) -> Result<LocalSession> {
        let index = index as usize;
        let (spec, range) = self.with(|operator| {
            let subtask = operator.subtask_mut(index)?;
            Ok((subtask.spec().clone(), subtask.key_group_range()))
        })?;
        Ok(LocalSession {
            operator: self.clone(),
            index,
            spec,
            range,
        })
    }
}

/// One subtask of a [`SharedOperator`] as a [`SubtaskSession`]. Key types
/// it learns are recorded on every subtask, so all of them agree.
#[derive(Debug)]
pub struct LocalSession {
    operator: SharedOperator,
    index: usize,
    spec: SubtaskSpec,
    range: KeyGroupRange,
}

impl LocalSession {
    fn on<R>(&self, f: impl FnOnce(&mut Subtask) -> Result<R>) -> Result<R> {
        self.operator
            .with(|operator| f(operator.subtask_mut(self.index)?))
    }
}

impl SubtaskSession for LocalSession {
    fn spec(&self) -> &SubtaskSpec {
        &self.spec
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn set_key_types(&mut self, types: &[ValueType]) -> Result<()> {
        self.operator
            .with(|operator| operator.set_key_types(types.to_vec()))?;
        self.spec.key_types = Some(types.to_vec());
        Ok(())
    }

    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId> {
        self.on(|s| s.register_state(descriptor))
    }

    fn register_operator_state(&mut self, name: &str, mode: RedistributionMode) -> Result<StateId> {
        self.on(|s| s.register_operator_state(name, mode))
    }

    fn begin(&mut self, epoch: Epoch, attempt: Attempt, final_epoch: Option<Epoch>) -> Result<()> {
        self.on(|s| s.begin(epoch, attempt, final_epoch))
    }

    fn commit(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        self.on(|s| s.commit(epoch, attempt))
    }

    fn get_values(&mut self, state: StateId, keys: &KeyBatch) -> Result<BinaryArray> {
        self.on(|s| s.get_values(state, keys))
    }

    fn put_values(&mut self, state: StateId, keys: &KeyBatch, values: &BinaryArray) -> Result<()> {
        self.on(|s| s.put_values(state, keys, values))
    }

    fn get_batch(&mut self, state: StateId, keys: &KeyBatch) -> Result<ArrayRef> {
        self.on(|s| s.get_batch(state, keys))
    }

    fn put_batch(&mut self, state: StateId, keys: &KeyBatch, values: &ArrayRef) -> Result<()> {
        self.on(|s| s.put_batch(state, keys, values))
    }

    fn aggregate(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        inputs: &ArrayRef,
        aggregation: Aggregation,
    ) -> Result<ArrayRef> {
        self.on(|s| s.aggregate(state, keys, inputs, aggregation))
    }

    fn get_lists(&mut self, state: StateId, keys: &KeyBatch) -> Result<BinaryArray> {
        self.on(|s| s.get_lists(state, keys))
    }

    fn append_lists(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        payloads: &BinaryArray,
    ) -> Result<()> {
        self.on(|s| s.append_lists(state, keys, payloads))
    }

    fn replace_lists(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        payloads: &BinaryArray,
    ) -> Result<()> {
        self.on(|s| s.replace_lists(state, keys, payloads))
    }

    fn map_entries(&mut self, state: StateId, keys: &KeyBatch) -> Result<MapEntries> {
        self.on(|s| s.map_entries(state, keys))
    }

    fn map_get(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: &BinaryArray,
    ) -> Result<BinaryArray> {
        self.on(|s| s.map_get(state, keys, user_keys))
    }

    fn map_put(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: &BinaryArray,
        values: &BinaryArray,
    ) -> Result<()> {
        self.on(|s| s.map_put(state, keys, user_keys, values))
    }

    fn clear(&mut self, state: StateId, keys: &KeyBatch) -> Result<()> {
        self.on(|s| s.clear(state, keys))
    }

    fn operator_state(&mut self, state: StateId) -> Result<Vec<Vec<u8>>> {
        self.on(|s| s.operator_state(state))
    }

    fn set_operator_state(&mut self, state: StateId, items: Vec<Vec<u8>>) -> Result<()> {
        self.on(|s| s.set_operator_state(state, items))
    }
}

fn no_subtasks() -> HostError {
    HostError::InvalidRequest("the operator has no subtasks".into())
}

/// The first id from `from` on whose savepoint directory under `savepoints`
/// holds no savepoint yet, so a snapshot never collides with an earlier one.
async fn free_savepoint_id(
    savepoints: &StorageLocation,
    job: &JobId,
    from: CheckpointId,
) -> Result<CheckpointId> {
    let mut id = from;
    loop {
        let candidate = savepoints.child(&layout::savepoint_dir(job, id))?;
        match ResolvedSnapshot::open(&candidate).await {
            Ok(_) => id = CheckpointId(id.0 + 1),
            Err(CheckpointError::MissingMetadata { .. }) => return Ok(id),
            Err(e) => return Err(e.into()),
        }
    }
}

fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
