//! A checkpoint from trigger to `_metadata` in storage, and a declined one
//! failing the job.

use hyper::{Method, StatusCode};
use serde_json::json;
use weir_checkpoint::CheckpointKind;
use weir_checkpoint::coordinator::{AbortReason, CoordinatorEffect, EpochCut};
use weir_types::{CheckpointId, Epoch, OperatorUid};

use crate::client::{TOKEN, next_effect, request, start, start_with};

fn ack(id: u64, subtask: u32) -> String {
    json!({
        "checkpoint_id": id,
        "uid": "avg",
        "subtask": subtask,
        "keyed": {
            "format": "full",
            "key_group_range": {"start": subtask * 64, "end": subtask * 64 + 63},
            "file": {"path": format!("chk-{id}/avg/{subtask}/keyed"), "size": 12, "crc32": 99},
            "entries": 3
        },
        "operator_state": null,
        "metrics": {"sync_millis": 1, "async_millis": 5, "state_size_bytes": 12, "persisted_bytes": 12}
    })
    .to_string()
}

fn cut(epoch: u64) -> EpochCut {
    let mut cut = EpochCut {
        epoch: Epoch(epoch),
        ..EpochCut::default()
    };
    cut.sources.insert(
        OperatorUid::new("src").expect("valid"),
        json!({"offset": epoch * 100}),
    );
    cut
}

#[tokio::test]
async fn a_checkpoint_completes_after_all_acks_and_its_metadata_is_stored() {
    let mut job = start(None).await;
    let addr = job.driver.local_addr();
    let id = next_effect(&mut job.events, |e| match e {
        CoordinatorEffect::Triggered {
            id,
            kind: CheckpointKind::Checkpoint,
        } => Some(*id),
        _ => None,
    })
    .await;
    assert_eq!(id, CheckpointId(1));
    job.driver.epoch_final(cut(4)).await;
    let barrier = next_effect(&mut job.events, |e| match e {
        CoordinatorEffect::InjectBarrier { id, cut, .. } => Some((*id, *cut)),
        _ => None,
    })
    .await;
    assert_eq!(barrier, (id, Epoch(4)));

    let (status, body) = request(addr, Method::POST, "/ack", Some(TOKEN), &ack(1, 0)).await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("accepted"))
    );
    let (_, body) = request(addr, Method::POST, "/ack", Some(TOKEN), &ack(1, 0)).await;
    assert_eq!(body["outcome"], "duplicate");
    assert!(
        job.storage
            .latest_completed()
            .await
            .expect("readable")
            .is_none(),
        "one ack is missing"
    );
    let (_, body) = request(addr, Method::POST, "/ack", Some(TOKEN), &ack(1, 1)).await;
    assert_eq!(body["outcome"], "accepted");

    let completed = next_effect(&mut job.events, |e| match e {
        CoordinatorEffect::NotifyComplete { id, cut, .. } => Some((*id, *cut)),
        _ => None,
    })
    .await;
    assert_eq!(completed, (id, Epoch(4)));
    let meta = job
        .storage
        .latest_completed()
        .await
        .expect("readable")
        .expect("checkpoint 1 is complete");
    assert_eq!((meta.checkpoint_id, meta.cut_epoch), (id, Epoch(4)));
    assert_eq!(
        meta.sources[&OperatorUid::new("src").expect("valid")]["offset"],
        400
    );
    assert_eq!(meta.operators[0].subtasks.len(), 2);
    assert_eq!(meta.stats.map(|s| s.state_size_bytes), Some(24));
    assert_eq!(job.driver.latest_completed().await, Some(id));

    let (status, body) = request(addr, Method::GET, "/checkpoints/1", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "completed");
    assert_eq!(body["cut"], 4);
    assert_eq!(body["subtasks"].as_array().map(Vec::len), Some(2));
    assert_eq!(body["subtasks"][0]["async_millis"], 5);
    let (_, body) = request(addr, Method::GET, "/checkpoints", Some(TOKEN), "").await;
    assert_eq!(body["counts"]["completed"], 1);
    assert_eq!(body["latest_completed"]["id"], 1);

    // An ack for the finished checkpoint is late, not an error.
    let (status, body) = request(addr, Method::POST, "/ack", Some(TOKEN), &ack(1, 1)).await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("discarded"))
    );
    job.driver.shutdown().await;
}

