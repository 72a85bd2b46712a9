//! A checkpoint end to end: barriers in a real host, uploads to real
//! storage, acks to a real `CoordinatorDriver`, a `_metadata` that restores
//! into a fresh host (at the same and at another parallelism).

mod host_support;

use std::time::Duration;

use host_support::{Host, TOKEN, count, decoded, ints, keys, owned_ids, spec};
use tokio::runtime::Runtime;
use weir_checkpoint::coordinator::{CheckpointConfig, EpochCut};
use weir_checkpoint::{
    CheckpointStorage, JobOperator, OperatorRestore, OperatorStateMeta, RestorePlan,
    StorageLocation, StorageOptions,
};
use weir_coordinator::{CoordinatorDriver, DriverEvent, DriverOptions, JobToken, ServerOptions};
use weir_host::client::{HostClient, RemoteSession};
use weir_host::protocol::{
    AckTarget, BarrierRequest, Expectation, HostAddress, RestoreRequest, SnapshotFormat, StorageRef,
};
use weir_host::{BackendSpec, HostError, SubtaskSession};
use weir_snapshot::{Compression, KeyedStateHandle, SnapshotFile};
use weir_state::{RedistributionMode, StateId};
use weir_types::{Attempt, CheckpointId, Epoch, JobId, MaxParallelism, OperatorUid, ValueType};

const COORDINATOR_TOKEN: &str = "coordinator-token-5e2";

struct Job {
    driver: CoordinatorDriver,
    storage: CheckpointStorage,
    _dir: tempfile::TempDir,
}

fn start_coordinator(runtime: &Runtime) -> Job {
    let dir = tempfile::tempdir().expect("temp dir");
    let location = StorageLocation::parse(
        &dir.path().display().to_string(),
        &StorageOptions::default(),
    )
    .expect("local storage");
    let job = JobId::new("job").expect("valid");
    let storage = CheckpointStorage::filesystem(&location, job.clone()).expect("storage");
    let mut config = CheckpointConfig::new(Duration::from_millis(20));
    config.timeout = Duration::from_secs(300);
    let mut options = DriverOptions::new(job, config, dir.path().display().to_string());
    options.operators = vec![OperatorStateMeta {
        uid: OperatorUid::new("avg").expect("valid"),
        parallelism: 2,
        max_parallelism: MaxParallelism::new(128).expect("valid"),
        key_types: Some(vec![ValueType::Int64]),
        states: vec![count()],
        subtasks: Vec::new(),
    }];
    let server = ServerOptions::new(JobToken::new(COORDINATOR_TOKEN).expect("non-empty"));
    let driver = runtime
        .block_on(CoordinatorDriver::start(options, server))
        .expect("starts");
    // The job runs (epoch 0 is final), so periodic checkpoints start.
    runtime
        .block_on(driver.epoch_final(EpochCut::default()))
        .expect("running");
    Job {
        driver,
        storage,
        _dir: dir,
    }
}

/// The first event `pick` accepts; earlier ones are skipped.
fn next_event<T>(
    runtime: &Runtime,
    driver: &CoordinatorDriver,
    mut pick: impl FnMut(&DriverEvent) -> Option<T>,
) -> T {
    let wait = async {
        loop {
            for event in driver.poll_events(Duration::from_millis(200)).await {
                if let DriverEvent::CleanupFailed { message } = &event {
                    panic!("cleanup failed: {message}");
                }
                if let Some(found) = pick(&event) {
                    return found;
                }
            }
        }
    };
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), wait).await })
        .expect("the expected event arrives")
}

/// Runs epochs 1..=3 on `session`: each adds `bump` to every key's count.
fn run_epochs(session: &mut RemoteSession, state: StateId, ids: &[i64], bump: i64) {
    let batch = keys(ids);
    for epoch in 1..=3u64 {
        let final_epoch = (epoch > 1).then(|| Epoch(epoch - 1));
        session
            .begin(Epoch(epoch), Attempt(0), final_epoch)
            .expect("begins");
        let next: Vec<Option<i64>> = decoded(&session.get_values(state, &batch).expect("reads"))
            .iter()
            .zip(ids)
            .map(|(v, &id)| Some(v.unwrap_or(id * 1000) + bump))
            .collect();
        session
            .put_values(state, &batch, &ints(&next))
            .expect("writes");
        session.commit(Epoch(epoch), Attempt(0)).expect("commits");
    }
}

