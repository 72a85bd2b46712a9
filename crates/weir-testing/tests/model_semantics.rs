//! The reference model itself follows the backend contract's epoch rules.

use weir_state::{KeyedStateBackend, StateError, StateKey};
use weir_testing::{ModelBackend, descriptors};
use weir_types::{Attempt, Epoch, KeyGroup, MaxParallelism};

fn model() -> ModelBackend {
    let max = MaxParallelism::new(4).expect("valid");
    let mut m = ModelBackend::new(max, max.full_range());
    for d in descriptors() {
        m.register_state(&d).expect("registers");
    }
    m
}

#[test]
fn retry_sees_state_before_first_attempt() {
    let mut m = model();
    let s = weir_state::StateId(0);
    let k = StateKey::new(KeyGroup(1), b"k");
    m.begin_epoch(Epoch(1), Attempt(0)).expect("begins");
    m.put_value(s, k, b"one").expect("writes");
    m.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
    m.begin_epoch(Epoch(2), Attempt(0)).expect("begins");
    m.put_value(s, k, b"two").expect("writes");
    m.begin_epoch(Epoch(2), Attempt(1)).expect("retries");
    assert_eq!(
        m.get_value(s, k).expect("reads").as_deref(),
        Some(&b"one"[..])
    );
    m.commit_epoch(Epoch(2), Attempt(1)).expect("commits");
    m.finalize_up_to(Epoch(2)).expect("finalizes");
    assert!(matches!(
        m.begin_epoch(Epoch(2), Attempt(2)),
        Err(StateError::EpochAlreadyFinal { .. })
    ));
}

#[test]
fn snapshot_needs_final_epochs_and_writes_need_an_open_one() {
    let mut m = model();
    let s = weir_state::StateId(0);
    let k = StateKey::new(KeyGroup(0), b"k");
    assert!(matches!(
        m.put_value(s, k, b"x"),
        Err(StateError::NoOpenEpoch)
    ));
    m.begin_epoch(Epoch(1), Attempt(0)).expect("begins");
    assert!(matches!(
        m.snapshot_sync(),
        Err(StateError::EpochsNotFinal { .. })
    ));
    m.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
    assert!(matches!(
        m.put_value(s, k, b"x"),
        Err(StateError::NoOpenEpoch)
    ));
    m.finalize_up_to(Epoch(1)).expect("finalizes");
    assert!(m.snapshot_sync().is_ok());
}