#[tokio::test]
async fn a_decline_aborts_the_checkpoint_and_fails_the_job_without_tolerance() {
    let mut job = start(None).await;
    let addr = job.driver.local_addr();
    let id = next_effect(&mut job.events, |e| match e {
        CoordinatorEffect::Triggered { id, .. } => Some(*id),
        _ => None,
    })
    .await;
    job.driver.epoch_final(cut(1)).await;
    let decline =
        json!({"checkpoint_id": id.0, "uid": "avg", "subtask": 1, "message": "upload failed"});
    let (status, body) = request(
        addr,
        Method::POST,
        "/decline",
        Some(TOKEN),
        &decline.to_string(),
    )
    .await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("accepted"))
    );
    let reason = next_effect(&mut job.events, |e| match e {
        CoordinatorEffect::Aborted { reason, .. } => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert!(
        matches!(reason, AbortReason::Declined { ref message, .. } if message == "upload failed")
    );
    let failures = next_effect(&mut job.events, |e| match e {
        CoordinatorEffect::FailJob {
            consecutive_failures,
            ..
        } => Some(*consecutive_failures),
        _ => None,
    })
    .await;
    assert_eq!(failures, 1);
    assert!(
        job.driver.trigger_savepoint().await.is_err(),
        "a failed job takes no savepoints"
    );
    let (_, body) = request(
        addr,
        Method::GET,
        &format!("/checkpoints/{}", id.0),
        Some(TOKEN),
        "",
    )
    .await;
    assert_eq!(body["status"], "failed");
    assert_eq!(body["failure"]["reason"], "declined");
    job.driver.shutdown().await;
}

fn empty_ack(id: CheckpointId, subtask: u32) -> String {
    json!({
        "checkpoint_id": id.0, "uid": "avg", "subtask": subtask, "keyed": null, "operator_state": null,
        "metrics": {"sync_millis": 0, "async_millis": 0, "state_size_bytes": 0, "persisted_bytes": 0}
    })
    .to_string()
}

#[tokio::test]
async fn a_savepoint_beside_a_checkpoint_lands_in_the_savepoint_directory() {
    let savepoints = tempfile::tempdir().expect("temp dir");
    let mut job = start_with(None, Some(savepoints.path())).await;
    let addr = job.driver.local_addr();
    let checkpoint = next_effect(&mut job.events, |e| match e {
        CoordinatorEffect::Triggered {
            id,
            kind: CheckpointKind::Checkpoint,
        } => Some(*id),
        _ => None,
    })
    .await;
    let savepoint = job.driver.trigger_savepoint().await.expect("running job");
    job.driver.epoch_final(cut(1)).await;
    job.driver.epoch_final(cut(2)).await;
    for subtask in 0..2 {
        let (_, body) = request(
            addr,
            Method::POST,
            "/ack",
            Some(TOKEN),
            &empty_ack(savepoint, subtask),
        )
        .await;
        assert_eq!(body["outcome"], "accepted");
    }
    let done = next_effect(&mut job.events, |e| match e {
        CoordinatorEffect::NotifyComplete { id, kind, cut } => Some((*id, *kind, *cut)),
        _ => None,
    })
    .await;
    assert_eq!(done, (savepoint, CheckpointKind::Savepoint, Epoch(2)));
    let job_id = weir_types::JobId::new("job").expect("valid");
    let dir = savepoints
        .path()
        .join(weir_checkpoint::layout::savepoint_dir(&job_id, savepoint));
    assert!(
        dir.join("_metadata").is_file(),
        "savepoint metadata in {}",
        dir.display()
    );
    // The staging copy is gone and the checkpoint beside it is still running.
    assert!(
        job.storage
            .latest_completed()
            .await
            .expect("readable")
            .is_none()
    );
    let (_, body) = request(
        addr,
        Method::GET,
        &format!("/checkpoints/{}", checkpoint.0),
        Some(TOKEN),
        "",
    )
    .await;
    assert_eq!(body["status"], "in_progress");
    job.driver.shutdown().await;
}
