//! Every access kind, read back within the epoch and after finalizing.

use std::collections::BTreeMap;

use weir_state::{KeyedStateBackend, StateError, StateKey, list_items};
use weir_state_rocksdb::RocksDbKeyedStateBackend;
use weir_types::{Attempt, Epoch, KeyGroup, KeyGroupRange, StateDescriptor, StateKind, ValueType};

use crate::fixture::{Key, final_epoch, list, open, options, register_all, value};

fn map_entries(
    backend: &mut dyn KeyedStateBackend,
    state: weir_state::StateId,
    key: &Key,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut entries = BTreeMap::new();
    backend
        .map_for_each(state, key.state_key(), &mut |k, v| {
            entries.insert(k.to_vec(), v.to_vec());
        })
        .expect("scan");
    entries
}

fn items(payload: Option<std::borrow::Cow<'_, [u8]>>) -> Vec<Vec<u8>> {
    payload
        .map(|p| {
            list_items(&p)
                .map(|i| i.expect("well formed").to_vec())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn value_state_put_get_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let k = Key::new(1);
    final_epoch(&mut b, 1, |b| {
        b.put_value(s.value, k.state_key(), b"one").expect("put");
        b.put_value(s.reducing, k.state_key(), b"sum").expect("put");
        assert_eq!(value(b, s.value, &k).as_deref(), Some(&b"one"[..]));
    });
    assert_eq!(value(&mut b, s.value, &k).as_deref(), Some(&b"one"[..]));
    assert_eq!(value(&mut b, s.reducing, &k).as_deref(), Some(&b"sum"[..]));
    final_epoch(&mut b, 2, |b| {
        b.clear(s.value, k.state_key()).expect("clear")
    });
    assert_eq!(value(&mut b, s.value, &k), None);
    assert_eq!(value(&mut b, s.reducing, &k).as_deref(), Some(&b"sum"[..]));
}

#[test]
fn namespaces_are_separate_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let k = Key::new(2);
    let in_ns = |ns: &'static [u8]| StateKey {
        namespace: ns,
        ..k.state_key()
    };
    final_epoch(&mut b, 1, |b| {
        b.put_value(s.value, in_ns(b"w1"), b"a").expect("put");
        b.put_value(s.value, in_ns(b"w2"), b"b").expect("put");
    });
    assert_eq!(
        b.get_value(s.value, in_ns(b"w1")).expect("get").as_deref(),
        Some(&b"a"[..])
    );
    assert_eq!(
        b.get_value(s.value, in_ns(b"w2")).expect("get").as_deref(),
        Some(&b"b"[..])
    );
    assert_eq!(value(&mut b, s.value, &k), None);
}

#[test]
fn list_append_spans_epochs_and_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let k = Key::new(3);
    final_epoch(&mut b, 1, |b| {
        b.append_list(s.list, k.state_key(), &list(&[b"a"]))
            .expect("append");
        b.append_list(s.list, k.state_key(), &list(&[b"b", b"c"]))
            .expect("append");
    });
    b.begin_epoch(Epoch(2), Attempt(0)).expect("begin");
    b.append_list(s.list, k.state_key(), &list(&[b"d"]))
        .expect("append");
    b.commit_epoch(Epoch(2), Attempt(0)).expect("commit");
    b.begin_epoch(Epoch(3), Attempt(0)).expect("begin");
    b.append_list(s.list, k.state_key(), &list(&[b"e"]))
        .expect("append");
    // Base (merged a, b, c) + epoch 2 + epoch 3, in order.
    let expected: Vec<Vec<u8>> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    assert_eq!(
        items(b.get_list(s.list, k.state_key()).expect("get")),
        expected
    );
    b.commit_epoch(Epoch(3), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(3)).expect("finalize");
    assert_eq!(
        items(b.get_list(s.list, k.state_key()).expect("get")),
        expected
    );
}

