//! Helpers shared by the integration tests: writing state files the way a
//! subtask does and building the metadata a coordinator would.

use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::PutPayload;
use weir_checkpoint::{
    CheckpointKind, CheckpointMetadata, CheckpointStorage, OperatorStateMeta, SubtaskStateMeta,
    layout,
};
use weir_snapshot::{
    FullSnapshotHandle, IncrementalSnapshotHandle, KeyedStateHandle, SharedStateFile, StateFile,
};
use weir_types::{
    CheckpointId, Epoch, JobId, KeyGroupRange, MaxParallelism, OperatorUid, SubtaskIndex, ValueType,
};

pub fn job() -> JobId {
    JobId::new("orders").expect("valid")
}

pub fn uid() -> OperatorUid {
    OperatorUid::new("avg").expect("valid")
}

pub fn max() -> MaxParallelism {
    MaxParallelism::new(128).expect("valid")
}

/// Writes `bytes` at `relative` (to the job directory) and returns its handle.
pub async fn write_file(storage: &CheckpointStorage, relative: &str, bytes: &[u8]) -> StateFile {
    let target = storage.state_storage();
    let path = layout::join(&target.root, relative).expect("valid path");
    target
        .store
        .put(&path, PutPayload::from(Bytes::copy_from_slice(bytes)))
        .await
        .expect("put");
    StateFile {
        path: relative.to_owned(),
        size: bytes.len() as u64,
        crc32: crc32fast::hash(bytes),
    }
}

/// The bytes subtask `i` of checkpoint `id` stores.
pub fn content(id: u64, subtask: u32) -> Vec<u8> {
    format!("state of subtask {subtask} at checkpoint {id}").into_bytes()
}

/// Writes full snapshots of `parallelism` subtasks of operator `avg` for
/// checkpoint `id` and returns the metadata that completes it.
pub async fn full_checkpoint(
    storage: &CheckpointStorage,
    id: u64,
    parallelism: u32,
) -> CheckpointMetadata {
    let mut subtasks = Vec::new();
    for i in 0..parallelism {
        let dir = layout::subtask_dir(CheckpointId(id), &uid(), SubtaskIndex(i));
        let file = write_file(storage, &format!("{dir}/keyed"), &content(id, i)).await;
        subtasks.push(SubtaskStateMeta {
            subtask: SubtaskIndex(i),
            keyed: Some(KeyedStateHandle::Full(FullSnapshotHandle {
                key_group_range: KeyGroupRange::for_subtask(max(), parallelism, SubtaskIndex(i))
                    .expect("valid"),
                file,
                entries: 1,
            })),
            operator_state: None,
        });
    }
    metadata(id, parallelism, subtasks)
}

/// Writes an incremental checkpoint `id` of one subtask that references the
/// shared files `shared` (uploading those not present yet) plus one private file.
pub async fn incremental_checkpoint(
    storage: &CheckpointStorage,
    id: u64,
    shared: &[&str],
) -> CheckpointMetadata {
    let mut files = Vec::new();
    for name in shared {
        let relative = format!("{}/{name}", layout::shared_dir(&uid(), SubtaskIndex(0)));
        files.push(SharedStateFile {
            local_name: (*name).to_owned(),
            file: write_file(storage, &relative, name.as_bytes()).await,
        });
    }
    let dir = layout::subtask_dir(CheckpointId(id), &uid(), SubtaskIndex(0));
    let manifest = write_file(storage, &format!("{dir}/MANIFEST"), &content(id, 0)).await;
    let handle = KeyedStateHandle::Incremental(IncrementalSnapshotHandle {
        key_group_range: max().full_range(),
        max_parallelism: max(),
        descriptors: vec![],
        shared: files,
        private: vec![SharedStateFile {
            local_name: "MANIFEST-000001".into(),
            file: manifest,
        }],
    });
    let subtask = SubtaskStateMeta {
        subtask: SubtaskIndex(0),
        keyed: Some(handle),
        operator_state: None,
    };
    metadata(id, 1, vec![subtask])
}

fn metadata(id: u64, parallelism: u32, subtasks: Vec<SubtaskStateMeta>) -> CheckpointMetadata {
    let mut meta = CheckpointMetadata::new(
        job(),
        CheckpointId(id),
        CheckpointKind::Checkpoint,
        Epoch(id),
    );
    meta.operators.push(OperatorStateMeta {
        uid: uid(),
        parallelism,
        max_parallelism: max(),
        key_types: Some(vec![ValueType::Int64]),
        states: vec![],
        subtasks,
    });
    meta.sources.insert(
        OperatorUid::new("source").expect("valid"),
        serde_json::json!({ "offset": id * 100 }),
    );
    meta
}

/// Every object path under `dir` on the local file system, relative, sorted.
pub fn local_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).expect("under dir");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

/// Rewrites the local `_metadata` at `path` with its JSON body edited by
/// `edit` and a header that matches: a hand-edited file, which the writer
/// would refuse to produce.
pub fn edit_metadata(path: &std::path::Path, edit: impl FnOnce(String) -> String) {
    let bytes = std::fs::read(path).expect("readable metadata");
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .expect("a header line");
    let body = String::from_utf8(bytes[newline + 1..].to_vec()).expect("a JSON body");
    let edited = edit(body.clone());
    assert_ne!(edited, body, "the edit changes something");
    let mut out = format!(
        "WEIRMETA 1 {:08x} {}\n",
        crc32fast::hash(edited.as_bytes()),
        edited.len()
    )
    .into_bytes();
    out.extend_from_slice(edited.as_bytes());
    std::fs::write(path, out).expect("writable metadata");
}
