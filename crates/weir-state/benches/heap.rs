//! Heap backend hot path and snapshot cost: value-state get+update at 10^4 and
//! 10^6 keys, a batch's read and write-back of its rows (each row looked up
//! twice, or written where the batch read found it), and the synchronous
//! snapshot part at 10^4..10^7 entries (it must not grow with the data
//! beyond cloning one `Arc` per key group).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weir_state::{
    EntryHint, HeapKeyedStateBackend, KeyedStateBackend, PREFETCH_AHEAD, StateError, StateId,
    StateKey,
};
use weir_types::{Attempt, Epoch, KeyGroup, MaxParallelism, StateDescriptor, StateKind, ValueType};

const MAX_PARALLELISM: u32 = 128;

/// A backend holding all key groups with `n` value entries, epoch 1 final.
fn filled(n: u64) -> (HeapKeyedStateBackend, StateId, Vec<([u8; 8], KeyGroup)>) {
    let max = MaxParallelism::new(MAX_PARALLELISM).expect("valid max");
    let mut b = HeapKeyedStateBackend::new(max, max.full_range()).expect("fits");
    let d = StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid");
    let id = b.register_state(&d).expect("registers");
    let keys: Vec<([u8; 8], KeyGroup)> = (0..n)
        .map(|i| {
            let k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
            (k, KeyGroup((i % u64::from(MAX_PARALLELISM)) as u16))
        })
        .collect();
    b.begin_epoch(Epoch(1), Attempt(0)).expect("begins");
    for (k, kg) in &keys {
        b.put_value(id, StateKey::new(*kg, k), &0i64.to_le_bytes())
            .expect("puts");
    }
    b.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
    b.finalize_up_to(Epoch(1)).expect("finalizes");
    (b, id, keys)
}

fn get_update(c: &mut Criterion) {
    let mut group = c.benchmark_group("heap_value_get_update");
    group.throughput(Throughput::Elements(1));
    for n in [10_000u64, 1_000_000] {
        // Criterion calls the closure once per sample; set up once, and only
        // when the filter selects this benchmark.
        let mut setup = None;
        let mut next = 0usize;
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, &n| {
            let (b, id, keys, order) = setup.get_or_insert_with(|| {
                let (mut b, id, keys) = filled(n);
                b.begin_epoch(Epoch(2), Attempt(0)).expect("begins");
                // Visit keys in a scattered order so lookups miss the cache
                // as a real key stream would.
                let order: Vec<usize> = (0..keys.len())
                    .map(|i| (i.wrapping_mul(7_919)) % keys.len())
                    .collect();
                (b, id, keys, order)
            });
            bench.iter(|| {
                let (k, kg) = &keys[order[next]];
                next = (next + 1) % order.len();
                let key = StateKey::new(*kg, k);
                let old = b.get_value(*id, key).expect("reads").map_or(0, |v| {
                    i64::from_le_bytes(v.as_ref().try_into().expect("8 bytes"))
                });
                b.put_value(*id, key, &(old + 1).to_le_bytes())
                    .expect("puts");
            });
        });
    }
    group.finish();
}

/// Rows per batch and keys of the backend in `batch_read_write`: a
/// vectorized function's 10,000-row batches over one of two subtasks'
/// share of 100,000 keys, as in the keyed-average benchmark.
const BATCH_ROWS: usize = 10_000;
const BATCH_KEYS: u64 = 50_000;

/// A batch's read of its rows' values and its write of new ones (the
/// `get_batch` / `put_batch` pair of a vectorized function): every row
/// looked up twice, or written where the read found it.
fn batch_read_write(c: &mut Criterion) {
    let mut group = c.benchmark_group("heap_batch_read_write");
    group.throughput(Throughput::Elements(BATCH_ROWS as u64));
    let (mut b, id, keys) = filled(BATCH_KEYS);
    b.begin_epoch(Epoch(2), Attempt(0)).expect("begins");
    let batches: Vec<Vec<StateKey<'_>>> = (0..16_u64)
        .map(|batch| {
            (0..BATCH_ROWS as u64)
                .map(|row| {
                    let i =
                        (batch * BATCH_ROWS as u64 + row).wrapping_mul(0x2545_F491) % BATCH_KEYS;
                    let (k, kg) = &keys[i as usize];
                    StateKey::new(*kg, k)
                })
                .collect()
        })
        .collect();
    let value = [7_u8; 17];
    let mut next = 0;
    group.bench_function("lookup_each", |bench| {
        bench.iter(|| {
            let batch = &batches[next % batches.len()];
            next += 1;
            let mut read = 0;
            for (i, key) in batch.iter().enumerate() {
                if let Some(ahead) = batch.get(i + PREFETCH_AHEAD) {
                    b.prefetch_value(id, *ahead);
                }
                read += b.get_value(id, *key).expect("reads").map_or(0, |v| v.len());
            }
            for (i, key) in batch.iter().enumerate() {
                if let Some(ahead) = batch.get(i + PREFETCH_AHEAD) {
                    b.prefetch_value(id, *ahead);
                }
                b.put_value(id, *key, &value).expect("writes");
            }
            black_box(read)
        });
    });
    let mut found: Vec<Option<EntryHint>> = Vec::with_capacity(BATCH_ROWS);
    group.bench_function("write_where_read", |bench| {
        bench.iter(|| {
            let batch = &batches[next % batches.len()];
            next += 1;
            let mut read = 0;
            found.clear();
            b.get_values_at(id, batch.iter().copied(), |v, at| {
                read += v.map_or(0, <[u8]>::len);
                found.push(at);
                Ok::<_, StateError>(())
            })
            .expect("reads");
            for (i, key) in batch.iter().enumerate() {
                if let (Some(ahead), Some(Some(at))) =
                    (batch.get(i + PREFETCH_AHEAD), found.get(i + PREFETCH_AHEAD))
                {
                    b.prefetch_at(id, ahead.key_group, *at);
                }
                b.put_value_at(id, *key, found[i], &value).expect("writes");
            }
            black_box(read)
        });
    });
    group.finish();
}

fn snapshot_sync(c: &mut Criterion) {
    let mut group = c.benchmark_group("heap_snapshot_sync");
    for n in [10_000u64, 100_000, 1_000_000, 10_000_000] {
        if n >= 10_000_000 {
            group.sample_size(10);
        }
        let mut setup = None;
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, &n| {
            let b = &mut setup.get_or_insert_with(|| filled(n)).0;
            bench.iter(|| black_box(b.snapshot_sync().expect("all final")));
        });
    }
    group.finish();
}

criterion_group!(benches, get_update, batch_read_write, snapshot_sync);
criterion_main!(benches);
