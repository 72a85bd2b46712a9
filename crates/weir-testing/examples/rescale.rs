//! The state engine end to end: fill 1,000,000 keys into two heap subtasks,
//! snapshot them (synchronous part, then the asynchronous part writing
//! key-group-indexed files into checkpoint storage), complete checkpoint 1
//! (`_metadata`), copy it into a self-contained savepoint, restore the
//! savepoint at parallelism 3 into both the heap and the RocksDB backend, and
//! check every key landed in exactly the subtask that owns its key group, with
//! its value and list intact.
//!
//! Run: `cargo run --release -p weir-testing --example rescale [-- KEYS [OUT_DIR]]`;
//! the checkpoint and the savepoint stay in OUT_DIR (default: a temporary
//! directory) for `weir savepoint info OUT_DIR/savepoints/savepoint-demo-1`.

use std::error::Error;
use std::time::Instant;

use weir_checkpoint::{
    CheckpointKind, CheckpointMetadata, CheckpointStorage, OperatorStateMeta, StorageLocation,
    StorageOptions, SubtaskStateMeta, create_savepoint, layout,
};
use weir_snapshot::{FullSnapshotOptions, KeyedStateHandle, restore_keyed, spawn_full_snapshot};
use weir_state::{
    HeapKeyedStateBackend, KeyedStateBackend, StateError, StateId, StateKey, list_items,
    push_list_item,
};
use weir_state_rocksdb::{RocksDbKeyedStateBackend, RocksDbOptions};
use weir_types::{
    Attempt, CheckpointId, Epoch, JobId, KeyGroup, KeyGroupRange, MaxParallelism, OperatorUid,
    StateDescriptor, StateKind, SubtaskIndex, Value, ValueType, decode_value, encode_key,
    encode_value, key_group_of,
};

const OLD_PARALLELISM: u32 = 2;
const NEW_PARALLELISM: u32 = 3;

struct Key {
    group: KeyGroup,
    bytes: Vec<u8>,
}

fn key(i: i64, max: MaxParallelism) -> Result<Key, Box<dyn Error>> {
    let cols = [Value::Int64(i)];
    let mut bytes = Vec::with_capacity(9);
    encode_key(&cols, &[ValueType::Int64], &mut bytes)?;
    Ok(Key {
        group: key_group_of(&cols, max),
        bytes,
    })
}

fn int(v: i64) -> Result<Vec<u8>, Box<dyn Error>> {
    let mut out = Vec::with_capacity(8);
    encode_value(&Value::Int64(v), &ValueType::Int64, &mut out)?;
    Ok(out)
}

fn descriptors() -> Result<[StateDescriptor; 2], Box<dyn Error>> {
    Ok([
        StateDescriptor::new("sum", StateKind::Value, ValueType::Int64)?,
        StateDescriptor::new("recent", StateKind::List, ValueType::Int64)?,
    ])
}

fn ranges(max: MaxParallelism, parallelism: u32) -> Result<Vec<KeyGroupRange>, Box<dyn Error>> {
    (0..parallelism)
        .map(|s| {
            Ok(KeyGroupRange::for_subtask(
                max,
                parallelism,
                SubtaskIndex(s),
            )?)
        })
        .collect()
}

