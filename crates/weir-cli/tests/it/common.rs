//! A real job's storage: heap backends filled with known state, full
//! snapshots written by `weir-snapshot`, completed by `weir-checkpoint`,
//! and a savepoint copied from the checkpoint; plus a runner for the binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use weir_checkpoint::{
    CheckpointKind, CheckpointMetadata, CheckpointStorage, OperatorStateMeta, StorageLocation,
    StorageOptions, SubtaskStateMeta, create_savepoint, layout,
};
use weir_snapshot::format::Compression;
use weir_snapshot::{
    FullSnapshotOptions, KeyedStateHandle, spawn_full_snapshot, write_operator_state,
};
use weir_state::{
    HeapKeyedStateBackend, KeyedStateBackend, OperatorListSnapshot, OperatorStateSnapshot,
    RedistributionMode, StateKey, push_list_item,
};
use weir_types::{
    Attempt, CheckpointId, Epoch, JobId, KeyGroupRange, MaxParallelism, OperatorUid,
    StateDescriptor, StateKind, SubtaskIndex, Value, ValueType, encode_key, encode_value,
    key_group_of,
};

pub const JOB: &str = "orders";
pub const UID: &str = "counts";
pub const CHECKPOINT: u64 = 3;
pub const PARALLELISM: u32 = 2;
pub const MAX_PARALLELISM: u32 = 16;
/// Keys `user-0` .. `user-<KEYS-1>`, plus `alice`.
pub const KEYS: usize = 30;
/// 2026-11-22T05:00:00.000Z
pub const TIMESTAMP: u64 = 1_795_323_600_000;

/// Where the fixture lives.
pub struct Fixture {
    /// Holds everything; removed on drop.
    pub _dir: tempfile::TempDir,
    /// The checkpoint directory (holds the job directory).
    pub checkpoints: PathBuf,
    /// `<checkpoints>/orders`.
    pub job_dir: PathBuf,
    /// `<job_dir>/chk-3`.
    pub chk_dir: PathBuf,
    /// `<savepoints>/savepoint-orders-3`.
    pub savepoint: PathBuf,
}

/// What was run and what it said.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the real `weir` binary.
pub fn weir(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("the weir binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts a failure reported as exactly one `weir: error:` line.
pub fn assert_one_line_error(run: &Run, needle: &str) {
    assert_ne!(run.code, 0, "expected failure, stdout: {}", run.stdout);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(!run.stderr.contains("backtrace"), "{}", run.stderr);
    let lines: Vec<_> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "not one line: {:?}", run.stderr);
    assert!(lines[0].starts_with("weir: error: "), "{}", lines[0]);
    assert!(lines[0].contains(needle), "{:?} lacks {needle:?}", lines[0]);
}

pub fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// The state's types.
pub fn descriptors() -> Vec<StateDescriptor> {
    vec![
        StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
        StateDescriptor::new("seen", StateKind::List, ValueType::Utf8).expect("valid"),
        StateDescriptor::map("by_day", ValueType::Utf8, ValueType::Int64).expect("valid"),
    ]
}

fn max() -> MaxParallelism {
    MaxParallelism::new(MAX_PARALLELISM).expect("valid")
}

fn encoded(v: Value, ty: &ValueType) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&v, ty, &mut out).expect("matches its type");
    out
}

/// Every key and the count it holds: `alice` has 42, `user-i` has `i`.
pub fn keys() -> Vec<(String, i64)> {
    let mut keys: Vec<_> = (0..KEYS).map(|i| (format!("user-{i}"), i as i64)).collect();
    keys.push(("alice".to_owned(), 42));
    keys
}

/// A backend of subtask `subtask` holding the keys it owns: `count` for
/// every key, `seen` = ["x", "y"] and `by_day` = {"mon": 3} for alice only.
fn backend(subtask: u32) -> HeapKeyedStateBackend {
    let range =
        KeyGroupRange::for_subtask(max(), PARALLELISM, SubtaskIndex(subtask)).expect("valid");
    let mut b = HeapKeyedStateBackend::new(max(), range).expect("valid");
    let ids: Vec<_> = descriptors()
        .iter()
        .map(|d| b.register_state(d).expect("new state"))
        .collect();
    b.begin_epoch(Epoch(1), Attempt(0)).expect("epoch");
    for (name, count) in keys() {
        let columns = [Value::Utf8(name.clone())];
        let kg = key_group_of(&columns, max());
        if !range.contains(kg) {
            continue;
        }
        let mut key = Vec::new();
        encode_key(&columns, &[ValueType::Utf8], &mut key).expect("utf8 key");
        let at = StateKey::new(kg, &key);
        b.put_value(ids[0], at, &encoded(Value::Int64(count), &ValueType::Int64))
            .expect("put");
        if name == "alice" {
            let mut list = Vec::new();
            for item in ["x", "y"] {
                push_list_item(
                    &encoded(Value::Utf8(item.into()), &ValueType::Utf8),
                    &mut list,
                );
            }
            b.append_list(ids[1], at, &list).expect("append");
            let day = encoded(Value::Utf8("mon".into()), &ValueType::Utf8);
            b.map_put(
                ids[2],
                at,
                &day,
                &encoded(Value::Int64(3), &ValueType::Int64),
            )
            .expect("map put");
        }
    }
    b.commit_epoch(Epoch(1), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(1)).expect("finalize");
    b
}

