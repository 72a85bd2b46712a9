//! The heap backend against the trait contract: epochs, copy-on-write
//! snapshots, kind / range / duplicate errors and restore.

use std::collections::BTreeMap;

use weir_state::{
    EntryHint, EntryPayload, FrozenKeyedState, HeapKeyedStateBackend, KeyGroupLoad,
    KeyedStateBackend, StateError, StateId, StateKey, load_key_groups, push_list_item,
};
use weir_types::{
    Attempt, Epoch, KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor, StateKind, ValueType,
};

const VALUE: StateId = StateId(0);
const LIST: StateId = StateId(1);
const MAP: StateId = StateId(2);
const SUM: StateId = StateId(3);

fn backend() -> HeapKeyedStateBackend {
    let max = MaxParallelism::new(8).expect("valid max");
    let range = KeyGroupRange::new(2, 6).expect("valid range");
    let mut b = HeapKeyedStateBackend::new(max, range).expect("range fits");
    for d in [
        StateDescriptor::new("count", StateKind::Value, ValueType::Int64),
        StateDescriptor::new("events", StateKind::List, ValueType::Utf8),
        StateDescriptor::map("by_tag", ValueType::Utf8, ValueType::Int64),
        StateDescriptor::new("sum", StateKind::Reducing, ValueType::Int64),
    ] {
        b.register_state(&d.expect("valid descriptor"))
            .expect("registers");
    }
    b
}

fn key(k: &[u8]) -> StateKey<'_> {
    StateKey::new(KeyGroup(2 + (k[0] % 4) as u16), k)
}

fn list(items: &[&str]) -> Vec<u8> {
    let mut p = Vec::new();
    for i in items {
        push_list_item(i.as_bytes(), &mut p);
    }
    p
}

fn begin(b: &mut HeapKeyedStateBackend, e: u64, a: u32) {
    b.begin_epoch(Epoch(e), Attempt(a)).expect("begins");
}

fn commit_final(b: &mut HeapKeyedStateBackend, e: u64, a: u32) {
    b.commit_epoch(Epoch(e), Attempt(a)).expect("commits");
    b.finalize_up_to(Epoch(e)).expect("finalizes");
}

fn value(b: &mut HeapKeyedStateBackend, k: &[u8]) -> Option<Vec<u8>> {
    b.get_value(VALUE, key(k))
        .expect("reads")
        .map(|v| v.into_owned())
}

fn map_entries(b: &mut HeapKeyedStateBackend, k: &[u8]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    b.map_for_each(MAP, key(k), &mut |uk, v| {
        out.insert(uk.to_vec(), v.to_vec());
    })
    .expect("iterates");
    out
}

type Dump = BTreeMap<(u32, u16, Vec<u8>, Vec<u8>), Vec<(Option<Vec<u8>>, Vec<u8>)>>;

/// Every entry of a view, sorted, with map entries as (Some(user key), value).
fn dump(view: &dyn FrozenKeyedState) -> Dump {
    let mut out = Dump::new();
    for kg in view.key_group_range().iter() {
        view.for_each_entry(kg, &mut |e| {
            let (uk, v) = match e.payload {
                EntryPayload::Value(v) | EntryPayload::List(v) => (None, v.to_vec()),
                EntryPayload::MapEntry { user_key, value } => {
                    (Some(user_key.to_vec()), value.to_vec())
                }
            };
            let at = (
                e.state.0,
                e.key_group.0,
                e.key.to_vec(),
                e.namespace.to_vec(),
            );
            out.entry(at).or_default().push((uk, v));
            Ok(())
        })
        .expect("visits");
    }
    for entries in out.values_mut() {
        entries.sort();
    }
    out
}

/// Writes one entry of every kind for each of `keys`.
fn fill(b: &mut HeapKeyedStateBackend, keys: &[&[u8]], tag: &str) {
    for k in keys {
        b.put_value(VALUE, key(k), tag.as_bytes()).expect("puts");
        b.append_list(LIST, key(k), &list(&[tag])).expect("appends");
        b.map_put(MAP, key(k), tag.as_bytes(), tag.as_bytes())
            .expect("map puts");
    }
}

