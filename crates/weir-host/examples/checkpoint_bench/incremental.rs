//! RocksDB incremental checkpoints through the engine, as a state host takes
//! them at a barrier: the synchronous part (finalize the cut epoch + queue
//! RocksDB's native checkpoint), then the upload, which waits for the native
//! checkpoint and sends only the SST files the previous checkpoint (its base)
//! did not store. The last one is restored into fresh RocksDB and heap
//! operators (download + open, or download + copy).

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use weir_host::engine::{SnapshotFormat, Subtask};
use weir_host::local::LocalOperator;
use weir_host::{BackendSpec, SubtaskSession};
use weir_snapshot::SnapshotMetrics;
use weir_state::StateId;
use weir_types::{Attempt, CheckpointId, Epoch, MaxParallelism, OperatorUid};

use crate::error::{Result, io};
use crate::report::{Records, mib_s, ms, percentile};
use crate::storage;
use crate::workload::{self, Keys};

/// Rounds that change 1% of the keys (compactions make some rounds larger
/// than others, so one is not enough).
const ONE_PERCENT_ROUNDS: u64 = 5;

/// Rounds that change 10% of the keys.
const TEN_PERCENT_ROUNDS: u64 = 2;

/// Keys checked after each restore.
const VERIFIED_KEYS: usize = 2_000;

/// Keys per epoch of the load, as a running job writes them: each epoch's
/// fold into RocksDB runs in the background while the next one is written.
const LOAD_EPOCH_KEYS: usize = 100_000;

/// One RocksDB subtask, its checkpoints so far and where they go.
struct Lineage<'a> {
    runtime: &'a Runtime,
    subtask: Subtask,
    state: StateId,
    checkpoints: weir_checkpoint::CheckpointStorage,
    /// The newest epoch written (and final).
    epoch: u64,
    /// The newest checkpoint: the next one's base.
    last: Option<(CheckpointId, weir_checkpoint::SubtaskStateMeta)>,
    /// `(round, every)`: round `round` changed every `every`-th key.
    rounds: Vec<(u64, usize)>,
}

impl Lineage<'_> {
    /// Writes `indices` with round `round`'s values in the next epoch, which
    /// becomes final at once (as the next epoch's begin would make it).
    fn write(
        &mut self,
        keys: &Keys,
        indices: impl Iterator<Item = usize>,
        round: u64,
    ) -> Result<()> {
        self.epoch += 1;
        let epoch = Epoch(self.epoch);
        self.subtask.begin(epoch, Attempt(0), None)?;
        workload::put(&mut self.subtask, self.state, keys, indices, round)?;
        self.subtask.commit(epoch, Attempt(0))?;
        self.subtask.finalize_up_to(epoch)?;
        Ok(())
    }

    /// Writes the keys round `round` changes in one epoch.
    fn change(&mut self, keys: &Keys, every: usize, round: u64) -> Result<()> {
        self.write(
            keys,
            workload::changed_keys(keys.len(), every, round),
            round,
        )?;
        self.rounds.push((round, every));
        Ok(())
    }

    /// Takes and uploads checkpoint `round + 1` at the newest epoch; returns
    /// the synchronous part's duration, the whole upload's metrics and the
    /// transfer's duration (the upload waits for RocksDB's checkpoint first).
    fn checkpoint(&mut self, round: u64) -> Result<(Duration, SnapshotMetrics, Duration)> {
        let id = CheckpointId(round + 1);
        let format = SnapshotFormat::Incremental {
            base: self.last.as_ref().map(|(base, _)| *base),
        };
        let started = Instant::now();
        let snapshot = self.subtask.snapshot_sync_as(&format, id, "bench")?;
        let sync = started.elapsed();
        let storage = self.checkpoints.state_storage();
        let upload = self
            .runtime
            .block_on(snapshot.upload(self.runtime.handle(), &storage, id))?;
        self.last = Some((id, upload.meta));
        let transfer = upload
            .keyed_metrics
            .map_or(upload.metrics.async_duration, |m| m.async_duration);
        Ok((sync, upload.metrics, transfer))
    }

    /// The round that last wrote key `i` (the load is round 0).
    fn last_writer(&self, i: usize) -> u64 {
        self.rounds
            .iter()
            .rev()
            .find(|&&(round, every)| usize::try_from(round).unwrap_or(0) % every == i % every)
            .map_or(workload::LOAD_ROUND, |&(round, _)| round)
    }
}

