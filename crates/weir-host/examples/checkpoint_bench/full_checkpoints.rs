//! One subtask's checkpoints through the engine, as a state host takes them:
//! the synchronous pause (finalize the cut epoch + `snapshot_sync`, what the
//! task waits for), the asynchronous upload of a full key-group-indexed
//! snapshot (zstd, the default, `snapshot_compression` `lz4` and `none`,
//! taking turns), and the restore of the last one of each compression into
//! a fresh operator.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use weir_host::local::LocalOperator;
use weir_snapshot::Compression;
use weir_types::{CheckpointId, Epoch, MaxParallelism};

use crate::Backend;
use crate::error::{Result, io};
use crate::memory;
use crate::report::{Records, mib_s, ms, percentile};
use crate::schedstat::{self, Sched};
use crate::storage;
use crate::workload::{self, Keys};

/// How many of each size's measurements to take.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    /// Snapshots whose synchronous part is timed (each after a 1% epoch).
    pub snapshots: u64,
    /// How many of those are uploaded with each compression (zstd, the
    /// default, LZ4 and none, taking turns).
    pub uploads: u64,
    /// Restores of each compression's last upload.
    pub restores: u32,
}

/// Every `EVERY`-th key changes per round: 1%.
const EVERY: usize = 100;

/// Bytes in a MiB.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// Keys checked after each restore.
const VERIFIED_KEYS: usize = 2_000;