#[test]
fn retry_sees_state_before_first_attempt() {
    let mut b = backend();
    begin(&mut b, 1, 0);
    fill(&mut b, &[b"a", b"b"], "v1");
    commit_final(&mut b, 1, 0);

    begin(&mut b, 2, 0);
    b.put_value(VALUE, key(b"a"), b"v2").expect("puts");
    b.put_value(VALUE, key(b"a"), b"v2b").expect("puts again");
    b.put_value(VALUE, key(b"c"), b"new").expect("puts");
    b.clear(VALUE, key(b"b")).expect("clears");
    b.append_list(LIST, key(b"a"), &list(&["x"]))
        .expect("appends");
    b.replace_list(LIST, key(b"b"), &[]).expect("clears list");
    b.map_put(MAP, key(b"a"), b"v1", b"changed")
        .expect("map puts");
    b.map_put(MAP, key(b"a"), b"other", b"1").expect("map puts");
    b.map_remove(MAP, key(b"b"), b"v1").expect("map removes");
    b.clear(MAP, key(b"a")).expect("clears map");
    b.map_put(MAP, key(b"a"), b"again", b"2").expect("map puts");
    assert_eq!(value(&mut b, b"a"), Some(b"v2b".to_vec()));
    assert_eq!(value(&mut b, b"b"), None);
    assert!(map_entries(&mut b, b"b").is_empty());

    // The attempt fails after committing; Spark retries the epoch.
    b.commit_epoch(Epoch(2), Attempt(0)).expect("commits");
    begin(&mut b, 2, 1);
    assert_eq!(value(&mut b, b"a"), Some(b"v1".to_vec()));
    assert_eq!(value(&mut b, b"b"), Some(b"v1".to_vec()));
    assert_eq!(value(&mut b, b"c"), None);
    for k in [&b"a"[..], b"b"] {
        assert_eq!(
            b.get_list(LIST, key(k)).expect("reads").as_deref(),
            Some(&list(&["v1"])[..])
        );
        assert_eq!(
            map_entries(&mut b, k),
            BTreeMap::from([(b"v1".to_vec(), b"v1".to_vec())])
        );
    }
    commit_final(&mut b, 2, 1);
    let view = b.snapshot_sync().expect("all final");
    assert_eq!(dump(&*view).len(), 6);
}

#[test]
fn discard_drops_several_epochs_newest_first() {
    let mut b = backend();
    begin(&mut b, 1, 0);
    b.put_value(VALUE, key(b"k"), b"1").expect("puts");
    b.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
    begin(&mut b, 2, 0);
    b.put_value(VALUE, key(b"k"), b"2").expect("puts");
    b.map_put(MAP, key(b"k"), b"u", b"2").expect("map puts");
    b.commit_epoch(Epoch(2), Attempt(0)).expect("commits");
    begin(&mut b, 3, 0);
    b.put_value(VALUE, key(b"k"), b"3").expect("puts");
    b.map_put(MAP, key(b"k"), b"u", b"3").expect("map puts");
    b.map_remove(MAP, key(b"k"), b"u").expect("map removes");

    b.discard_from(Epoch(3)).expect("discards");
    assert_eq!(value(&mut b, b"k"), Some(b"2".to_vec()));
    assert_eq!(
        map_entries(&mut b, b"k"),
        BTreeMap::from([(b"u".to_vec(), b"2".to_vec())])
    );
    assert!(matches!(
        b.put_value(VALUE, key(b"k"), b"x"),
        Err(StateError::NoOpenEpoch)
    ));
    b.discard_from(Epoch(2)).expect("discards");
    assert_eq!(value(&mut b, b"k"), Some(b"1".to_vec()));
    assert!(map_entries(&mut b, b"k").is_empty());

    b.finalize_up_to(Epoch(1)).expect("finalizes");
    assert!(matches!(
        b.discard_from(Epoch(1)),
        Err(StateError::EpochAlreadyFinal { .. })
    ));
    assert_eq!(b.last_final_epoch(), Some(Epoch(1)));
    assert_eq!(value(&mut b, b"k"), Some(b"1".to_vec()));
}

