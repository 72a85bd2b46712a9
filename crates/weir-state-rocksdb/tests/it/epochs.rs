//! Epoch versions: retries see the state from before the first attempt,
//! discarded epochs leave no trace, and only final epochs reach the database.

use weir_state::{KeyedStateBackend, StateError};
use weir_types::{Attempt, Epoch};

use crate::fixture::{Key, final_epoch, list, open, register_all, value};

#[test]
fn retry_of_an_epoch_sees_the_state_before_its_first_attempt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let k = Key::new(1);
    final_epoch(&mut b, 1, |b| {
        b.put_value(s.value, k.state_key(), b"base").expect("put")
    });

    b.begin_epoch(Epoch(2), Attempt(0)).expect("begin");
    b.put_value(s.value, k.state_key(), b"attempt0")
        .expect("put");
    b.append_list(s.list, k.state_key(), &list(&[b"dup"]))
        .expect("append");
    b.map_put(s.map, k.state_key(), b"u", b"v").expect("put");
    // The task failed; Spark runs attempt 1 of the same epoch.
    b.begin_epoch(Epoch(2), Attempt(1)).expect("retry");
    assert_eq!(value(&mut b, s.value, &k).as_deref(), Some(&b"base"[..]));
    assert!(b.get_list(s.list, k.state_key()).expect("get").is_none());
    assert!(
        b.map_get(s.map, k.state_key(), b"u")
            .expect("get")
            .is_none()
    );
    b.put_value(s.value, k.state_key(), b"attempt1")
        .expect("put");
    b.commit_epoch(Epoch(2), Attempt(1)).expect("commit");
    // A committed epoch may still be rerun (lost output): the same rule holds.
    b.begin_epoch(Epoch(2), Attempt(2)).expect("rerun");
    assert_eq!(value(&mut b, s.value, &k).as_deref(), Some(&b"base"[..]));
    b.put_value(s.value, k.state_key(), b"attempt2")
        .expect("put");
    b.commit_epoch(Epoch(2), Attempt(2)).expect("commit");
    b.finalize_up_to(Epoch(2)).expect("finalize");
    assert_eq!(
        value(&mut b, s.value, &k).as_deref(),
        Some(&b"attempt2"[..])
    );
}

#[test]
fn reads_see_every_open_epoch_newest_first_and_discard_drops_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let k = Key::new(2);
    for (e, v) in [(1u64, &b"e1"[..]), (2, b"e2"), (3, b"e3")] {
        b.begin_epoch(Epoch(e), Attempt(0)).expect("begin");
        b.put_value(s.value, k.state_key(), v).expect("put");
        b.commit_epoch(Epoch(e), Attempt(0)).expect("commit");
    }
    assert_eq!(value(&mut b, s.value, &k).as_deref(), Some(&b"e3"[..]));
    b.finalize_up_to(Epoch(1)).expect("finalize");
    b.discard_from(Epoch(2)).expect("discard");
    assert_eq!(value(&mut b, s.value, &k).as_deref(), Some(&b"e1"[..]));
    assert_eq!(b.last_final_epoch(), Some(Epoch(1)));
}

#[test]
fn finalizing_an_uncommitted_epoch_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    let s = register_all(&mut b);
    let k = Key::new(3);
    b.begin_epoch(Epoch(1), Attempt(0)).expect("begin");
    b.put_value(s.value, k.state_key(), b"open").expect("put");
    assert!(matches!(
        b.finalize_up_to(Epoch(1)),
        Err(StateError::EpochNotCommitted { .. })
    ));
    assert_eq!(b.last_final_epoch(), None);
    assert_eq!(value(&mut b, s.value, &k).as_deref(), Some(&b"open"[..]));
    b.commit_epoch(Epoch(1), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(1)).expect("finalize");
    b.finalize_up_to(Epoch(1)).expect("idempotent");
    assert_eq!(value(&mut b, s.value, &k).as_deref(), Some(&b"open"[..]));
}

#[test]
fn an_epoch_that_is_final_cannot_be_begun_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = open(dir.path());
    register_all(&mut b);
    final_epoch(&mut b, 4, |_| {});
    assert!(matches!(
        b.begin_epoch(Epoch(4), Attempt(1)),
        Err(StateError::EpochAlreadyFinal { .. })
    ));
}