/// Runs the sync, async and restore benchmarks for one backend and size.
pub fn run(
    runtime: &Runtime,
    dir: &Path,
    backend: &Backend,
    keys: &Keys,
    max: MaxParallelism,
    rounds: Rounds,
    out: &mut Records,
) -> Result<()> {
    let (name, backend) = (backend.name, &backend.spec);
    let n = keys.len() as u64;
    let uid = workload::operator()?;
    let work = dir.join(format!("work-{name}-{n}"));
    let (mut subtask, state) = workload::subtask(backend.clone(), max, &work)?;

    memory::reset_peak()?;
    let before = memory::resident()?;
    let started = Instant::now();
    workload::epoch(
        &mut subtask,
        state,
        keys,
        0..keys.len(),
        workload::LOAD_ROUND,
    )?;
    subtask.finalize_all()?;
    let loaded = memory::resident()?;
    out.add(
        "load",
        name,
        n,
        "load_s",
        started.elapsed().as_secs_f64(),
        "s",
    );

    let checkpoints_dir = dir.join(format!("checkpoints-{name}-{n}"));
    let checkpoints = storage::checkpoints(&checkpoints_dir, "bench")?;
    let state_storage = checkpoints.state_storage();
    let (mut pauses, mut finalizes, mut syncs) = (Vec::new(), Vec::new(), Vec::new());
    let mut scheds: Vec<Sched> = Vec::new();
    let mut beside: Vec<String> = Vec::new();
    let mut uploads = [
        Uploads::new(Compression::Zstd),
        Uploads::new(Compression::Lz4),
        Uploads::new(Compression::None),
    ];
    for round in 1..=rounds.snapshots {
        workload::epoch(
            &mut subtask,
            state,
            keys,
            workload::changed_keys(keys.len(), EVERY, round),
            round,
        )?;
        // The barrier of the host: make the cut epoch final, then freeze.
        let threads = schedstat::threads()?;
        let before = schedstat::now()?;
        let started = Instant::now();
        subtask.finalize_up_to(Epoch(round + 1))?;
        let finalized = started.elapsed();
        let snapshot = subtask.snapshot_sync()?;
        let pause = started.elapsed();
        scheds.push(before.until(schedstat::now()?));
        beside.push(schedstat::busiest(&threads, &schedstat::threads()?, 4));
        pauses.push(pause);
        finalizes.push(finalized);
        syncs.push(pause - finalized);
        // The compressions take turns, so none of them always runs first
        // (RocksDB still compacts the load in the background then).
        let uploaded = (round - 1) as usize;
        if uploaded >= rounds.uploads as usize * uploads.len() {
            continue;
        }
        let series = &mut uploads[uploaded % uploads.len()];
        let id = CheckpointId(round);
        let snapshot = snapshot.with_compression(series.compression);
        let upload = runtime.block_on(snapshot.upload(runtime.handle(), &state_storage, id))?;
        series.durations.push(upload.metrics.async_duration);
        series.bytes = upload.metrics.uploaded_size;
        series.entries = upload.metrics.entries.unwrap_or(0);
        if let Some((previous, _)) = series.last.replace((id, upload.meta)) {
            // Only the newest upload is restored; the others just take disk.
            runtime.block_on(checkpoints.discard(previous))?;
        }
    }
    // The subtask's peak: loading, 1% epochs, snapshots and their uploads
    // (before the restores below, which open a second operator).
    let peak = memory::resident()?.peak;
    out.add(
        "memory",
        name,
        n,
        "rss_before_load",
        mib(before.current),
        "MiB",
    );
    out.add("memory", name, n, "rss_loaded", mib(loaded.current), "MiB");
    out.add("memory", name, n, "rss_peak", mib(peak), "MiB");
    out.add(
        "memory",
        name,
        n,
        "peak_bytes_per_key",
        peak.saturating_sub(before.current) as f64 / n as f64,
        "bytes/key",
    );
    out.add_percentiles("sync_pause", name, n, "pause", &pauses);
    out.add_percentiles("sync_pause", name, n, "finalize", &finalizes);
    out.add_percentiles("sync_pause", name, n, "snapshot_sync", &syncs);
    out.add(
        "sync_pause",
        name,
        n,
        "snapshots",
        pauses.len() as f64,
        "count",
    );
    slowest_pause(out, (name, n), &pauses, &finalizes, (&scheds, &beside));

    for series in &uploads {
        series.report(name, n, out);
    }
    drop(subtask);

    for series in &mut uploads {
        let Some((id, meta)) = series.last.take() else {
            continue;
        };
        let url = runtime.block_on(storage::complete(
            &checkpoints,
            id,
            &uid,
            max,
            Epoch(id.0 + 1),
            vec![meta],
        ))?;
        let mut times = Vec::new();
        for attempt in 0..rounds.restores {
            storage::evict(&checkpoints_dir)?;
            let restore_work = dir.join(format!("restore-{name}-{n}-{attempt}"));
            let started = Instant::now();
            let mut operator = LocalOperator::restore(
                &url,
                uid.clone(),
                1,
                max,
                backend.clone(),
                &restore_work,
                false,
            )?;
            times.push(started.elapsed());
            let restored = operator.subtask_mut(0)?;
            let sample = workload::sample(keys.len(), VERIFIED_KEYS, |_| true);
            workload::verify(restored, state, keys, &sample, |i| {
                workload::last_writer(i, EVERY, id.0)
            })?;
            drop(operator);
            std::fs::remove_dir_all(&restore_work).map_err(io("remove", &restore_work))?;
        }
        let benchmark = series.benchmark("restore");
        report_restore(out, benchmark, name, n, series.bytes, &times);
    }
    std::fs::remove_dir_all(&checkpoints_dir).map_err(io("remove", &checkpoints_dir))?;
    Ok(())
}

/// Restore time (median) and the rate at which it consumed snapshot bytes.
fn report_restore(
    out: &mut Records,
    benchmark: &'static str,
    name: &'static str,
    n: u64,
    bytes: u64,
    times: &[Duration],
) {
    let median = percentile(times, 0.5);
    out.add(benchmark, name, n, "restore_p50", ms(median), "ms");
    out.add(benchmark, name, n, "snapshot_bytes", bytes as f64, "bytes");
    out.add(
        benchmark,
        name,
        n,
        "restore_rate",
        mib_s(bytes, median),
        "MiB/s",
    );
    out.add(benchmark, name, n, "restores", times.len() as f64, "count");
}