#[test]
fn writes_need_an_open_epoch_and_finalize_a_commit() {
    let mut b = backend();
    assert!(matches!(
        b.put_value(VALUE, key(b"k"), b"1"),
        Err(StateError::NoOpenEpoch)
    ));
    assert!(matches!(
        b.append_list(LIST, key(b"k"), &[]),
        Err(StateError::NoOpenEpoch)
    ));
    begin(&mut b, 1, 0);
    b.put_value(VALUE, key(b"k"), b"1").expect("puts");
    assert!(matches!(
        b.finalize_up_to(Epoch(1)),
        Err(StateError::EpochNotCommitted { epoch: Epoch(1) })
    ));
    assert!(matches!(
        b.snapshot_sync().map(|_| ()),
        Err(StateError::EpochsNotFinal { .. })
    ));
    b.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
    assert!(matches!(
        b.map_put(MAP, key(b"k"), b"u", b"v"),
        Err(StateError::NoOpenEpoch)
    ));
    b.finalize_up_to(Epoch(1)).expect("finalizes");
    assert!(matches!(
        b.begin_epoch(Epoch(1), Attempt(1)),
        Err(StateError::EpochAlreadyFinal { .. })
    ));
    assert_eq!(value(&mut b, b"k"), Some(b"1".to_vec()));
}

