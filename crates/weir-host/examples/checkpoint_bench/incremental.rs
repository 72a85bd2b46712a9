//! RocksDB incremental checkpoints: a native checkpoint (flush + hard links,
//! the synchronous part) uploaded with `spawn_incremental_snapshot`, which
//! sends only SST files earlier checkpoints have not sent.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use weir_snapshot::{
    IncrementalTarget, KeyedStateHandle, LocalCheckpoint, LocalFile, SharedFileRegistry,
    SnapshotMetrics, SnapshotStorage, spawn_incremental_snapshot,
};
use weir_state::{KeyedStateBackend, StateId, StateKey};
use weir_state_rocksdb::{NativeCheckpoint, RocksDbKeyedStateBackend, RocksDbOptions};
use weir_types::{Attempt, CheckpointId, Epoch, MaxParallelism, OperatorUid, SubtaskIndex};

use crate::error::{Result, io};
use crate::report::{Records, mib_s, ms, percentile};
use crate::storage;
use crate::workload::{self, Keys};

/// Rounds that change 1% of the keys (compactions make some rounds larger
/// than others, so one is not enough).
const ONE_PERCENT_ROUNDS: u64 = 5;

/// Rounds that change 10% of the keys.
const TEN_PERCENT_ROUNDS: u64 = 2;

/// One RocksDB database, its checkpoints so far and where they go.
struct Lineage<'a> {
    runtime: &'a Runtime,
    dir: &'a Path,
    backend: RocksDbKeyedStateBackend,
    state: StateId,
    storage: SnapshotStorage,
    registry: SharedFileRegistry,
    uid: OperatorUid,
    next: u64,
    /// The newest local native checkpoint (hard links), removed when the next
    /// one is uploaded.
    previous: Option<NativeCheckpoint>,
}

impl Lineage<'_> {
    /// Writes `indices` with their values of `round` in one final epoch.
    fn epoch(
        &mut self,
        keys: &Keys,
        indices: impl Iterator<Item = usize>,
        round: u64,
    ) -> Result<()> {
        let epoch = Epoch(round + 1);
        self.backend.begin_epoch(epoch, Attempt(0))?;
        let mut value = Vec::new();
        for i in indices {
            value.clear();
            workload::value(i, round, &mut value)?;
            self.backend.put_value(
                self.state,
                StateKey::new(keys.group(i), keys.key(i)),
                &value,
            )?;
        }
        self.backend.commit_epoch(epoch, Attempt(0))?;
        self.backend.finalize_up_to(epoch)?;
        Ok(())
    }

    /// Takes and uploads one checkpoint; returns the sync time and metrics.
    fn checkpoint(&mut self) -> Result<(Duration, SnapshotMetrics)> {
        let id = CheckpointId(self.next);
        self.next += 1;
        let local_dir = self.dir.join(format!("native-{}", id.0));
        let started = Instant::now();
        let native = self.backend.native_checkpoint(&local_dir)?;
        let sync = started.elapsed();
        let local = LocalCheckpoint {
            key_group_range: native.key_group_range,
            max_parallelism: native.max_parallelism,
            descriptors: native.descriptors.clone(),
            files: native
                .files
                .iter()
                .map(|f| LocalFile {
                    local_name: f.local_name.clone(),
                    path: f.path.clone(),
                    size: f.size,
                    shared: f.shared,
                })
                .collect(),
        };
        let target = IncrementalTarget {
            uid: self.uid.clone(),
            subtask: SubtaskIndex(0),
            checkpoint: id,
            part_size: 8 << 20,
        };
        let upload = spawn_incremental_snapshot(
            self.runtime.handle(),
            local,
            &self.registry,
            &self.storage,
            target,
        );
        let outcome = self.runtime.block_on(upload)?;
        self.registry
            .register(id, &KeyedStateHandle::Incremental(outcome.handle));
        if let Some(old) = self.previous.replace(native) {
            std::fs::remove_dir_all(&old.dir).map_err(io("remove", &old.dir))?;
        }
        Ok((sync, outcome.metrics))
    }
}

/// Loads `keys` into a fresh RocksDB, takes a first (full) checkpoint, then
/// incremental ones after changing 1% and 10% of the keys.
pub fn run(
    runtime: &Runtime,
    dir: &Path,
    keys: &Keys,
    max: MaxParallelism,
    out: &mut Records,
) -> Result<()> {
    let n = keys.len() as u64;
    let dir = dir.join(format!("incremental-{n}"));
    std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    let mut backend =
        RocksDbKeyedStateBackend::open(RocksDbOptions::new(dir.join("db"), max, max.full_range()))?;
    let state = backend.register_state(&workload::descriptor()?)?;
    let checkpoints = storage::checkpoints(&dir.join("checkpoints"), "incremental")?;
    let mut lineage = Lineage {
        runtime,
        dir: &dir,
        backend,
        state,
        storage: checkpoints.state_storage(),
        registry: SharedFileRegistry::new(),
        uid: OperatorUid::new("bench")?,
        next: 1,
        previous: None,
    };
    lineage.epoch(keys, 0..keys.len(), workload::LOAD_ROUND)?;

    let (sync, first) = lineage.checkpoint()?;
    out.add("incremental", "rocksdb", n, "first_sync", ms(sync), "ms");
    out.add(
        "incremental",
        "rocksdb",
        n,
        "first_bytes",
        first.uploaded_size as f64,
        "bytes",
    );
    out.add(
        "incremental",
        "rocksdb",
        n,
        "first_duration",
        ms(first.async_duration),
        "ms",
    );
    out.add(
        "incremental",
        "rocksdb",
        n,
        "first_upload_rate",
        mib_s(first.uploaded_size, first.async_duration),
        "MiB/s",
    );

    let mut round = 0;
    for (label, every, rounds) in [
        ("1pct", 100, ONE_PERCENT_ROUNDS),
        ("10pct", 10, TEN_PERCENT_ROUNDS),
    ] {
        let (mut ratios, mut syncs, mut uploaded) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            round += 1;
            lineage.epoch(
                keys,
                workload::changed_keys(keys.len(), every, round),
                round,
            )?;
            let (sync, metrics) = lineage.checkpoint()?;
            syncs.push(sync);
            uploaded.push(metrics.uploaded_size);
            ratios.push(metrics.uploaded_size as f64 / metrics.state_size.max(1) as f64);
        }
        ratios.sort_by(f64::total_cmp);
        uploaded.sort_unstable();
        let mid = ratios.len() / 2;
        out.add(
            "incremental",
            "rocksdb",
            n,
            format!("ratio_{label}_p50"),
            ratios[mid],
            "ratio",
        );
        out.add(
            "incremental",
            "rocksdb",
            n,
            format!("ratio_{label}_max"),
            ratios.last().copied().unwrap_or(0.0),
            "ratio",
        );
        out.add(
            "incremental",
            "rocksdb",
            n,
            format!("bytes_{label}_p50"),
            uploaded[mid] as f64,
            "bytes",
        );
        out.add(
            "incremental",
            "rocksdb",
            n,
            format!("sync_{label}_p50"),
            ms(percentile(&syncs, 0.5)),
            "ms",
        );
        out.add(
            "incremental",
            "rocksdb",
            n,
            format!("sync_{label}_max"),
            ms(percentile(&syncs, 1.0)),
            "ms",
        );
    }
    drop(lineage);
    std::fs::remove_dir_all(&dir).map_err(io("remove", &dir))?;
    Ok(())
}