/// The uploads of one compression and what they measured.
struct Uploads {
    compression: Compression,
    durations: Vec<Duration>,
    bytes: u64,
    entries: u64,
    /// The newest upload, restored at the end.
    last: Option<(CheckpointId, weir_checkpoint::SubtaskStateMeta)>,
}

impl Uploads {
    fn new(compression: Compression) -> Self {
        Self {
            compression,
            durations: Vec::new(),
            bytes: 0,
            entries: 0,
            last: None,
        }
    }

    /// The name of its records of `kind` (`async_upload`, `restore`):
    /// `kind` itself for zstd (the default), `kind_<compression>` otherwise.
    fn benchmark(&self, kind: &'static str) -> &'static str {
        match (kind, self.compression) {
            (_, Compression::Zstd) => kind,
            ("restore", Compression::Lz4) => "restore_lz4",
            ("restore", Compression::None) => "restore_none",
            (_, Compression::Lz4) => "async_upload_lz4",
            (_, Compression::None) => "async_upload_none",
        }
    }

    /// Adds its records: benchmark `async_upload` for zstd (the default),
    /// `async_upload_<name>` for another.
    fn report(&self, backend: &'static str, n: u64, out: &mut Records) {
        if self.durations.is_empty() {
            return;
        }
        let benchmark = self.benchmark("async_upload");
        let median = percentile(&self.durations, 0.5);
        let uploads = self.durations.len() as f64;
        out.add(benchmark, backend, n, "duration_p50", ms(median), "ms");
        // What the median hides: the zstd series' first upload follows the
        // load, which RocksDB may not have folded yet, and later ones share
        // the cores with RocksDB's compactions of it.
        let slowest = percentile(&self.durations, 1.0);
        out.add(benchmark, backend, n, "duration_max", ms(slowest), "ms");
        out.add(
            benchmark,
            backend,
            n,
            "uploaded_bytes",
            self.bytes as f64,
            "bytes",
        );
        out.add(
            benchmark,
            backend,
            n,
            "entries",
            self.entries as f64,
            "count",
        );
        out.add(
            benchmark,
            backend,
            n,
            "upload_rate",
            mib_s(self.bytes, median),
            "MiB/s",
        );
        out.add(benchmark, backend, n, "uploads", uploads, "count");
    }
}

/// The slowest pause's round (1 is the first after the load) and where its
/// wall time went: finalize, on a core, waiting for one, asleep.
fn slowest_pause(
    out: &mut Records,
    (name, n): (&'static str, u64),
    pauses: &[Duration],
    finalizes: &[Duration],
    (scheds, beside): (&[Sched], &[String]),
) {
    let Some((index, pause)) = pauses.iter().enumerate().max_by_key(|(_, pause)| **pause) else {
        return;
    };
    let sched = scheds[index];
    let on_cpu = Duration::from_nanos(sched.on_cpu);
    let waiting = Duration::from_nanos(sched.waiting_for_cpu);
    let asleep = pause.saturating_sub(on_cpu + waiting);
    out.add(
        "sync_pause",
        name,
        n,
        "slowest_round",
        (index + 1) as f64,
        "round",
    );
    for (metric, value) in [
        ("slowest_finalize_ms", finalizes[index]),
        ("slowest_on_cpu_ms", on_cpu),
        ("slowest_waiting_for_cpu_ms", waiting),
        ("slowest_asleep_ms", asleep),
    ] {
        out.add("sync_pause", name, n, metric, ms(value), "ms");
    }
    out.note(format!(
        "{name} {n} keys: slowest pause {:.2} ms (round {}; {:.2} ms waiting for a core); \
         threads on a core meanwhile (the pause's own included): {}",
        ms(*pause),
        index + 1,
        ms(waiting),
        beside[index]
    ));
}