#[test]
fn a_checkpoint_from_host_barriers_completes_and_restores_into_a_fresh_host() {
    let runtime = Runtime::new().expect("runtime");
    let job = start_coordinator(&runtime);
    let host = Host::start();
    let backends = [BackendSpec::Heap, BackendSpec::RocksDb];
    let ids: Vec<Vec<i64>> = (0..2).map(|s| owned_ids(s, 2, 300)).collect();
    let mut states = Vec::new();
    for subtask in 0..2u32 {
        let mut session = host
            .connect()
            .attach(
                spec("avg", subtask, 2, backends[subtask as usize].clone()),
                Expectation::fresh(),
            )
            .expect("attaches");
        let state = session.register_state(&count()).expect("registers");
        let offsets = session
            .register_operator_state("offsets", RedistributionMode::Split)
            .expect("registers");
        run_epochs(&mut session, state, &ids[subtask as usize], 1);
        // Operator state written in epoch 3 (re-begun as a new attempt).
        session
            .begin(Epoch(3), Attempt(1), Some(Epoch(2)))
            .expect("retries epoch 3");
        run_retry_of_epoch_3(
            &mut session,
            state,
            offsets,
            &ids[subtask as usize],
            subtask,
        );
        states.push(state);
    }

    let id = next_event(&runtime, &job.driver, |e| match e {
        DriverEvent::CheckpointTriggered { id, .. } => Some(*id),
        _ => None,
    });
    runtime
        .block_on(job.driver.epoch_final(EpochCut {
            epoch: Epoch(3),
            ..EpochCut::default()
        }))
        .expect("running");
    let (cut, storage) = next_event(&runtime, &job.driver, |e| match e {
        DriverEvent::BarrierInjected {
            id: got,
            cut,
            storage,
            ..
        } if *got == id => Some((*cut, storage.clone())),
        _ => None,
    });
    assert_eq!(cut, Epoch(3));

    // The first task of each subtask after the cut carries the barrier.
    let job_dir = job.storage.job_dir().url().to_owned();
    assert_eq!(
        storage, job_dir,
        "a checkpoint uploads into the job directory"
    );
    let barrier = BarrierRequest {
        checkpoint: id,
        cut,
        storage: StorageRef::new(job_dir.clone()),
        ack: AckTarget {
            url: format!("http://{}", job.driver.local_addr()),
            token: COORDINATOR_TOKEN.into(),
        },
        format: SnapshotFormat::Canonical,
        // Not the default, so the files show the barrier's choice.
        compression: Compression::Lz4,
    };
    for subtask in 0..2u32 {
        let mut session = host
            .connect()
            .attach(
                spec("avg", subtask, 2, backends[subtask as usize].clone()),
                Expectation {
                    generation: 0,
                    restored_from: None,
                    final_epoch: Some(cut),
                },
            )
            .expect("attaches");
        let reply = session.barrier(barrier.clone()).expect("takes the barrier");
        assert!(reply.started);
        // A retried task repeats the barrier; the host does nothing twice.
        let again = session.barrier(barrier.clone()).expect("repeats");
        assert!(!again.started);
        // The next epoch runs while the upload goes on; its writes are not
        // part of the checkpoint.
        session
            .begin(Epoch(4), Attempt(0), Some(cut))
            .expect("begins");
        session
            .put_values(
                states[subtask as usize],
                &keys(&ids[subtask as usize]),
                &ints(&vec![Some(-1); ids[subtask as usize].len()]),
            )
            .expect("writes");
        session.commit(Epoch(4), Attempt(0)).expect("commits");
    }

    let completed = next_event(&runtime, &job.driver, |e| match e {
        DriverEvent::CheckpointCompleted { id: got, cut, .. } if *got == id => Some(*cut),
        _ => None,
    });
    assert_eq!(completed, cut);
    let status = host.connect().status().expect("status");
    assert_eq!(status.acked_uploads, 2, "{status:?}");
    assert_eq!(status.failed_uploads, 0, "{status:?}");
    assert_eq!(status.pending_uploads, 0);
    let meta = runtime
        .block_on(job.storage.latest_completed())
        .expect("readable")
        .expect("checkpoint 1 is complete");
    assert_eq!((meta.checkpoint_id, meta.cut_epoch), (id, cut));
    assert_eq!(meta.operators[0].subtasks.len(), 2);
    let files = StorageLocation::parse(&job_dir, &StorageOptions::default())
        .expect("the job directory")
        .snapshot_storage();
    for subtask in &meta.operators[0].subtasks {
        let Some(KeyedStateHandle::Full(handle)) = &subtask.keyed else {
            panic!("a canonical checkpoint stores one file per subtask: {subtask:?}");
        };
        let file = runtime
            .block_on(SnapshotFile::open(
                &*files.store,
                &files.root,
                &handle.file.path,
                Some(handle.file.size),
            ))
            .expect("opens");
        assert_eq!(file.layout().header().compression, Compression::Lz4);
    }
    let sizes = runtime.block_on(job.driver.stats());
    assert!(
        sizes
            .get(id)
            .is_some_and(|s| s.subtasks.iter().all(|t| t.metrics.state_size_bytes > 0)),
        "{sizes:?}"
    );

    // Restore at the same parallelism, into a fresh host, and at parallelism 1.
    for parallelism in [2u32, 1] {
        let fresh = Host::start();
        let op = JobOperator {
            uid: OperatorUid::new("avg").expect("valid"),
            max_parallelism: MaxParallelism::new(128).expect("valid"),
            parallelism,
        };
        let plan = RestorePlan::new(&meta, &[op], false).expect("plans");
        let OperatorRestore::Restored(restored) =
            &plan.operators[&OperatorUid::new("avg").expect("valid")]
        else {
            panic!("avg has stored state");
        };
        let mut all_offsets = Vec::new();
        for subtask in 0..parallelism {
            let spec = spec("avg", subtask, parallelism, BackendSpec::RocksDb);
            let request = RestoreRequest::new(
                spec.clone(),
                0,
                id,
                cut,
                StorageRef::new(job_dir.clone()),
                restored.subtasks[subtask as usize].clone(),
            );
            let mut session = fresh.connect().restore(request).expect("restores");
            let state = session.register_state(&count()).expect("registers");
            let offsets = session
                .register_operator_state("offsets", RedistributionMode::Split)
                .expect("registers");
            session
                .begin(Epoch(4), Attempt(0), Some(cut))
                .expect("begins after the cut");
            let mine = owned_ids(subtask, parallelism, 300);
            let values = decoded(&session.get_values(state, &keys(&mine)).expect("reads"));
            let expected: Vec<Option<i64>> = mine.iter().map(|&i| Some(i * 1000 + 3)).collect();
            assert_eq!(
                values, expected,
                "parallelism {parallelism}, subtask {subtask}"
            );
            all_offsets.extend(session.operator_state(offsets).expect("reads"));
            session.commit(Epoch(4), Attempt(0)).expect("commits");
            drop(session);
            // Later tasks attach with the restore as their expectation.
            HostClient::connect(&HostAddress::of_dir(fresh.path()), TOKEN)
                .expect("connects")
                .attach(
                    spec.clone(),
                    Expectation {
                        generation: 0,
                        restored_from: Some(id),
                        final_epoch: Some(Epoch(4)),
                    },
                )
                .expect("attaches to the restored state");
            let err = HostClient::connect(&HostAddress::of_dir(fresh.path()), TOKEN)
                .expect("connects")
                .attach(
                    spec,
                    Expectation {
                        generation: 0,
                        restored_from: None,
                        final_epoch: Some(Epoch(4)),
                    },
                )
                .expect_err("not a fresh job's state");
            assert!(matches!(err, HostError::StateLost(_)), "{err}");
        }
        all_offsets.sort();
        assert_eq!(
            all_offsets,
            [b"s0".to_vec(), b"s1".to_vec()],
            "parallelism {parallelism}"
        );
    }
    runtime
        .block_on(job.driver.shutdown(false))
        .expect("shuts down");
}

