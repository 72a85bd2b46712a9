//! Operator state files round-trip and are checked against their handle.

use object_store::memory::InMemory;
use object_store::path::Path;
use weir_snapshot::{SnapshotError, read_operator_state, write_operator_state};
use weir_state::{OperatorListSnapshot, OperatorStateSnapshot, RedistributionMode};

fn snapshot() -> OperatorStateSnapshot {
    OperatorStateSnapshot {
        states: vec![
            OperatorListSnapshot {
                name: "offsets".to_owned(),
                mode: RedistributionMode::Split,
                items: vec![b"p0:17".to_vec(), b"p1:4".to_vec()],
            },
            OperatorListSnapshot {
                name: "rules".to_owned(),
                mode: RedistributionMode::Broadcast,
                items: vec![b"x>3".to_vec()],
            },
        ],
    }
}

#[tokio::test]
async fn operator_state_round_trips() {
    let store = InMemory::new();
    let root = Path::from("sp");
    let file = write_operator_state(&snapshot(), &store, &root, "chk-1/src/op-0")
        .await
        .expect("written");
    assert_eq!(file.path, "chk-1/src/op-0");
    let back = read_operator_state(&file, &store, &root)
        .await
        .expect("read");
    assert_eq!(back, snapshot());

    let mut wrong = file.clone();
    wrong.size += 1;
    let err = read_operator_state(&wrong, &store, &root)
        .await
        .expect_err("size differs");
    assert!(
        matches!(err, SnapshotError::FileMismatch { what: "size", .. }),
        "{err}"
    );
}
