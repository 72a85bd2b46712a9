//! Checkpoints and savepoints from trigger to `_metadata` in storage, a
//! declined one failing the job, restarts, and the shutdown.

use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;
use weir_checkpoint::coordinator::{AbortReason, ExternalizedCleanup};
use weir_checkpoint::{CheckpointKind, PUT_DELAY_MS, StorageOptions, latest_state};
use weir_coordinator::DriverEvent;
use weir_types::{CheckpointId, Epoch, OperatorUid};

use crate::client::{
    TOKEN, ack_all, complete_next, cut, empty_ack, eventually, launch, request, server, start,
    start_with,
};

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

#[tokio::test]
async fn a_checkpoint_completes_after_all_acks_and_its_metadata_is_stored() {
    let job = start().await;
    let addr = job.driver.local_addr();
    let storage = job.storage();
    let id = job
        .driver
        .next_event(|e| match e {
            DriverEvent::CheckpointTriggered {
                id,
                kind: CheckpointKind::Checkpoint,
            } => Some(*id),
            _ => None,
        })
        .await;
    assert_eq!(id, CheckpointId(1));
    job.driver.epoch_final(cut(4)).await.expect("running");
    let barrier = job
        .driver
        .next_event(|e| match e {
            DriverEvent::BarrierInjected {
                id, cut, storage, ..
            } => Some((*id, *cut, storage.clone())),
            _ => None,
        })
        .await;
    assert_eq!(
        barrier,
        (id, Epoch(4), storage.job_dir().url().to_owned()),
        "checkpoints upload into the job directory"
    );

    let (status, body) = request(addr, Method::POST, "/ack", Some(TOKEN), &ack(1, 0)).await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("accepted"))
    );
    let (_, body) = request(addr, Method::POST, "/ack", Some(TOKEN), &ack(1, 0)).await;
    assert_eq!(body["outcome"], "duplicate");
    assert!(
        storage
            .latest_completed()
            .await
            .expect("readable")
            .is_none(),
        "one ack is missing"
    );
    let (_, body) = request(addr, Method::POST, "/ack", Some(TOKEN), &ack(1, 1)).await;
    assert_eq!(body["outcome"], "accepted");

    let completed = job
        .driver
        .next_event(|e| match e {
            DriverEvent::CheckpointCompleted { id, cut, path, .. } => {
                Some((*id, *cut, path.clone()))
            }
            _ => None,
        })
        .await;
    assert_eq!(completed.0, id);
    assert_eq!(completed.1, Epoch(4));
    assert!(completed.2.ends_with("/job/chk-1"), "{}", completed.2);
    let meta = storage
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
    assert_eq!(
        latest_state(&storage, &StorageOptions::default())
            .await
            .expect("readable"),
        Some(completed.2)
    );

    let (status, body) = request(addr, Method::GET, "/checkpoints/1", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "completed");
    assert_eq!(body["cut"], 4);
    assert_eq!(body["subtasks"].as_array().map(Vec::len), Some(2));
    let (_, body) = request(addr, Method::GET, "/checkpoints", Some(TOKEN), "").await;
    assert_eq!(body["counts"]["completed"], 1);

    // An ack for the finished checkpoint is late, not an error.
    let (status, body) = request(addr, Method::POST, "/ack", Some(TOKEN), &ack(1, 1)).await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("discarded"))
    );
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn a_decline_aborts_the_checkpoint_and_fails_the_job_without_tolerance() {
    let job = start().await;
    let addr = job.driver.local_addr();
    let id = job.driver.next_trigger().await;
    job.driver.epoch_final(cut(1)).await.expect("running");
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
    let reason = job
        .driver
        .next_event(|e| match e {
            DriverEvent::CheckpointAborted { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .await;
    assert!(
        matches!(reason, AbortReason::Declined { ref message, .. } if message == "upload failed")
    );
    let failed = job
        .driver
        .next_event(|e| match e {
            DriverEvent::JobFailed {
                consecutive_failures,
                latest_completed,
                ..
            } => Some((*consecutive_failures, *latest_completed)),
            _ => None,
        })
        .await;
    assert_eq!(failed, (1, None));
    assert!(
        job.driver.trigger_savepoint(None, false).await.is_err(),
        "a failed job takes no savepoints"
    );
    // A restart runs it again.
    job.driver.restart(None).await.expect("restarts");
    let (next, _) = complete_next(&job.driver, 2).await;
    assert!(next > id);
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn a_savepoint_goes_to_a_fresh_directory_of_its_own() {
    let savepoints = tempfile::tempdir().expect("temp dir");
    let dir = savepoints.path().display().to_string();
    let job = start_with(|o| o.savepoint_dir = Some(dir.clone()), server()).await;
    let addr = job.driver.local_addr();
    let checkpoint = job
        .driver
        .next_event(|e| match e {
            DriverEvent::CheckpointTriggered {
                id,
                kind: CheckpointKind::Checkpoint,
            } => Some(*id),
            _ => None,
        })
        .await;
    let savepoint = job
        .driver
        .trigger_savepoint(None, false)
        .await
        .expect("running job");
    job.driver.epoch_final(cut(1)).await.expect("running");
    job.driver.epoch_final(cut(2)).await.expect("running");
    let storage = job
        .driver
        .next_event(|e| match e {
            DriverEvent::BarrierInjected {
                id,
                kind: CheckpointKind::Savepoint,
                storage,
                ..
            } if *id == savepoint => Some(storage.clone()),
            _ => None,
        })
        .await;
    let name = storage.rsplit('/').next().unwrap_or_default().to_owned();
    assert!(
        name.starts_with(&format!("savepoint-job-{savepoint}-"))
            && name.len() > "savepoint-job-2-".len(),
        "a fresh, suffixed directory: {storage}"
    );
    assert!(
        storage.starts_with(&dir),
        "under the savepoint directory: {storage}"
    );
    ack_all(addr, savepoint).await;
    let path = job
        .driver
        .next_event(|e| match e {
            DriverEvent::CheckpointCompleted {
                id,
                kind: CheckpointKind::Savepoint,
                cut,
                path,
            } if *id == savepoint => {
                assert_eq!(*cut, Epoch(2));
                Some(path.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(path, storage, "it completes where its state went");
    assert!(savepoints.path().join(&name).join("_metadata").is_file());
    // The checkpoint beside it is still running; nothing was staged in the job directory.
    assert!(
        job.storage()
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
    // A second savepoint never lands in the first one's directory.
    let second = job
        .driver
        .trigger_savepoint(Some(&dir), false)
        .await
        .expect("running job");
    job.driver.epoch_final(cut(3)).await.expect("running");
    job.driver.epoch_final(cut(4)).await.expect("running");
    let other = job
        .driver
        .next_event(|e| match e {
            DriverEvent::BarrierInjected { id, storage, .. } if *id == second => {
                Some(storage.clone())
            }
            _ => None,
        })
        .await;
    assert_ne!(other, storage);
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn a_savepoint_without_a_directory_is_refused_before_it_starts() {
    let job = start().await;
    let err = job
        .driver
        .trigger_savepoint(None, false)
        .await
        .expect_err("no directory");
    assert!(err.to_string().contains("no target directory"), "{err}");
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn shutdown_waits_for_a_metadata_write_in_flight() {
    let job = start_with(
        |o| o.storage_options = StorageOptions::default().with(PUT_DELAY_MS, "400"),
        server(),
    )
    .await;
    let id = job.driver.next_trigger().await;
    job.driver.epoch_final(cut(1)).await.expect("running");
    ack_all(job.driver.local_addr(), id).await;
    // The slow store is still writing `_metadata` (and the lineage) now.
    job.driver.shutdown(false).await.expect("shuts down");
    let storage = job.storage();
    let latest = storage.latest_completed().await.expect("readable");
    assert_eq!(
        latest.map(|m| m.checkpoint_id),
        Some(id),
        "the checkpoint in flight landed before shutdown returned, not after"
    );
    assert!(
        latest_state(&storage, &StorageOptions::default())
            .await
            .expect("readable")
            .is_some_and(|path| path.ends_with(&format!("chk-{id}")))
    );
    // Its completion is still reported to the owner.
    let events = job.driver.poll_events(Duration::ZERO).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, DriverEvent::CheckpointCompleted { id: done, .. } if *done == id))
    );
}

#[tokio::test]
async fn ids_never_repeat_across_runs_of_a_job_directory() {
    let first = start().await;
    let (id, path) = complete_next(&first.driver, 1).await;
    first.driver.shutdown(false).await.expect("shuts down");
    let dir = first.dir;
    let mut options = crate::client::options(dir.path());
    options.restored = Some(path);
    let second = launch(options, server()).await;
    let (next, _) = complete_next(&second, 2).await;
    assert!(
        next.0 > id.0 + 1,
        "the new run starts after every id the first could have used, not at latest + 1: {next}"
    );
    second.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn a_second_run_on_the_job_directory_fails_fast_until_the_first_ends() {
    let first = start().await;
    let options = crate::client::options(first.dir.path());
    let refused = weir_coordinator::CoordinatorDriver::start(options.clone(), server())
        .await
        .expect_err("the first run holds the lease");
    let message = refused.to_string();
    assert!(message.contains("is in use by run"), "{message}");
    assert!(
        message.contains(&format!("pid {}", std::process::id())),
        "{message}"
    );
    first
        .driver
        .shutdown(false)
        .await
        .expect("releases the lease");
    let second = weir_coordinator::CoordinatorDriver::start(options, server())
        .await
        .expect("the lease was released");
    second.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn losing_the_lease_stops_the_run_and_tells_the_owner() {
    let job = start_with(
        |o| o.lease.stale_after = Duration::from_millis(600),
        server(),
    )
    .await;
    // Another run takes the directory over (as if this one were silent).
    let job_dir = weir_checkpoint::StorageLocation::parse(
        &job.job_dir().display().to_string(),
        &StorageOptions::default(),
    )
    .expect("local");
    let mut thief = weir_checkpoint::JobLease::acquire(
        &job_dir,
        weir_checkpoint::LeaseHolder {
            owner: "thief".into(),
            host: "elsewhere".into(),
            pid: 1,
        },
        weir_checkpoint::LeaseTerms::default(),
        u64::MAX / 2,
        CheckpointId(1),
        |_| weir_checkpoint::HolderLiveness::Gone,
    )
    .await
    .expect("takes over");
    let message = job
        .driver
        .next_event(|e| match e {
            DriverEvent::LeaseLost { message } => Some(message.clone()),
            _ => None,
        })
        .await;
    assert!(message.contains("thief"), "{message}");
    assert!(job.driver.trigger_savepoint(None, false).await.is_err());
    assert!(
        job.driver.restart(None).await.is_err(),
        "a fenced run cannot restart"
    );
    job.driver
        .shutdown(false)
        .await
        .expect("shuts down without releasing");
    assert!(
        thief.renew(u64::MAX / 2 + 1, None).await.is_ok(),
        "the thief still holds it"
    );
}

#[tokio::test]
async fn restoring_an_older_checkpoint_keeps_it_and_a_later_start_follows_its_lineage() {
    let first = start_with(|o| o.config.retained = 3, server()).await;
    let mut paths = Vec::new();
    for epoch in 1..=4 {
        paths.push(complete_next(&first.driver, epoch).await.1);
    }
    first.driver.shutdown(false).await.expect("shuts down");
    let dir = first.dir;
    // Roll back to the second checkpoint (chk-2; chk-3 and chk-4 are newer).
    let mut options = crate::client::options(dir.path());
    options.config.retained = 3;
    options.restored = Some(paths[1].clone());
    let second = launch(options, server()).await;
    let storage = crate::client::storage(dir.path());
    storage
        .open(CheckpointId(2))
        .await
        .expect("the restore source is kept");
    assert_eq!(
        latest_state(&storage, &StorageOptions::default())
            .await
            .expect("readable"),
        Some(paths[1].clone()),
        "a driver dying now resumes from the rollback, not from chk-4"
    );
    // A failover before any new checkpoint stays on the lineage too.
    second.restart(Some(&paths[1])).await.expect("restarts");
    let (newer, newer_path) = complete_next(&second, 5).await;
    assert_eq!(
        latest_state(&storage, &StorageOptions::default())
            .await
            .expect("readable"),
        Some(newer_path)
    );
    // The abandoned checkpoints go once the new lineage has its own.
    let gone = second
        .next_event(|e| match e {
            DriverEvent::CheckpointSubsumed { ids } if ids.contains(&CheckpointId(4)) => {
                Some(ids.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(gone, [CheckpointId(3), CheckpointId(4)]);
    eventually("the abandoned checkpoints are deleted", async || {
        // chk-1 was subsumed in the first run (retained 3 of 4).
        storage.checkpoint_dirs().await.expect("lists") == [CheckpointId(2), newer]
    })
    .await;
    second.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn a_subsumed_checkpoint_stays_until_the_owner_took_its_successor() {
    let job = start().await;
    let storage = job.storage();
    let (first, _) = complete_next(&job.driver, 1).await;
    let second = job.driver.next_trigger().await;
    job.driver.epoch_final(cut(2)).await.expect("running");
    ack_all(job.driver.local_addr(), second).await;
    eventually("the second checkpoint completes", async || {
        latest_state(&storage, &StorageOptions::default())
            .await
            .expect("readable")
            .is_some_and(|p| p.ends_with(&format!("chk-{second}")))
    })
    .await;
    storage
        .open(first)
        .await
        .expect("not deleted before the owner heard of its successor");
    let subsumed = job
        .driver
        .next_event(|e| match e {
            DriverEvent::CheckpointSubsumed { ids } => Some(ids.clone()),
            _ => None,
        })
        .await;
    assert_eq!(subsumed, [first]);
    eventually("then it is deleted", async || {
        storage.open(first).await.is_err()
    })
    .await;
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn a_cancelled_job_deletes_its_checkpoints_only_when_configured_to() {
    for (cleanup, kept) in [
        (ExternalizedCleanup::RetainOnCancellation, true),
        (ExternalizedCleanup::DeleteOnCancellation, false),
    ] {
        let job = start_with(|o| o.config.externalized_cleanup = cleanup, server()).await;
        let (id, _) = complete_next(&job.driver, 1).await;
        job.driver.shutdown(true).await.expect("shuts down");
        assert_eq!(job.storage().open(id).await.is_ok(), kept, "{cleanup:?}");
    }
    // A job that ends without being cancelled keeps them either way.
    let job = start_with(
        |o| o.config.externalized_cleanup = ExternalizedCleanup::DeleteOnCancellation,
        server(),
    )
    .await;
    let (id, _) = complete_next(&job.driver, 1).await;
    job.driver.shutdown(false).await.expect("shuts down");
    job.storage().open(id).await.expect("kept");
}

#[tokio::test]
async fn a_restart_drops_the_old_generation_and_its_late_acks() {
    let job = start().await;
    let addr = job.driver.local_addr();
    let (done, path) = complete_next(&job.driver, 1).await;
    let pending = job.driver.next_trigger().await;
    job.driver.epoch_final(cut(2)).await.expect("running");
    assert_eq!(job.driver.restart(Some(&path)).await.expect("restarts"), 2);
    assert_eq!(job.driver.generation(), 2);
    let (_, body) = request(
        addr,
        Method::POST,
        "/ack",
        Some(TOKEN),
        &empty_ack(pending, 0),
    )
    .await;
    assert_eq!(body["outcome"], "discarded");
    let (next, _) = complete_next(&job.driver, 2).await;
    assert!(next > pending && pending > done);
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn shutdown_aborts_a_checkpoint_still_in_flight_and_deletes_its_files() {
    let job = start().await;
    let id = job.driver.next_trigger().await;
    job.driver.epoch_final(cut(1)).await.expect("running");
    // One subtask uploaded and acked; the other never will: the run ends first.
    let uploaded = job
        .job_dir()
        .join(format!("chk-{id}"))
        .join("avg")
        .join("0");
    std::fs::create_dir_all(&uploaded).expect("creates");
    std::fs::write(uploaded.join("keyed"), b"state").expect("writes");
    let (status, _) = request(
        job.driver.local_addr(),
        Method::POST,
        "/ack",
        Some(TOKEN),
        &empty_ack(id, 0),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    job.driver.shutdown(false).await.expect("shuts down");
    assert!(
        !job.job_dir().join(format!("chk-{id}")).exists(),
        "a checkpoint that can no longer complete leaves nothing behind"
    );
}

#[tokio::test]
async fn periodic_checkpoints_wait_until_the_job_runs_and_an_overdue_one_starts_at_its_first_final_epoch()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let driver =
        weir_coordinator::CoordinatorDriver::start(crate::client::options(dir.path()), server())
            .await
            .expect("starts");
    // Ten intervals pass while the first epoch would start hosts and workers.
    let before = driver.poll_events(Duration::from_millis(200)).await;
    assert!(
        !before
            .iter()
            .any(|e| matches!(e, DriverEvent::CheckpointTriggered { .. })),
        "nothing is triggered before the job runs: {before:?}"
    );
    driver.epoch_final(cut(1)).await.expect("running");
    // Already queued when the final epoch is reported, before a next epoch could begin.
    let after = driver.poll_events(Duration::ZERO).await;
    assert!(
        after.iter().any(
            |e| matches!(e, DriverEvent::CheckpointTriggered { id, .. } if *id == CheckpointId(1))
        ),
        "{after:?}"
    );
    driver.shutdown(false).await.expect("shuts down");
}