#[test]
fn snapshot_view_never_sees_later_writes() {
    let mut b = backend();
    let keys: Vec<Vec<u8>> = (0u32..3000).map(|i| i.to_le_bytes().to_vec()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    begin(&mut b, 1, 0);
    fill(&mut b, &refs, "old");
    commit_final(&mut b, 1, 0);
    let view = b.snapshot_sync().expect("all final");
    let before = dump(&*view);
    assert_eq!(before.len(), 3 * 3000);

    begin(&mut b, 2, 0);
    for k in &refs[..1000] {
        b.put_value(VALUE, key(k), b"new").expect("puts");
        b.append_list(LIST, key(k), &list(&["new"]))
            .expect("appends");
        b.map_put(MAP, key(k), b"old", b"new").expect("map puts");
        b.map_put(MAP, key(k), b"extra", b"new").expect("map puts");
    }
    for k in &refs[1000..2000] {
        b.clear(VALUE, key(k)).expect("clears");
        b.replace_list(LIST, key(k), &[]).expect("clears list");
        b.map_remove(MAP, key(k), b"old").expect("map removes");
    }
    for i in 3000u32..9000 {
        let k = i.to_le_bytes();
        b.put_value(VALUE, key(&k), b"fresh").expect("puts");
    }
    commit_final(&mut b, 2, 0);
    assert_eq!(dump(&*view), before);
    assert_eq!(value(&mut b, refs[0]), Some(b"new".to_vec()));
    let later = b.snapshot_sync().expect("all final");
    assert_eq!(dump(&*later).len(), 3 * 3000 - 3 * 1000 + 6000);
}

#[test]
fn snapshot_entries_are_canonical() {
    let mut b = backend();
    begin(&mut b, 1, 0);
    let k = StateKey {
        key_group: KeyGroup(3),
        key: b"k",
        namespace: b"ns",
    };
    b.put_value(SUM, k, b"7").expect("puts");
    b.append_list(LIST, k, &list(&["a"])).expect("appends");
    b.append_list(LIST, k, &list(&["b", "c"])).expect("appends");
    b.map_put(MAP, k, b"x", b"1").expect("map puts");
    b.map_put(MAP, k, b"y", b"2").expect("map puts");
    commit_final(&mut b, 1, 0);
    let view = b.snapshot_sync().expect("all final");
    let mut seen = Vec::new();
    view.for_each_entry(KeyGroup(3), &mut |e| {
        assert_eq!(
            (e.key, e.namespace, e.key_group),
            (&b"k"[..], &b"ns"[..], KeyGroup(3))
        );
        seen.push(format!("{:?}", (e.state, e.payload)));
        Ok(())
    })
    .expect("visits");
    seen.sort();
    let mut expected = vec![
        format!("{:?}", (SUM, EntryPayload::Value(b"7"))),
        format!("{:?}", (LIST, EntryPayload::List(&list(&["a", "b", "c"])))),
        format!(
            "{:?}",
            (
                MAP,
                EntryPayload::MapEntry {
                    user_key: b"x",
                    value: b"1"
                }
            )
        ),
        format!(
            "{:?}",
            (
                MAP,
                EntryPayload::MapEntry {
                    user_key: b"y",
                    value: b"2"
                }
            )
        ),
    ];
    expected.sort();
    assert_eq!(seen, expected);
    assert!(matches!(
        view.for_each_entry(KeyGroup(7), &mut |_| Ok(())),
        Err(StateError::KeyGroupOutOfRange { .. })
    ));
    // A visitor error stops the walk and comes back.
    let err = view
        .for_each_entry(KeyGroup(3), &mut |_| {
            Err(StateError::Corrupt { what: "test" })
        })
        .expect_err("visitor fails");
    assert!(matches!(err, StateError::Corrupt { what: "test" }));
}

#[test]
fn kind_range_and_registration_errors() {
    let mut b = backend();
    begin(&mut b, 1, 0);
    let err = b.get_list(VALUE, key(b"k")).expect_err("value state");
    assert!(matches!(
        err,
        StateError::WrongKind {
            expected: "list",
            actual: StateKind::Value,
            ..
        }
    ));
    assert!(matches!(
        b.put_value(LIST, key(b"k"), b"1"),
        Err(StateError::WrongKind { .. })
    ));
    assert!(matches!(
        b.map_put(VALUE, key(b"k"), b"u", b"1"),
        Err(StateError::WrongKind { .. })
    ));
    assert!(b.put_value(SUM, key(b"k"), b"1").is_ok());
    assert!(matches!(
        b.get_value(StateId(9), key(b"k")),
        Err(StateError::UnknownState(StateId(9)))
    ));
    let outside = StateKey::new(KeyGroup(6), b"k");
    assert!(matches!(
        b.put_value(VALUE, outside, b"1"),
        Err(StateError::KeyGroupOutOfRange {
            key_group: KeyGroup(6),
            ..
        })
    ));
    assert!(b.clear(MAP, StateKey::new(KeyGroup(1), b"k")).is_err());

    let same = StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid");
    assert_eq!(b.register_state(&same).expect("identical"), VALUE);
    let other = StateDescriptor::new("count", StateKind::List, ValueType::Int64).expect("valid");
    let err = b.register_state(&other).expect_err("duplicate name");
    assert!(matches!(&err, StateError::DuplicateState { name, .. } if name == "count"));
    assert_eq!(b.descriptors().len(), 4);

    let max = MaxParallelism::new(4).expect("valid");
    let range = KeyGroupRange::new(0, 8).expect("valid");
    assert!(HeapKeyedStateBackend::new(max, range).is_err());
}

#[test]
fn prefetching_changes_nothing_and_ignores_what_an_access_would_refuse() {
    let mut b = backend();
    begin(&mut b, 1, 0);
    b.put_value(VALUE, key(b"k"), b"1").expect("writes");
    for hinted in [key(b"k"), key(b"absent"), StateKey::new(KeyGroup(6), b"k")] {
        b.prefetch_value(VALUE, hinted);
    }
    b.prefetch_value(MAP, key(b"k"));
    b.prefetch_value(StateId(9), key(b"k"));
    assert_eq!(value(&mut b, b"k"), Some(b"1".to_vec()));
    assert_eq!(value(&mut b, b"absent"), None);
    commit_final(&mut b, 1, 0);
    assert_eq!(dump(&*b.snapshot_sync().expect("all final")).len(), 1);
}

/// The batch read's entry hints of `keys`, in order, with their values.
fn read_at(
    b: &HeapKeyedStateBackend,
    keys: &[Vec<u8>],
) -> Vec<(Option<Vec<u8>>, Option<EntryHint>)> {
    let mut read = Vec::new();
    b.get_values_at(VALUE, keys.iter().map(|k| key(k)), |value, at| {
        read.push((value.map(<[u8]>::to_vec), at));
        Ok::<_, StateError>(())
    })
    .expect("reads");
    read
}

#[test]
fn writes_at_a_read_entry_hint_land_on_the_key_even_once_entries_moved() {
    let mut b = backend();
    let keys: Vec<Vec<u8>> = (0..200_u32).map(|i| i.to_le_bytes().to_vec()).collect();
    begin(&mut b, 1, 0);
    for k in &keys[..100] {
        b.put_value(VALUE, key(k), b"base").expect("writes");
    }
    commit_final(&mut b, 1, 0);
    let before = b.snapshot_sync().expect("all final");

    let read = read_at(&b, &keys);
    assert!(
        read[..100]
            .iter()
            .all(|(v, at)| v.as_deref() == Some(&b"base"[..]) && at.is_some())
    );
    assert!(
        read[100..]
            .iter()
            .all(|(v, at)| v.is_none() && at.is_none())
    );
    begin(&mut b, 2, 0);
    // Writes through a hint that is not the key's own, or that inserts
    // and removals since made stale, go to the key all the same.
    let hints: Vec<Option<EntryHint>> = read.iter().map(|(_, at)| *at).collect();
    b.put_value_at(VALUE, key(&keys[0]), hints[1], b"zero")
        .expect("writes");
    for i in 0..5000_u32 {
        b.put_value(VALUE, key(&(1000 + i).to_le_bytes()), b"more")
            .expect("writes");
    }
    b.clear(VALUE, key(&keys[2])).expect("clears");
    for (i, k) in keys.iter().enumerate().skip(1) {
        b.put_value_at(VALUE, key(k), hints[i], b"new")
            .expect("writes");
    }
    let now = read_at(&b, &keys);
    assert_eq!(now[0].0.as_deref(), Some(&b"zero"[..]));
    assert!(
        now[1..]
            .iter()
            .all(|(v, _)| v.as_deref() == Some(&b"new"[..]))
    );
    assert_eq!(
        value(&mut b, &1000_u32.to_le_bytes()),
        Some(b"more".to_vec())
    );

    // The snapshot kept what it saw, and discarding the epoch undoes the
    // writes made through hints like any others.
    let base = dump(&*before);
    assert_eq!(base.len(), 100);
    b.discard_from(Epoch(2)).expect("discards");
    assert_eq!(dump(&*b.snapshot_sync().expect("all final")), base);
}

#[test]
fn batch_reads_refuse_what_single_reads_refuse() {
    let mut b = backend();
    let read = |b: &HeapKeyedStateBackend, state: StateId, k: StateKey<'_>| {
        b.get_values_at(state, [k], |_, _| Ok::<_, StateError>(()))
    };
    assert!(matches!(
        read(&b, MAP, key(b"k")),
        Err(StateError::WrongKind { .. })
    ));
    assert!(matches!(
        read(&b, VALUE, StateKey::new(KeyGroup(6), b"k")),
        Err(StateError::KeyGroupOutOfRange { .. })
    ));
    begin(&mut b, 1, 0);
    b.put_value(VALUE, key(b"k"), b"1").expect("writes");
    let at = read_at(&b, &[b"k".to_vec()])[0].1;
    assert!(
        b.put_value_at(LIST, key(b"k"), at, b"2").is_err(),
        "a list state"
    );
    b.prefetch_at(MAP, key(b"k").key_group, at.expect("found"));
    assert_eq!(value(&mut b, b"k"), Some(b"1".to_vec()));
}

