//! Snapshot at parallelism P, restore at P' (heap and RocksDB): the union of
//! the restored subtasks holds exactly what the reference model holds, and
//! each subtask holds only its own key groups.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use proptest::prelude::*;
use weir_snapshot::{
    FullSnapshotOptions, KeyedStateHandle, SnapshotStorage, restore_keyed, spawn_full_snapshot,
};
use weir_state::{HeapKeyedStateBackend, KeyedStateBackend, StateId, StateKey, push_list_item};
use weir_state_rocksdb::{RocksDbKeyedStateBackend, RocksDbOptions};
use weir_testing::{Dump, ModelBackend, descriptors, dump};
use weir_types::{Attempt, Epoch, KeyGroupRange, MaxParallelism, SubtaskIndex};

/// One write: (state 0..4, key, namespace, value).
type Write = (u32, u16, u8, u8);

fn max() -> MaxParallelism {
    MaxParallelism::new(16).expect("valid")
}

fn apply(b: &mut dyn KeyedStateBackend, w: &Write) -> weir_state::Result<()> {
    let (state, key, ns, value) = *w;
    let (kg, k) = weir_testing::ops::key_bytes((key % 256) as u8, max());
    let k = [k.as_slice(), &key.to_le_bytes()].concat();
    let at = StateKey {
        key_group: kg,
        key: &k,
        namespace: &[ns],
    };
    match state {
        0 | 1 => b.put_value(StateId(state), at, &[value]),
        2 => {
            let mut p = Vec::new();
            push_list_item(&[value], &mut p);
            b.append_list(StateId(2), at, &p)
        }
        _ => b.map_put(StateId(3), at, &[value % 5], &[value]),
    }
}

fn ranges(p: u32) -> Vec<KeyGroupRange> {
    (0..p)
        .map(|s| KeyGroupRange::for_subtask(max(), p, SubtaskIndex(s)).expect("valid"))
        .collect()
}

fn owner(b: &[Box<dyn KeyedStateBackend>], w: &Write) -> usize {
    let (kg, _) = weir_testing::ops::key_bytes((w.1 % 256) as u8, max());
    b.iter()
        .position(|b| b.key_group_range().contains(kg))
        .expect("some subtask owns every key group")
}

fn open(kind: &str, range: KeyGroupRange, dir: &std::path::Path) -> Box<dyn KeyedStateBackend> {
    match kind {
        "heap" => Box::new(HeapKeyedStateBackend::new(max(), range).expect("valid")),
        _ => Box::new(
            RocksDbKeyedStateBackend::open(RocksDbOptions::new(dir, max(), range)).expect("opens"),
        ),
    }
}

fn check(writes: &[Write], from: u32, to: u32, source: &str, target: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = SnapshotStorage {
        store: Arc::new(InMemory::new()),
        root: Path::from("job"),
        local: None,
    };

    let mut model = ModelBackend::new(max(), max().full_range());
    let mut old: Vec<Box<dyn KeyedStateBackend>> = ranges(from)
        .into_iter()
        .enumerate()
        .map(|(s, r)| open(source, r, &tmp.path().join(format!("old-{s}"))))
        .collect();
    let all: Vec<&mut dyn KeyedStateBackend> =
        std::iter::once(&mut model as &mut dyn KeyedStateBackend)
            .chain(old.iter_mut().map(|b| b.as_mut()))
            .collect();
    for b in all {
        for d in descriptors() {
            b.register_state(&d).expect("registers");
        }
        b.begin_epoch(Epoch(1), Attempt(0)).expect("begins");
    }
    for w in writes {
        apply(&mut model, w).expect("model write");
        let s = owner(&old, w);
        apply(old[s].as_mut(), w).expect("backend write");
    }
    let mut handles = Vec::new();
    for (s, b) in std::iter::once(&mut model as &mut dyn KeyedStateBackend)
        .chain(old.iter_mut().map(|b| b.as_mut()))
        .enumerate()
    {
        b.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
        b.finalize_up_to(Epoch(1)).expect("finalizes");
        if s == 0 {
            continue;
        }
        let frozen = b.snapshot_sync().expect("sync part");
        let outcome = runtime
            .block_on(spawn_full_snapshot(
                runtime.handle(),
                frozen,
                &storage,
                &format!("chk-1/op/{s}"),
                FullSnapshotOptions::default(),
            ))
            .expect("async part");
        handles.push(KeyedStateHandle::Full(outcome.handle));
    }
    let expected = dump(model.snapshot_sync().expect("model snapshot").as_ref()).expect("dump");

    let mut union = Dump::new();
    for (s, range) in ranges(to).into_iter().enumerate() {
        let mut b = open(target, range, &tmp.path().join(format!("new-{s}")));
        runtime
            .block_on(restore_keyed(
                b.as_mut(),
                &handles,
                &*storage.store,
                &storage.root,
            ))
            .expect("restores");
        let got = dump(b.snapshot_sync().expect("sync part").as_ref()).expect("dump");
        for (addr, content) in got {
            assert!(
                range.contains(addr.1),
                "subtask {s} of {to} holds key group {}",
                addr.1
            );
            assert!(
                union.insert(addr, content).is_none(),
                "an entry restored twice"
            );
        }
    }
    assert_eq!(union, expected, "{source} P={from} -> {target} P'={to}");
}

fn writes() -> impl Strategy<Value = Vec<Write>> {
    proptest::collection::vec((0u32..4, 0u16..600, 0u8..2, any::<u8>()), 0..300)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn heap_to_heap(w in writes(), (from, to) in prop_oneof![Just((1, 3)), Just((2, 3)), Just((3, 2)), Just((4, 1)), Just((2, 5))]) {
        check(&w, from, to, "heap", "heap");
    }

    #[test]
    fn heap_to_rocksdb_and_back(w in writes(), (from, to) in prop_oneof![Just((2, 3)), Just((3, 1)), Just((1, 4))]) {
        check(&w, from, to, "heap", "rocksdb");
        check(&w, to, from, "rocksdb", "heap");
    }
}