/// Checks every key against the new subtasks: present with the right data in
/// its owner, refused by every other subtask.
fn verify(
    backends: &mut [Box<dyn KeyedStateBackend>],
    keys: i64,
    max: MaxParallelism,
) -> Result<(), Box<dyn Error>> {
    let [sum, recent] = descriptors()?;
    let ids: Vec<(StateId, StateId)> = backends
        .iter_mut()
        .map(|b| Ok((b.register_state(&sum)?, b.register_state(&recent)?)))
        .collect::<Result<_, StateError>>()?;
    for i in 0..keys {
        let k = key(i, max)?;
        let owner = max.subtask_of(k.group, NEW_PARALLELISM)?.0 as usize;
        for (s, backend) in backends.iter_mut().enumerate() {
            let at = StateKey::new(k.group, &k.bytes);
            let value = backend.get_value(ids[s].0, at);
            if s != owner {
                if !matches!(value, Err(StateError::KeyGroupOutOfRange { .. })) {
                    return Err(
                        format!("key {i} is readable from subtask {s}, not its owner").into(),
                    );
                }
                continue;
            }
            let value = value?.ok_or_else(|| format!("key {i} lost its value"))?;
            if decode_value(&value, &ValueType::Int64)? != Value::Int64(i * 3) {
                return Err(format!("key {i} has a wrong value").into());
            }
            let list = backend
                .get_list(ids[s].1, at)?
                .ok_or_else(|| format!("key {i} lost its list"))?;
            let items: Vec<Value> = list_items(&list)
                .map(|item| {
                    let item = item.ok_or("corrupt list payload")?;
                    Ok(decode_value(item, &ValueType::Int64)?)
                })
                .collect::<Result<_, Box<dyn Error>>>()?;
            if items != [Value::Int64(i), Value::Int64(-i)] {
                return Err(format!("key {i} has a wrong list {items:?}").into());
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let keys: i64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 1_000_000,
    };
    let max = MaxParallelism::new(128)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let temp = tempfile::tempdir()?;
    let out = match std::env::args().nth(2) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => temp.path().to_path_buf(),
    };
    if out.join("savepoints").exists() {
        return Err(format!(
            "{} already holds a savepoint; remove it or pick another directory",
            out.display()
        )
        .into());
    }
    let options = StorageOptions::default();
    let checkpoints = StorageLocation::parse(&out.join("checkpoints").to_string_lossy(), &options)?;
    let checkpoint_storage = CheckpointStorage::filesystem(&checkpoints, JobId::new("demo")?)?;
    let storage = checkpoint_storage.state_storage();
    let uid = OperatorUid::new("average")?;
    let checkpoint = CheckpointId(1);
    println!(
        "weir state engine: {keys} keys, max parallelism {max}, parallelism {OLD_PARALLELISM} -> {NEW_PARALLELISM}"
    );

    // Fill two heap subtasks, each with the keys of its key groups.
    let started = Instant::now();
    let mut old: Vec<HeapKeyedStateBackend> = ranges(max, OLD_PARALLELISM)?
        .into_iter()
        .map(|r| HeapKeyedStateBackend::new(max, r))
        .collect::<Result<_, _>>()?;
    let [sum, recent] = descriptors()?;
    let mut ids = Vec::new();
    for b in &mut old {
        ids.push((b.register_state(&sum)?, b.register_state(&recent)?));
        b.begin_epoch(Epoch(1), Attempt(0))?;
    }
    for i in 0..keys {
        let k = key(i, max)?;
        let s = max.subtask_of(k.group, OLD_PARALLELISM)?.0 as usize;
        let at = StateKey::new(k.group, &k.bytes);
        old[s].put_value(ids[s].0, at, &int(i * 3)?)?;
        let mut items = Vec::new();
        push_list_item(&int(i)?, &mut items);
        push_list_item(&int(-i)?, &mut items);
        old[s].append_list(ids[s].1, at, &items)?;
    }
    for b in &mut old {
        b.commit_epoch(Epoch(1), Attempt(0))?;
        b.finalize_up_to(Epoch(1))?;
    }
    println!("filled {keys} keys x 2 states in {:.2?}", started.elapsed());

    // Snapshot: the synchronous part per subtask, then the asynchronous part.
    let mut subtasks = Vec::new();
    for (s, b) in old.iter_mut().enumerate() {
        let sync_started = Instant::now();
        let frozen = b.snapshot_sync()?;
        let sync = sync_started.elapsed();
        let options = FullSnapshotOptions {
            key_types: Some(vec![ValueType::Int64]),
            ..FullSnapshotOptions::default()
        };
        let outcome = runtime.block_on(spawn_full_snapshot(
            runtime.handle(),
            frozen,
            &storage,
            &format!(
                "{}/keyed",
                layout::subtask_dir(checkpoint, &uid, SubtaskIndex(s as u32))
            ),
            options,
        ))?;
        println!(
            "subtask {s}/{OLD_PARALLELISM} {}: sync part {sync:.2?}, async part {:.2?}, {} entries, {} bytes (zstd per key group)",
            outcome.handle.key_group_range,
            outcome.metrics.async_duration,
            outcome.handle.entries,
            outcome.handle.file.size,
        );
        subtasks.push(SubtaskStateMeta {
            subtask: SubtaskIndex(s as u32),
            keyed: Some(KeyedStateHandle::Full(outcome.handle)),
            operator_state: None,
        });
    }
    drop(old);

    // Complete checkpoint 1, then copy it into a self-contained savepoint.
    let mut metadata = CheckpointMetadata::new(
        JobId::new("demo")?,
        checkpoint,
        CheckpointKind::Checkpoint,
        Epoch(1),
    );
    metadata.timestamp_millis = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    metadata.operators.push(OperatorStateMeta {
        uid: uid.clone(),
        parallelism: OLD_PARALLELISM,
        max_parallelism: max,
        key_types: Some(vec![ValueType::Int64]),
        states: descriptors()?.to_vec(),
        subtasks,
    });
    let savepoint = runtime.block_on(async {
        checkpoint_storage.complete(&metadata).await?;
        let savepoints =
            StorageLocation::parse(&out.join("savepoints").to_string_lossy(), &options)?;
        create_savepoint(&checkpoint_storage.open(checkpoint).await?, &savepoints).await
    })?;
    println!(
        "checkpoint 1 complete; savepoint at {}",
        savepoint.base().url()
    );
    let handles: Vec<KeyedStateHandle> = savepoint.metadata().operators[0]
        .subtasks
        .iter()
        .filter_map(|s| s.keyed.clone())
        .collect();
    let savepoint_storage = runtime.block_on(savepoint.state_storage())?;

    // Restore at parallelism 3, into heap and into RocksDB.
    for backend_name in ["heap", "rocksdb"] {
        let started = Instant::now();
        let mut restored: Vec<Box<dyn KeyedStateBackend>> = Vec::new();
        for (s, range) in ranges(max, NEW_PARALLELISM)?.into_iter().enumerate() {
            let mut backend: Box<dyn KeyedStateBackend> = match backend_name {
                "heap" => Box::new(HeapKeyedStateBackend::new(max, range)?),
                _ => Box::new(RocksDbKeyedStateBackend::open(RocksDbOptions::new(
                    temp.path().join(format!("rocksdb-{s}")),
                    max,
                    range,
                ))?),
            };
            let stats = runtime.block_on(restore_keyed(
                backend.as_mut(),
                &handles,
                &*savepoint_storage.store,
                &savepoint_storage.root,
            ))?;
            println!(
                "restored subtask {s}/{NEW_PARALLELISM} {range} into {backend_name}: {} entries from {} key groups of {} files",
                stats.entries, stats.key_groups, stats.files_read
            );
            restored.push(backend);
        }
        let restore_time = started.elapsed();
        verify(&mut restored, keys, max)?;
        println!(
            "checked {keys} keys on {backend_name} (restore {restore_time:.2?}): every value and list is in exactly the subtask owning its key group"
        );
    }
    println!("ok");
    Ok(())
}