#[test]
fn ingest_restores_a_snapshot() {
    let mut source = backend();
    begin(&mut source, 1, 0);
    fill(&mut source, &[b"a", b"b", b"c", b"d"], "v");
    source
        .map_put(MAP, key(b"a"), b"w", b"2")
        .expect("map puts");
    commit_final(&mut source, 1, 0);
    let view = source.snapshot_sync().expect("all final");

    let mut restored = backend();
    for kg in view.key_group_range().iter() {
        view.for_each_entry(kg, &mut |e| restored.ingest(e))
            .expect("ingests");
    }
    let copy = restored.snapshot_sync().expect("all final");
    assert_eq!(dump(&*copy), dump(&*view));

    // Restored entries are base state: a retried epoch brings them back.
    begin(&mut restored, 5, 0);
    restored.put_value(VALUE, key(b"a"), b"x").expect("puts");
    restored
        .map_remove(MAP, key(b"a"), b"w")
        .expect("map removes");
    begin(&mut restored, 5, 1);
    assert_eq!(value(&mut restored, b"a"), Some(b"v".to_vec()));
    assert_eq!(map_entries(&mut restored, b"a").len(), 2);
    assert!(matches!(
        restored.ingest(weir_state::StateEntry {
            state: VALUE,
            key_group: KeyGroup(2),
            key: b"z",
            namespace: b"",
            payload: EntryPayload::Value(b"1"),
        }),
        Err(StateError::EpochsNotFinal { .. })
    ));
    restored.discard_from(Epoch(5)).expect("discards");
    assert!(matches!(
        restored.ingest(weir_state::StateEntry {
            state: LIST,
            key_group: KeyGroup(2),
            key: b"z",
            namespace: b"",
            payload: EntryPayload::Value(b"1"),
        }),
        Err(StateError::WrongKind { .. })
    ));
}