#[test]
fn list_replace_and_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let k = Key::new(4);
    final_epoch(&mut b, 1, |b| {
        b.append_list(s.list, k.state_key(), &list(&[b"x"]))
            .expect("append")
    });
    final_epoch(&mut b, 2, |b| {
        b.replace_list(s.list, k.state_key(), &list(&[b"y"]))
            .expect("replace");
        b.append_list(s.list, k.state_key(), &list(&[b"z"]))
            .expect("append");
    });
    assert_eq!(
        items(b.get_list(s.list, k.state_key()).expect("get")),
        vec![b"y".to_vec(), b"z".to_vec()]
    );
    final_epoch(&mut b, 3, |b| {
        b.replace_list(s.list, k.state_key(), &[]).expect("replace")
    });
    assert!(b.get_list(s.list, k.state_key()).expect("get").is_none());
    final_epoch(&mut b, 4, |b| {
        b.append_list(s.list, k.state_key(), &list(&[b"q"]))
            .expect("append");
        b.clear(s.list, k.state_key()).expect("clear");
    });
    assert!(b.get_list(s.list, k.state_key()).expect("get").is_none());
}

#[test]
fn corrupt_list_payload_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    b.begin_epoch(Epoch(1), Attempt(0)).expect("begin");
    let err = b
        .append_list(s.list, Key::new(5).state_key(), &[9, 1])
        .expect_err("corrupt");
    assert!(matches!(err, StateError::Corrupt { .. }));
}

#[test]
fn map_put_get_remove_iterate_and_clear_across_layers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let k = Key::new(6);
    let other = Key::new(7);
    final_epoch(&mut b, 1, |b| {
        for (uk, v) in [(&b"a"[..], &b"1"[..]), (b"b", b"2"), (b"c", b"3")] {
            b.map_put(s.map, k.state_key(), uk, v).expect("put");
        }
        b.map_put(s.map, other.state_key(), b"a", b"other")
            .expect("put");
    });
    b.begin_epoch(Epoch(2), Attempt(0)).expect("begin");
    b.map_remove(s.map, k.state_key(), b"b").expect("remove");
    b.map_put(s.map, k.state_key(), b"c", b"30").expect("put");
    b.map_put(s.map, k.state_key(), b"d", b"4").expect("put");
    let expected: BTreeMap<Vec<u8>, Vec<u8>> = [
        (b"a", b"1".to_vec()),
        (b"c", b"30".to_vec()),
        (b"d", b"4".to_vec()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_vec(), v))
    .collect();
    assert_eq!(map_entries(&mut b, s.map, &k), expected);
    assert_eq!(b.map_get(s.map, k.state_key(), b"b").expect("get"), None);
    assert_eq!(
        b.map_get(s.map, k.state_key(), b"a")
            .expect("get")
            .as_deref(),
        Some(&b"1"[..])
    );
    b.commit_epoch(Epoch(2), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(2)).expect("finalize");
    assert_eq!(map_entries(&mut b, s.map, &k), expected);

    // A clear hides the database and older epochs; later puts still show.
    b.begin_epoch(Epoch(3), Attempt(0)).expect("begin");
    b.clear(s.map, k.state_key()).expect("clear");
    b.map_put(s.map, k.state_key(), b"z", b"26").expect("put");
    b.commit_epoch(Epoch(3), Attempt(0)).expect("commit");
    b.begin_epoch(Epoch(4), Attempt(0)).expect("begin");
    let only_z: BTreeMap<Vec<u8>, Vec<u8>> =
        [(b"z".to_vec(), b"26".to_vec())].into_iter().collect();
    assert_eq!(map_entries(&mut b, s.map, &k), only_z);
    assert_eq!(b.map_get(s.map, k.state_key(), b"a").expect("get"), None);
    b.commit_epoch(Epoch(4), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(4)).expect("finalize");
    assert_eq!(map_entries(&mut b, s.map, &k), only_z);
    assert_eq!(
        b.map_get(s.map, other.state_key(), b"a")
            .expect("get")
            .as_deref(),
        Some(&b"other"[..])
    );
}