/// Loads `keys` into a fresh RocksDB subtask (in epochs of
/// [`LOAD_EPOCH_KEYS`]), takes a first checkpoint (which sends everything), then incremental ones after changing 1% and 10% of the
/// keys, and restores the last one `restores` times into each backend.
pub fn run(
    runtime: &Runtime,
    dir: &Path,
    keys: &Keys,
    max: MaxParallelism,
    restores: u32,
    out: &mut Records,
) -> Result<()> {
    let n = keys.len() as u64;
    let dir = dir.join(format!("incremental-{n}"));
    let uid = workload::operator()?;
    let (subtask, state) = workload::subtask(BackendSpec::RocksDb, max, &dir.join("work"))?;
    let checkpoints_dir = dir.join("checkpoints");
    let mut lineage = Lineage {
        runtime,
        subtask,
        state,
        checkpoints: storage::checkpoints(&checkpoints_dir, "incremental")?,
        epoch: 0,
        last: None,
        rounds: Vec::new(),
    };
    let started = Instant::now();
    for start in (0..keys.len()).step_by(LOAD_EPOCH_KEYS) {
        let end = (start + LOAD_EPOCH_KEYS).min(keys.len());
        lineage.write(keys, start..end, workload::LOAD_ROUND)?;
    }
    // The epochs are written; their folds may still run, which the first
    // checkpoint waits for.
    out.add(
        "incremental",
        "rocksdb",
        n,
        "load_epochs",
        ms(started.elapsed()),
        "ms",
    );

    let (sync, first, transfer) = lineage.checkpoint(workload::LOAD_ROUND)?;
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
        "first_transfer",
        ms(transfer),
        "ms",
    );
    out.add(
        "incremental",
        "rocksdb",
        n,
        "first_upload_rate",
        mib_s(first.uploaded_size, transfer),
        "MiB/s",
    );

    let mut round = 0;
    let mut state_size = first.state_size;
    for (label, every, rounds) in [
        ("1pct", 100, ONE_PERCENT_ROUNDS),
        ("10pct", 10, TEN_PERCENT_ROUNDS),
    ] {
        let (mut ratios, mut syncs, mut uploaded) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            round += 1;
            lineage.change(keys, every, round)?;
            let (sync, metrics, _) = lineage.checkpoint(round)?;
            syncs.push(sync);
            uploaded.push(metrics.uploaded_size);
            ratios.push(metrics.uploaded_size as f64 / metrics.state_size.max(1) as f64);
            state_size = metrics.state_size;
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
    restore_last(
        &lineage,
        &dir,
        keys,
        (&uid, max),
        (state_size, restores),
        out,
    )?;
    drop(lineage);
    std::fs::remove_dir_all(&dir).map_err(io("remove", &dir))?;
    Ok(())
}

/// Completes the newest checkpoint (a chain over every earlier upload) and
/// restores it `restores` times into a fresh operator of each backend, from
/// the disk (the median is reported, as for full restores).
fn restore_last(
    lineage: &Lineage<'_>,
    dir: &Path,
    keys: &Keys,
    (uid, max): (&OperatorUid, MaxParallelism),
    (state_size, restores): (u64, u32),
    out: &mut Records,
) -> Result<()> {
    let Some((id, meta)) = lineage.last.clone() else {
        return Ok(());
    };
    let checkpoints = &lineage.checkpoints;
    let url = lineage.runtime.block_on(storage::complete(
        checkpoints,
        id,
        uid,
        max,
        Epoch(lineage.epoch),
        vec![meta],
    ))?;
    for (name, backend) in [
        ("rocksdb", BackendSpec::RocksDb),
        ("heap", BackendSpec::Heap),
    ] {
        let mut times = Vec::new();
        for attempt in 0..restores {
            storage::evict(&dir.join("checkpoints"))?;
            let work = dir.join(format!("restore-{name}-{attempt}"));
            let started = Instant::now();
            let mut operator =
                LocalOperator::restore(&url, uid.clone(), 1, max, backend.clone(), &work, false)?;
            times.push(started.elapsed());
            let restored = operator.subtask_mut(0)?;
            let sample = workload::sample(keys.len(), VERIFIED_KEYS, |_| true);
            workload::verify(restored, lineage.state, keys, &sample, |i| {
                lineage.last_writer(i)
            })?;
            drop(operator);
            std::fs::remove_dir_all(&work).map_err(io("remove", &work))?;
        }
        let median = percentile(&times, 0.5);
        out.add(
            "incremental",
            name,
            keys.len() as u64,
            "restore_ms",
            ms(median),
            "ms",
        );
        out.add(
            "incremental",
            name,
            keys.len() as u64,
            "restore_rate",
            mib_s(state_size, median),
            "MiB/s",
        );
    }
    Ok(())
}