/// 12,000 keys: enough that each key group needs several buckets.
fn many_keys() -> Vec<Vec<u8>> {
    (0u32..12_000).map(|i| i.to_le_bytes().to_vec()).collect()
}

/// A snapshot of one entry of every kind for each of `keys`, and a reducing
/// value for the first 100.
fn many_keys_view(keys: &[&[u8]]) -> Box<dyn FrozenKeyedState> {
    let mut source = backend();
    begin(&mut source, 1, 0);
    fill(&mut source, keys, "v");
    for k in &keys[..100] {
        source.put_value(SUM, key(k), b"7").expect("puts");
    }
    commit_final(&mut source, 1, 0);
    source.snapshot_sync().expect("all final")
}

#[test]
fn a_bulk_load_restores_every_entry_and_a_later_entry_of_a_key_wins() {
    let keys = many_keys();
    let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let view = many_keys_view(&refs);

    let mut restored = backend();
    restored.begin_bulk_load().expect("begins");
    for kg in view.key_group_range().iter() {
        view.for_each_entry(kg, &mut |e| restored.ingest(e))
            .expect("ingests");
    }
    // A key group seen before, and a key already loaded: the later value
    // replaces the earlier one, as entry-by-entry ingestion does.
    restored
        .ingest(weir_state::StateEntry {
            state: VALUE,
            key_group: key(refs[0]).key_group,
            key: refs[0],
            namespace: b"",
            payload: EntryPayload::Value(b"later"),
        })
        .expect("ingests");
    restored.finish_bulk_load().expect("finishes");

    let mut expected = dump(&*view);
    let first = (
        VALUE.0,
        key(refs[0]).key_group.0,
        refs[0].to_vec(),
        Vec::new(),
    );
    expected.insert(first, vec![(None, b"later".to_vec())]);
    assert_eq!(
        dump(&*restored.snapshot_sync().expect("all final")),
        expected
    );
    assert_eq!(value(&mut restored, refs[1]), Some(b"v".to_vec()));
}

#[test]
fn key_groups_loaded_on_threads_restore_what_ingest_does() {
    let keys = many_keys();
    let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let view = many_keys_view(&refs);
    let key_groups: Vec<KeyGroup> = view.key_group_range().iter().collect();

    // Key group 2 already holds entries: loaded ones join them, and a
    // loaded entry of a key replaces the one there.
    let mut restored = backend();
    begin(&mut restored, 1, 0);
    restored
        .put_value(VALUE, key(b"\x00old"), b"kept")
        .expect("puts");
    restored
        .put_value(VALUE, key(refs[0]), b"replaced")
        .expect("puts");
    commit_final(&mut restored, 1, 0);
    let loaded = load_key_groups::<StateError>(&mut restored, &key_groups, 3, &|i, load| {
        view.for_each_entry(key_groups[i], &mut |e| load.ingest(e))
    })
    .expect("loads");
    assert!(loaded, "the heap hands out key groups");

    let mut expected = dump(&*view);
    expected.insert(
        (VALUE.0, 2, b"\x00old".to_vec(), Vec::new()),
        vec![(None, b"kept".to_vec())],
    );
    assert_eq!(
        dump(&*restored.snapshot_sync().expect("all final")),
        expected
    );
    assert_eq!(value(&mut restored, refs[1]), Some(b"v".to_vec()));
    assert_eq!(map_entries(&mut restored, refs[2]).len(), 1);

    // One core, or a backend that loads entry by entry: nothing is done.
    let mut untouched = backend();
    let fill_none = |_: usize, _: &mut dyn KeyGroupLoad| -> Result<(), StateError> {
        unreachable!("nothing is loaded on one thread")
    };
    assert!(!load_key_groups(&mut untouched, &key_groups, 1, &fill_none).expect("no-op"));
}

