//! The synchronous snapshot part: a consistent view, entries per key group,
//! and restore through `ingest` into a narrower backend.

use std::collections::BTreeSet;

use weir_state::{EntryPayload, FrozenKeyedState, KeyedStateBackend, StateError};
use weir_state_rocksdb::RocksDbKeyedStateBackend;
use weir_types::{Attempt, Epoch, KeyGroupRange};

use crate::fixture::{Key, final_epoch, list, open, options, register_all, value};

/// Every entry of a view, rendered so views can be compared.
fn dump(frozen: &dyn FrozenKeyedState) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kg in frozen.key_group_range().iter() {
        frozen
            .for_each_entry(kg, &mut |e| {
                assert_eq!(e.key_group, kg);
                let name = &frozen.descriptors()[e.state.0 as usize].name;
                out.insert(format!(
                    "{name} {} {:?} {:?} {:?}",
                    e.key_group, e.key, e.namespace, e.payload
                ));
                Ok(())
            })
            .expect("scan");
    }
    out
}

fn fill(b: &mut RocksDbKeyedStateBackend, keys: std::ops::Range<i64>, tag: &[u8]) {
    let s = register_all(b);
    for i in keys {
        let k = Key::new(i);
        b.put_value(s.value, k.state_key(), tag).expect("put");
        b.append_list(s.list, k.state_key(), &list(&[tag]))
            .expect("append");
        b.map_put(s.map, k.state_key(), b"u", tag).expect("put");
    }
}

#[test]
fn later_writes_never_show_through_a_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    b.begin_epoch(Epoch(1), Attempt(0)).expect("begin");
    fill(&mut b, 0..200, b"before");
    b.commit_epoch(Epoch(1), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(1)).expect("finalize");
    let frozen = b.snapshot_sync().expect("snapshot");
    let before = dump(frozen.as_ref());
    assert_eq!(before.len(), 600);

    b.begin_epoch(Epoch(2), Attempt(0)).expect("begin");
    fill(&mut b, 0..300, b"after");
    let s = register_all(&mut b);
    b.clear(s.map, Key::new(5).state_key()).expect("clear");
    b.commit_epoch(Epoch(2), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(2)).expect("finalize");
    // Flushes and compactions must not change the view either.
    b.native_checkpoint(&dir.path().join("chk"))
        .expect("checkpoint");
    assert_eq!(dump(frozen.as_ref()), before);
    // The view outlives the backend (it owns the database handle).
    drop(b);
    assert_eq!(dump(frozen.as_ref()), before);
}

#[test]
fn snapshot_needs_every_epoch_final() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    b.begin_epoch(Epoch(1), Attempt(0)).expect("begin");
    assert!(matches!(
        b.snapshot_sync(),
        Err(StateError::EpochsNotFinal { .. })
    ));
}

#[test]
fn snapshot_yields_canonical_entries_that_ingest_into_a_narrower_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(&dir.path().join("full"));
    final_epoch(&mut b, 1, |_| {});
    b.begin_epoch(Epoch(2), Attempt(0)).expect("begin");
    fill(&mut b, 0..100, b"v");
    b.commit_epoch(Epoch(2), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(2)).expect("finalize");
    let frozen = b.snapshot_sync().expect("snapshot");

    let range = KeyGroupRange::new(4, 9).expect("valid");
    let mut narrow =
        RocksDbKeyedStateBackend::open(options(&dir.path().join("narrow"), range)).expect("open");
    let s = register_all(&mut narrow);
    let mut ingested = 0;
    for kg in range.iter() {
        frozen
            .for_each_entry(kg, &mut |e| {
                assert!(!matches!(e.payload, EntryPayload::List(p) if p.is_empty()));
                ingested += 1;
                narrow.ingest(e)
            })
            .expect("ingest");
    }
    assert!(ingested > 0);
    for i in 0..100 {
        let k = Key::new(i);
        let expected = range.contains(k.key_group).then(|| b"v".to_vec());
        if expected.is_some() {
            assert_eq!(value(&mut narrow, s.value, &k), expected);
            assert_eq!(
                narrow
                    .map_get(s.map, k.state_key(), b"u")
                    .expect("get")
                    .as_deref(),
                Some(&b"v"[..])
            );
            assert_eq!(
                narrow
                    .get_list(s.list, k.state_key())
                    .expect("get")
                    .as_deref(),
                Some(&list(&[b"v"])[..])
            );
        }
    }
    let narrow_frozen = narrow.snapshot_sync().expect("snapshot");
    assert_eq!(dump(narrow_frozen.as_ref()).len(), ingested);
}