/// Writes checkpoint 3 of job `orders` and savepoint 3 copied from it.
pub fn fixture() -> Fixture {
    build(Placement::Files)
}

/// Where the checkpoint keeps its state files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Files beside `_metadata`.
    Files,
    /// Inside `_metadata` ("jobmanager" storage).
    Inline,
}

/// [`fixture`] with the state files placed as `placement` says.
pub fn build(placement: Placement) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoints = dir.path().join("checkpoints");
    let savepoints = dir.path().join("savepoints");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let opts = StorageOptions::default();
        let ckpt = StorageLocation::parse(path(&checkpoints), &opts).expect("checkpoint dir");
        let job = JobId::new(JOB).expect("valid");
        let storage = match placement {
            Placement::Files => CheckpointStorage::filesystem(&ckpt, job),
            Placement::Inline => CheckpointStorage::jobmanager(&ckpt, job, 1 << 20),
        }
        .expect("storage");
        let uid = OperatorUid::new(UID).expect("valid");
        let id = CheckpointId(CHECKPOINT);
        let mut subtasks = Vec::new();
        for i in 0..PARALLELISM {
            let frozen = backend(i).snapshot_sync().expect("snapshot");
            let dir = layout::subtask_dir(id, &uid, SubtaskIndex(i));
            let options = FullSnapshotOptions {
                compression: Compression::Zstd,
                key_types: Some(vec![ValueType::Utf8]),
                ..FullSnapshotOptions::default()
            };
            let outcome = spawn_full_snapshot(
                runtime.handle(),
                frozen,
                &storage.state_storage(),
                &format!("{dir}/keyed"),
                options,
            )
            .await
            .expect("snapshot uploads");
            let operator_state = if i == 0 {
                let snapshot = OperatorStateSnapshot {
                    states: vec![OperatorListSnapshot {
                        name: "buffer".into(),
                        mode: RedistributionMode::Split,
                        items: vec![b"pending".to_vec()],
                    }],
                };
                let target = storage.state_storage();
                Some(
                    write_operator_state(
                        &snapshot,
                        &*target.store,
                        &target.root,
                        &format!("{dir}/operator"),
                    )
                    .await
                    .expect("operator state"),
                )
            } else {
                None
            };
            subtasks.push(SubtaskStateMeta {
                subtask: SubtaskIndex(i),
                keyed: Some(KeyedStateHandle::Full(outcome.handle)),
                operator_state,
            });
        }
        let mut meta = CheckpointMetadata::new(
            JobId::new(JOB).expect("valid"),
            id,
            CheckpointKind::Checkpoint,
            Epoch(17),
        );
        meta.timestamp_millis = TIMESTAMP;
        meta.operators.push(OperatorStateMeta {
            uid: uid.clone(),
            parallelism: PARALLELISM,
            max_parallelism: max(),
            key_types: Some(vec![ValueType::Utf8]),
            states: descriptors(),
            subtasks,
        });
        meta.sources.insert(
            OperatorUid::new("kafka-in").expect("valid"),
            serde_json::json!({"offset": 1234}),
        );
        storage.complete(&meta).await.expect("completes");
        let sp = StorageLocation::parse(path(&savepoints), &opts).expect("savepoint dir");
        create_savepoint(&storage.open(id).await.expect("opens"), &sp)
            .await
            .expect("savepoint");
    });
    Fixture {
        job_dir: checkpoints.join(JOB),
        chk_dir: checkpoints.join(JOB).join(format!("chk-{CHECKPOINT}")),
        savepoint: savepoints.join(format!("savepoint-{JOB}-{CHECKPOINT}")),
        checkpoints,
        _dir: dir,
    }
}