#[test]
fn wrong_kind_unknown_state_and_foreign_key_group_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let range = KeyGroupRange::new(0, 8).expect("valid");
    let mut b = RocksDbKeyedStateBackend::open(options(dir.path(), range)).expect("open");
    let s = register_all(&mut b);
    b.begin_epoch(Epoch(1), Attempt(0)).expect("begin");
    let inside = StateKey::new(KeyGroup(3), b"k");
    assert!(matches!(
        b.get_list(s.value, inside),
        Err(StateError::WrongKind {
            expected: "list",
            actual: StateKind::Value,
            ..
        })
    ));
    assert!(matches!(
        b.map_put(s.list, inside, b"u", b"v"),
        Err(StateError::WrongKind { .. })
    ));
    assert!(matches!(
        b.get_value(weir_state::StateId(99), inside),
        Err(StateError::UnknownState(_))
    ));
    assert!(matches!(
        b.put_value(s.value, StateKey::new(KeyGroup(8), b"k"), b"v"),
        Err(StateError::KeyGroupOutOfRange { .. })
    ));
}

#[test]
fn writes_need_an_open_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    assert!(matches!(
        b.put_value(s.value, Key::new(1).state_key(), b"v"),
        Err(StateError::NoOpenEpoch)
    ));
}

#[test]
fn registering_again_returns_the_id_and_a_changed_descriptor_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let same = StateDescriptor::new("value", StateKind::Value, ValueType::Int64).expect("valid");
    assert_eq!(b.register_state(&same).expect("same"), s.value);
    let changed = StateDescriptor::new("value", StateKind::Value, ValueType::Utf8).expect("valid");
    assert!(matches!(
        b.register_state(&changed),
        Err(StateError::DuplicateState { .. })
    ));
}

#[test]
fn reopen_keeps_states_data_and_last_final_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let k = Key::new(8);
    {
        let mut b = open(dir.path());
        let s = register_all(&mut b);
        final_epoch(&mut b, 5, |b| {
            b.put_value(s.value, k.state_key(), b"kept").expect("put");
            b.append_list(s.list, k.state_key(), &list(&[b"l"]))
                .expect("append");
        });
        // An open, uncommitted epoch is not part of the base and is lost.
        b.begin_epoch(Epoch(6), Attempt(0)).expect("begin");
        b.put_value(s.value, k.state_key(), b"lost").expect("put");
    }
    let mut b = open(dir.path());
    assert_eq!(b.descriptors().len(), 4);
    assert_eq!(b.last_final_epoch(), Some(Epoch(5)));
    let s = register_all(&mut b);
    assert_eq!(value(&mut b, s.value, &k).as_deref(), Some(&b"kept"[..]));
    assert_eq!(
        items(b.get_list(s.list, k.state_key()).expect("get")),
        vec![b"l".to_vec()]
    );
    assert!(matches!(
        b.begin_epoch(Epoch(5), Attempt(1)),
        Err(StateError::EpochAlreadyFinal { .. })
    ));
}

#[test]
fn reopen_with_another_range_or_max_parallelism_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(open(dir.path()));
    let narrower = KeyGroupRange::new(0, 4).expect("valid");
    assert!(matches!(
        RocksDbKeyedStateBackend::open(options(dir.path(), narrower)),
        Err(weir_state_rocksdb::RocksDbError::KeyGroupRangeMismatch { .. })
    ));
    let other_max = weir_types::MaxParallelism::new(32).expect("valid");
    let opts =
        weir_state_rocksdb::RocksDbOptions::new(dir.path(), other_max, other_max.full_range());
    assert!(matches!(
        RocksDbKeyedStateBackend::open(opts),
        Err(weir_state_rocksdb::RocksDbError::MaxParallelismMismatch { .. })
    ));
}