/// Epoch 3 again: the same writes as the first attempt plus operator state.
fn run_retry_of_epoch_3(
    session: &mut RemoteSession,
    state: StateId,
    offsets: StateId,
    ids: &[i64],
    subtask: u32,
) {
    let batch = keys(ids);
    let next: Vec<Option<i64>> = ids.iter().map(|&i| Some(i * 1000 + 3)).collect();
    session
        .put_values(state, &batch, &ints(&next))
        .expect("writes");
    session
        .set_operator_state(offsets, vec![format!("s{subtask}").into_bytes()])
        .expect("sets");
    session.commit(Epoch(3), Attempt(1)).expect("commits");
}

#[test]
fn a_barrier_for_an_epoch_this_host_never_ran_is_state_lost() {
    let host = Host::start();
    let mut session = host
        .connect()
        .attach(spec("avg", 0, 1, BackendSpec::Heap), Expectation::fresh())
        .expect("attaches");
    session.begin(Epoch(1), Attempt(0), None).expect("begins");
    session.commit(Epoch(1), Attempt(0)).expect("commits");
    let tmp = tempfile::tempdir().expect("temp dir");
    let err = session
        .barrier(BarrierRequest {
            checkpoint: CheckpointId(1),
            cut: Epoch(2),
            storage: StorageRef::new(tmp.path().display().to_string()),
            ack: AckTarget {
                url: "http://127.0.0.1:9".into(),
                token: "t".into(),
            },
            format: SnapshotFormat::Canonical,
            compression: Compression::default(),
        })
        .expect_err("epoch 2 ran elsewhere");
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
}