#[test]
fn a_failed_key_group_load_puts_every_key_group_back() {
    let mut b = backend();
    begin(&mut b, 1, 0);
    fill(&mut b, &[b"\x00a", b"\x01b", b"\x02c", b"\x03d"], "v");
    commit_final(&mut b, 1, 0);
    let before = dump(&*b.snapshot_sync().expect("all final"));
    let key_groups: Vec<KeyGroup> = b.key_group_range().iter().collect();

    let failed = load_key_groups::<StateError>(&mut b, &key_groups, 2, &|i, load| {
        // An entry of another key group, and one of a list state as a value.
        let other = KeyGroup(key_groups[(i + 1) % key_groups.len()].0);
        let wrong = load.ingest(weir_state::StateEntry {
            state: VALUE,
            key_group: other,
            key: b"x",
            namespace: b"",
            payload: EntryPayload::Value(b"1"),
        });
        assert!(matches!(wrong, Err(StateError::KeyGroupOutOfRange { .. })));
        load.ingest(weir_state::StateEntry {
            state: LIST,
            key_group: key_groups[i],
            key: b"x",
            namespace: b"",
            payload: EntryPayload::Value(b"1"),
        })
    });
    assert!(matches!(failed, Err(StateError::WrongKind { .. })));
    assert_eq!(dump(&*b.snapshot_sync().expect("all final")), before);

    // A key group goes back only to the backend it came from.
    let load = b
        .detach_key_group(KeyGroup(2))
        .expect("detaches")
        .expect("the heap hands out key groups");
    let mut other = HeapKeyedStateBackend::new(
        MaxParallelism::new(8).expect("valid max"),
        KeyGroupRange::new(2, 6).expect("valid range"),
    )
    .expect("range fits");
    assert!(matches!(
        other.attach_key_group(load),
        Err(StateError::ForeignKeyGroup)
    ));
    assert!(matches!(
        b.detach_key_group(KeyGroup(7)),
        Err(StateError::KeyGroupOutOfRange { .. })
    ));
}

mod cow {
    //! Random writes, retries and discards after `snapshot_sync` never show
    //! through the view, and the live state matches a plain model.

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Step {
        Put(u16, u8),
        Clear(u16),
        Append(u16, u8),
        MapPut(u16, u8, u8),
        MapRemove(u16, u8),
        /// Commit and begin the next epoch.
        Next,
        /// Begin the open epoch again.
        Retry,
    }

