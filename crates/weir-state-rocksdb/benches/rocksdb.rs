//! RocksDB backend benchmarks: value get+update, single against batched
//! reads, the synchronous snapshot
//! part versus state size, and incremental versus full checkpoint bytes.
//! Timings live here, never in tests (see docs/benchmarks.md).

use std::hint::black_box;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weir_state::{EntryPayload, KeyedStateBackend, StateEntry, StateId, StateKey};
use weir_state_rocksdb::{RocksDbKeyedStateBackend, RocksDbOptions};
use weir_types::{Attempt, Epoch, KeyGroup, MaxParallelism, StateDescriptor, StateKind, ValueType};

const MAX: u32 = 128;

/// A backend holding `n` value entries, loaded through `ingest` (the restore
/// path) so large sizes load quickly.
fn loaded(path: &Path, n: u64) -> (RocksDbKeyedStateBackend, StateId) {
    let max = MaxParallelism::new(MAX).expect("valid");
    let mut backend =
        RocksDbKeyedStateBackend::open(RocksDbOptions::new(path, max, max.full_range()))
            .expect("open");
    let descriptor =
        StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid");
    let state = backend.register_state(&descriptor).expect("register");
    for i in 0..n {
        let key = i.to_le_bytes();
        backend
            .ingest(StateEntry {
                state,
                key_group: key_group(i),
                key: &key,
                namespace: &[],
                payload: EntryPayload::Value(&0u64.to_le_bytes()),
            })
            .expect("ingest");
    }
    (backend, state)
}

fn key_group(i: u64) -> KeyGroup {
    KeyGroup(u16::try_from(i % u64::from(MAX)).expect("below max"))
}

/// Reads and increments keys `keys` in one epoch, then finalizes it.
fn update_epoch(
    backend: &mut RocksDbKeyedStateBackend,
    state: StateId,
    epoch: u64,
    keys: impl Iterator<Item = u64>,
) {
    backend
        .begin_epoch(Epoch(epoch), Attempt(0))
        .expect("begin");
    for i in keys {
        let key_bytes = i.to_le_bytes();
        let key = StateKey::new(key_group(i), &key_bytes);
        let old = backend
            .get_value(state, key)
            .expect("get")
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_le_bytes);
        backend
            .put_value(state, key, &(old + 1).to_le_bytes())
            .expect("put");
    }
    backend
        .commit_epoch(Epoch(epoch), Attempt(0))
        .expect("commit");
    backend.finalize_up_to(Epoch(epoch)).expect("finalize");
}

fn value_get_update(c: &mut Criterion) {
    let mut group = c.benchmark_group("value_get_update");
    group.sample_size(10);
    const BATCH: u64 = 10_000;
    for n in [10_000u64, 1_000_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut backend, state) = loaded(dir.path(), n);
        let mut epoch = 0;
        let mut next = 0u64;
        group.throughput(Throughput::Elements(BATCH));
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                epoch += 1;
                // A stride walks the whole key space, so reads are not all cached.
                let keys = (0..BATCH).map(|j| (next + j * 7919) % n);
                update_epoch(&mut backend, state, epoch, keys);
                next = (next + 1) % n;
            })
        });
    }
    group.finish();
}

/// A task's reads of its keys' values: one `get_value` per key against
/// `get_values` (batched `MultiGet`), 8,000 keys spread over the key space
/// as a Spark batch's new keys are.
fn value_reads(c: &mut Criterion) {
    let mut group = c.benchmark_group("value_reads");
    group.sample_size(20);
    const KEYS: u64 = 8_000;
    for n in [100_000u64, 1_000_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut backend, state) = loaded(&dir.path().join("db"), n);
        // In SST files, as after the checkpoints of a running job.
        backend
            .native_checkpoint(&dir.path().join("chk"))
            .expect("checkpoint");
        backend.wait_for_compactions().expect("compactions");
        let keys: Vec<[u8; 8]> = (0..KEYS)
            .map(|j| ((j * 2_654_435_761) % n).to_le_bytes())
            .collect();
        let state_keys = || {
            keys.iter()
                .map(|key| StateKey::new(key_group(u64::from_le_bytes(*key)), key))
        };
        group.throughput(Throughput::Elements(KEYS));
        group.bench_function(BenchmarkId::new("single", n), |b| {
            b.iter(|| {
                for key in state_keys() {
                    black_box(backend.get_value(state, key).expect("get").is_some());
                }
            })
        });
        group.bench_function(BenchmarkId::new("batched", n), |b| {
            b.iter(|| {
                backend
                    .get_values(state, state_keys(), |value| {
                        black_box(value.is_some());
                        Ok::<_, weir_state::StateError>(())
                    })
                    .expect("get")
            })
        });
    }
    group.finish();
}

fn snapshot_sync(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot_sync");
    group.sample_size(20);
    for n in [10_000u64, 100_000, 1_000_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut backend, state) = loaded(dir.path(), n);
        // Some state in the memtable too, as during a running job.
        update_epoch(&mut backend, state, 1, 0..n.min(10_000));
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(backend.snapshot_sync().expect("snapshot")))
        });
    }
    group.finish();
}

fn incremental_checkpoint(c: &mut Criterion) {
    let mut group = c.benchmark_group("incremental_checkpoint");
    group.sample_size(10);
    for n in [100_000u64, 1_000_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut backend, state) = loaded(&dir.path().join("db"), n);
        let mut round = 0u64;
        let mut previous = backend
            .native_checkpoint(&dir.path().join("chk-0"))
            .expect("checkpoint");
        let mut report = true;
        group.bench_function(BenchmarkId::new("one_percent_changed", n), |b| {
            b.iter(|| {
                round += 1;
                update_epoch(&mut backend, state, round, (0..n).step_by(100).map(|i| i + round % 100));
                let next = backend
                    .native_checkpoint(&dir.path().join(format!("chk-{round}")))
                    .expect("checkpoint");
                if report {
                    let new_sst: u64 = next.new_shared_files(&previous).map(|f| f.size).sum();
                    eprintln!(
                        "keys {n}: full checkpoint {} bytes, incremental {} bytes ({} new sst), {:.2}% of full",
                        next.total_bytes(),
                        next.incremental_bytes(&previous),
                        new_sst,
                        100.0 * next.incremental_bytes(&previous) as f64 / next.total_bytes() as f64
                    );
                    report = false;
                }
                std::fs::remove_dir_all(&previous.dir).expect("remove old checkpoint");
                previous = next;
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    value_get_update,
    value_reads,
    snapshot_sync,
    incremental_checkpoint
);
criterion_main!(benches);