/// Polls the host until its uploads are done; returns the final status.
fn settled(host: &Host) -> weir_host::protocol::HostStatus {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = host.connect().status().expect("status");
        if status.pending_uploads == 0 {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "uploads never finished: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A subtask with one committed epoch, attached for the task after it.
fn one_epoch(host: &Host) -> RemoteSession {
    let s = spec("avg", 0, 2, BackendSpec::Heap);
    let mut session = host
        .connect()
        .attach(s.clone(), Expectation::fresh())
        .expect("attaches");
    let state = session.register_state(&count()).expect("registers");
    session.begin(Epoch(1), Attempt(0), None).expect("begins");
    session
        .put_values(
            state,
            &keys(&owned_ids(0, 2, 50)),
            &ints(&vec![Some(1); owned_ids(0, 2, 50).len()]),
        )
        .expect("writes");
    session.commit(Epoch(1), Attempt(0)).expect("commits");
    session
}

#[test]
fn a_failed_upload_is_declined_and_the_coordinator_aborts_the_checkpoint() {
    let runtime = Runtime::new().expect("runtime");
    let job = start_coordinator(&runtime);
    let host = Host::start();
    let mut session = one_epoch(&host);
    let id = next_event(&runtime, &job.driver, |e| match e {
        DriverEvent::CheckpointTriggered { id, .. } => Some(*id),
        _ => None,
    });
    runtime
        .block_on(job.driver.epoch_final(EpochCut {
            epoch: Epoch(1),
            ..EpochCut::default()
        }))
        .expect("running");
    next_event(&runtime, &job.driver, |e| match e {
        DriverEvent::BarrierInjected { id: got, .. } if *got == id => Some(()),
        _ => None,
    });
    // A file where the checkpoint's directory must go makes the upload fail.
    let job_dir = std::path::PathBuf::from(job.storage.job_dir().url());
    std::fs::create_dir_all(&job_dir).expect("job dir");
    std::fs::write(job_dir.join(format!("chk-{id}")), b"in the way").expect("blocks the upload");
    let reply = session
        .barrier(BarrierRequest {
            checkpoint: id,
            cut: Epoch(1),
            storage: StorageRef::new(job.storage.job_dir().url()),
            ack: AckTarget {
                url: format!("http://{}", job.driver.local_addr()),
                token: COORDINATOR_TOKEN.into(),
            },
            format: SnapshotFormat::Canonical,
            compression: Compression::default(),
        })
        .expect("the synchronous part succeeds");
    assert!(reply.started);
    let message = next_event(&runtime, &job.driver, |e| match e {
        DriverEvent::CheckpointAborted {
            id: got,
            reason: weir_checkpoint::coordinator::AbortReason::Declined { message, .. },
            ..
        } if *got == id => Some(message.clone()),
        _ => None,
    });
    assert!(message.contains("upload failed"), "{message}");
    let status = settled(&host);
    assert_eq!(
        (status.acked_uploads, status.failed_uploads),
        (0, 1),
        "{status:?}"
    );
    runtime
        .block_on(job.driver.shutdown(false))
        .expect("shuts down");
}

#[test]
fn an_ack_with_the_wrong_token_is_recorded_as_a_failure() {
    let runtime = Runtime::new().expect("runtime");
    let job = start_coordinator(&runtime);
    let host = Host::start();
    let mut session = one_epoch(&host);
    session
        .barrier(BarrierRequest {
            checkpoint: CheckpointId(1),
            cut: Epoch(1),
            storage: StorageRef::new(job.storage.job_dir().url()),
            ack: AckTarget {
                url: format!("http://{}", job.driver.local_addr()),
                token: "not-the-coordinator-token".into(),
            },
            format: SnapshotFormat::Canonical,
            compression: Compression::default(),
        })
        .expect("the synchronous part succeeds");
    let status = settled(&host);
    assert_eq!(
        (status.acked_uploads, status.failed_uploads),
        (0, 1),
        "{status:?}"
    );
    let failure = status.last_failure.expect("a failure message");
    assert!(failure.contains("refused the job token"), "{failure}");
    assert!(
        !failure.contains("not-the-coordinator-token"),
        "no secrets in status"
    );
    runtime
        .block_on(job.driver.shutdown(false))
        .expect("shuts down");
}

/// Starts checkpoint `id` of a subtask holding keyed and operator state on
/// a slow store under `storage`; waits until its upload wrote a file.
fn start_slow_upload(host: &Host, storage: &std::path::Path, id: CheckpointId) {
    let mut session = host
        .connect()
        .attach(spec("avg", 0, 2, BackendSpec::Heap), Expectation::fresh())
        .expect("attaches");
    let state = session.register_state(&count()).expect("registers");
    let items = session
        .register_operator_state("offsets", RedistributionMode::Split)
        .expect("registers");
    session.begin(Epoch(1), Attempt(0), None).expect("begins");
    let ids = owned_ids(0, 2, 50);
    session
        .put_values(state, &keys(&ids), &ints(&vec![Some(1); ids.len()]))
        .expect("writes");
    session
        .set_operator_state(items, vec![b"offset-7".to_vec()])
        .expect("writes");
    session.commit(Epoch(1), Attempt(0)).expect("commits");
    let mut slow = StorageRef::new(storage.to_string_lossy());
    slow.options
        .insert(weir_checkpoint::PUT_DELAY_MS.into(), "1500".into());
    let reply = session
        .barrier(BarrierRequest {
            checkpoint: id,
            cut: Epoch(1),
            storage: slow,
            // Nobody listens there: an ack, if it comes to that, is unanswered.
            ack: AckTarget {
                url: "http://127.0.0.1:1".into(),
                token: "t".into(),
            },
            format: SnapshotFormat::Canonical,
            compression: Compression::default(),
        })
        .expect("the synchronous part succeeds");
    assert!(reply.started);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while host_support::files_under(storage).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the upload never wrote"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

// Regression: an aborted upload stopped but left the files it had already
// written (the operator state file, at least), so aborted checkpoints left
// `chk-N/` directories behind.
#[test]
fn an_aborted_checkpoint_leaves_no_files_behind() {
    let host = Host::start();
    let storage = tempfile::tempdir().expect("temp dir");
    start_slow_upload(&host, storage.path(), CheckpointId(3));
    let canceled = host
        .connect()
        .abort_checkpoint(CheckpointId(3))
        .expect("aborts");
    assert_eq!(canceled, 1);
    assert_eq!(
        host_support::files_under(storage.path()),
        Vec::<std::path::PathBuf>::new()
    );
    let status = host.connect().status().expect("status");
    assert_eq!((status.pending_uploads, status.failed_uploads), (0, 1));
    assert!(
        status
            .last_failure
            .as_ref()
            .is_some_and(|f| f.contains("aborted") && f.contains("deleted")),
        "{status:?}"
    );
}

// A task granted a barrier inside its Spark job may take it just after the
// driver aborted the checkpoint (it timed out meanwhile): the abort found no
// upload then, so the barrier must not start one.
#[test]
fn a_barrier_of_an_aborted_checkpoint_uploads_nothing() {
    let host = Host::start();
    let storage = tempfile::tempdir().expect("temp dir");
    let canceled = host
        .connect()
        .abort_checkpoint(CheckpointId(9))
        .expect("aborts");
    assert_eq!(canceled, 0, "nothing in flight yet");
    let mut session = host
        .connect()
        .attach(spec("avg", 0, 2, BackendSpec::Heap), Expectation::fresh())
        .expect("attaches");
    let state = session.register_state(&count()).expect("registers");
    session.begin(Epoch(1), Attempt(0), None).expect("begins");
    let ids = owned_ids(0, 2, 50);
    session
        .put_values(state, &keys(&ids), &ints(&vec![Some(1); ids.len()]))
        .expect("writes");
    session.commit(Epoch(1), Attempt(0)).expect("commits");
    let reply = session
        .barrier(BarrierRequest {
            checkpoint: CheckpointId(9),
            cut: Epoch(1),
            storage: StorageRef::new(storage.path().to_string_lossy()),
            ack: AckTarget {
                url: "http://127.0.0.1:1".into(),
                token: "t".into(),
            },
            format: SnapshotFormat::Canonical,
            compression: Compression::default(),
        })
        .expect("answers");
    assert!(!reply.started);
    let status = host.connect().status().expect("status");
    assert_eq!(status.pending_uploads, 0);
    assert_eq!(
        host_support::files_under(storage.path()),
        Vec::<std::path::PathBuf>::new()
    );
}

#[test]
fn shutdown_cancels_uploads_and_deletes_their_files() {
    let mut host = Host::start();
    let storage = tempfile::tempdir().expect("temp dir");
    start_slow_upload(&host, storage.path(), CheckpointId(4));
    host.connect().shutdown().expect("shuts down");
    assert_eq!(
        host_support::files_under(storage.path()),
        Vec::<std::path::PathBuf>::new()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = host.child.try_wait().expect("waits") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the host never exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}