    /// Keys spread over 3000 values in two key groups, so groups split into
    /// several buckets.
    fn step() -> impl Strategy<Value = Step> {
        let k = 0u16..3000;
        prop_oneof![
            4 => (k.clone(), any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
            1 => k.clone().prop_map(Step::Clear),
            2 => (k.clone(), any::<u8>()).prop_map(|(k, v)| Step::Append(k, v)),
            2 => (k.clone(), 0u8..3, any::<u8>()).prop_map(|(k, u, v)| Step::MapPut(k, u, v)),
            1 => (k, 0u8..3).prop_map(|(k, u)| Step::MapRemove(k, u)),
            1 => Just(Step::Next),
            1 => Just(Step::Retry),
        ]
    }

    fn at(k: u16) -> ([u8; 2], KeyGroup) {
        (k.to_le_bytes(), KeyGroup(2 + k % 2))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

        #[test]
        fn views_are_frozen_and_epochs_exact(steps in proptest::collection::vec(step(), 1..400)) {
            let mut b = backend();
            begin(&mut b, 1, 0);
            for k in 0u16..3000 {
                let (key, kg) = at(k);
                let sk = StateKey::new(kg, &key);
                b.put_value(VALUE, sk, &[1]).expect("puts");
                b.append_list(LIST, sk, &list(&["x"])).expect("appends");
                b.map_put(MAP, sk, &[0], &[1]).expect("map puts");
            }
            commit_final(&mut b, 1, 0);
            let view = b.snapshot_sync().expect("all final");
            let frozen = dump(&*view);

            // The model: values only, per epoch a copy taken at begin.
            let mut values: BTreeMap<u16, u8> = (0..3000).map(|k| (k, 1)).collect();
            let mut before = values.clone();
            let (mut epoch, mut attempt) = (2u64, 0u32);
            begin(&mut b, epoch, attempt);
            for (i, s) in steps.iter().enumerate() {
                match *s {
                    Step::Put(k, v) => {
                        let (key, kg) = at(k);
                        b.put_value(VALUE, StateKey::new(kg, &key), &[v]).expect("puts");
                        values.insert(k, v);
                    }
                    Step::Clear(k) => {
                        let (key, kg) = at(k);
                        b.clear(VALUE, StateKey::new(kg, &key)).expect("clears");
                        b.clear(LIST, StateKey::new(kg, &key)).expect("clears");
                        b.clear(MAP, StateKey::new(kg, &key)).expect("clears");
                        values.remove(&k);
                    }
                    Step::Append(k, v) => {
                        let (key, kg) = at(k);
                        let mut p = Vec::new();
                        push_list_item(&[v], &mut p);
                        b.append_list(LIST, StateKey::new(kg, &key), &p).expect("appends");
                    }
                    Step::MapPut(k, u, v) => {
                        let (key, kg) = at(k);
                        b.map_put(MAP, StateKey::new(kg, &key), &[u], &[v]).expect("map puts");
                    }
                    Step::MapRemove(k, u) => {
                        let (key, kg) = at(k);
                        b.map_remove(MAP, StateKey::new(kg, &key), &[u]).expect("map removes");
                    }
                    Step::Next => {
                        commit_final(&mut b, epoch, attempt);
                        epoch += 1;
                        attempt = 0;
                        before = values.clone();
                        begin(&mut b, epoch, attempt);
                    }
                    Step::Retry => {
                        attempt += 1;
                        begin(&mut b, epoch, attempt);
                        values = before.clone();
                    }
                }
                // A leak through the view would persist, so sampling finds it.
                if i % 64 == 0 {
                    prop_assert_eq!(&dump(&*view), &frozen);
                }
            }
            prop_assert_eq!(&dump(&*view), &frozen);
            for k in (0u16..3000).step_by(7) {
                let (key, kg) = at(k);
                let got = b.get_value(VALUE, StateKey::new(kg, &key)).expect("reads");
                prop_assert_eq!(got.as_deref(), values.get(&k).map(std::slice::from_ref));
            }
            // A full retry of the last epoch brings back what it began with.
            attempt += 1;
            begin(&mut b, epoch, attempt);
            commit_final(&mut b, epoch, attempt);
            let now = b.snapshot_sync().expect("all final");
            let live: BTreeMap<u16, u8> = dump(&*now)
                .into_iter()
                .filter(|((state, ..), _)| *state == VALUE.0)
                .map(|((_, _, key, _), v)| {
                    (u16::from_le_bytes([key[0], key[1]]), v[0].1[0])
                })
                .collect();
            prop_assert_eq!(live, before);
        }
    }
}

/// Each epoch's undo log reuses the emptied allocation of an earlier one; a
/// reused log undoes only the writes of its own epoch.
#[test]
fn reused_undo_logs_undo_only_their_own_epoch() {
    let mut b = backend();
    begin(&mut b, 1, 0);
    for i in 0..200u8 {
        b.put_value(VALUE, key(&[i]), &[i]).expect("writes");
    }
    commit_final(&mut b, 1, 0);
    for epoch in 2..6u8 {
        begin(&mut b, u64::from(epoch), 0);
        for i in 0..100u8 {
            b.put_value(VALUE, key(&[i]), &[epoch]).expect("writes");
        }
        if epoch % 2 == 0 {
            b.discard_from(Epoch(u64::from(epoch))).expect("discards");
        } else {
            commit_final(&mut b, u64::from(epoch), 0);
        }
    }
    for i in 0..200u8 {
        let expected = if i < 100 { 5 } else { i };
        assert_eq!(value(&mut b, &[i]), Some(vec![expected]), "key {i}");
    }
}
