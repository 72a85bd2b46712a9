//! Random operation sequences give the same answers on the heap backend, the
//! RocksDB backend and the plain reference model, step by step, including the
//! full contents at every snapshot.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use weir_state::{HeapKeyedStateBackend, KeyedStateBackend};
use weir_state_rocksdb::{RocksDbKeyedStateBackend, RocksDbOptions};
use weir_testing::{ModelBackend, Op, op, run_and_compare};
use weir_types::MaxParallelism;

fn max() -> MaxParallelism {
    MaxParallelism::new(16).expect("valid")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn heap_agrees_with_model(ops in proptest::collection::vec(op(), 1..200)) {
        let mut model = ModelBackend::new(max(), max().full_range());
        let mut heap = HeapKeyedStateBackend::new(max(), max().full_range()).expect("valid");
        let mut backends: [&mut dyn KeyedStateBackend; 2] = [&mut model, &mut heap];
        run_and_compare(&mut backends, &ops);
    }

    #[test]
    fn rocksdb_and_heap_agree_with_model(ops in proptest::collection::vec(op(), 1..200)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut model = ModelBackend::new(max(), max().full_range());
        let mut heap = HeapKeyedStateBackend::new(max(), max().full_range()).expect("valid");
        let mut rocks = RocksDbKeyedStateBackend::open(RocksDbOptions::new(dir.path(), max(), max().full_range()))
            .expect("opens");
        let mut backends: [&mut dyn KeyedStateBackend; 3] = [&mut model, &mut heap, &mut rocks];
        run_and_compare(&mut backends, &ops);
    }
}

#[test]
fn sequences_reach_every_kind_of_outcome() {
    use weir_testing::Outcome;
    // Guard against a generator that only produces failures or no reads.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let ops: Vec<Op> = (0..400)
        .map(|_| op().new_tree(&mut runner).expect("generates").current())
        .collect();
    let mut model = ModelBackend::new(max(), max().full_range());
    let mut backends: [&mut dyn KeyedStateBackend; 1] = [&mut model];
    let outcomes = run_and_compare(&mut backends, &ops);
    let reads_some = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Read(Some(_))))
        .count();
    let snapshots = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Snapshot(d) if !d.is_empty()))
        .count();
    let failures = outcomes.iter().filter(|o| **o == Outcome::Failed).count();
    assert!(reads_some > 10, "only {reads_some} reads found data");
    assert!(snapshots > 2, "only {snapshots} non-empty snapshots");
    assert!(failures > 0, "no write ever hit a committed epoch");
}
