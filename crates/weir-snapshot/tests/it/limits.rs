//! A snapshot file cannot make a reader allocate more than a bound set by
//! its size on disk, whatever its index claims; files the writer produces
//! always stay within that bound, however well their state compresses.

use std::io::Read;

use weir_snapshot::format::{Compression, MAX_EXPANSION, SnapshotEncoder};
use weir_snapshot::{FormatError, FullSnapshotOptions, SnapshotError, SnapshotFile, restore_keyed};
use weir_state::{
    EntryPayload, HeapKeyedStateBackend, KeyedStateBackend, StateEntry, StateId, StateKey,
};
use weir_testing::peak_allocated;
use weir_types::{Attempt, Epoch, KeyGroup, KeyGroupRange, write_varint};

use crate::common::*;

const MIB: u64 = 1 << 20;

fn current_thread() -> tokio::runtime::Runtime {
    // One thread, so every allocation of the read is counted on it.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// One entry of state `count` whose value is `len` zero bytes, compressed
/// as one zstd frame without padding: ~10 KB that expand to `len`.
fn zstd_bomb(len: u64) -> (Vec<u8>, u64) {
    let mut prefix = vec![0, 0, 0, 0];
    write_varint(len, &mut prefix);
    let raw_length = prefix.len() as u64 + len;
    let raw = std::io::Cursor::new(prefix).chain(std::io::repeat(0).take(len));
    let stored = zstd::stream::encode_all(raw, 3).expect("compresses");
    (stored, raw_length)
}

#[test]
fn a_zstd_bomb_is_refused_without_allocating_its_claim() {
    let runtime = current_thread();
    let (stored, raw_length) = zstd_bomb(256 * MIB);
    let header = one_value_header(Compression::Zstd);
    let block = StoredBlock {
        key_group: KeyGroup(0),
        stored,
        raw_length,
        entries: 1,
    };
    let bytes = assemble(&header, &[block]);
    assert!(bytes.len() < 64 << 10, "{} bytes", bytes.len());
    let (storage, handle) = runtime.block_on(in_memory_file(&header, "chk-1/op/0", bytes, 1));
    let mut backend = HeapKeyedStateBackend::new(max(), header.key_group_range).expect("valid");
    let (restored, peak) = peak_allocated(|| {
        runtime.block_on(restore_keyed(
            &mut backend,
            &[handle],
            &*storage.store,
            &storage.root,
        ))
    });
    let err = restored.expect_err("a bomb is refused");
    assert!(
        matches!(
            &err,
            SnapshotError::Format {
                source: FormatError::Corrupt { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("expands more than"), "{err}");
    assert!(peak < 16 * MIB, "restore allocated {peak} bytes");
}

#[test]
fn a_large_key_group_is_read_entry_by_entry() {
    let runtime = current_thread();
    let header = one_value_header(Compression::Zstd);
    let (mut encoder, first) = SnapshotEncoder::start(header.clone());
    let mut bytes = first.to_vec();
    encoder.start_key_group(KeyGroup(0)).expect("in range");
    let value = [7u8; 100];
    let entries = 200_000u64;
    for i in 0..entries {
        let key = i.to_le_bytes();
        let entry = StateEntry {
            state: StateId(0),
            key_group: KeyGroup(0),
            key: &key,
            namespace: b"",
            payload: EntryPayload::Value(&value),
        };
        encoder.push_entry(&entry).expect("valid");
    }
    bytes.extend_from_slice(&encoder.finish_key_group().expect("open").expect("entries"));
    let (tail, summary) = encoder.finish().expect("closed");
    bytes.extend_from_slice(&tail);
    let raw = entries * (4 + 8 + 1 + 101);
    assert!(raw > 20 * MIB);

    let (storage, _) = runtime.block_on(in_memory_file(&header, "chk-1/op/0", bytes, entries));
    let file = runtime
        .block_on(SnapshotFile::open(
            &*storage.store,
            &storage.root,
            "chk-1/op/0",
            None,
        ))
        .expect("opens");
    let mut seen = 0u64;
    let (read, peak) = peak_allocated(|| {
        runtime.block_on(
            file.read_entries(&*storage.store, header.key_group_range, &mut |e| {
                assert_eq!(e.payload, EntryPayload::Value(&value));
                seen += 1;
                Ok(())
            }),
        )
    });
    read.expect("reads");
    assert_eq!(seen, summary.entries);
    // The stored block (a few MiB) and zstd's window, not the 23 MiB raw.
    assert!(peak < raw / 3, "read allocated {peak} bytes for {raw} raw");
}

#[test]
fn state_that_compresses_extremely_well_still_restores() {
    let runtime = current_thread();
    let mut backend = HeapKeyedStateBackend::new(max(), max().full_range()).expect("valid");
    let count = backend.register_state(&descriptors()[0]).expect("new");
    backend.begin_epoch(Epoch(1), Attempt(0)).expect("begin");
    let (kg, key) = key(1);
    let zeros = vec![0u8; 16 * MIB as usize];
    backend
        .put_value(count, StateKey::new(kg, &key), &zeros)
        .expect("put");
    backend.commit_epoch(Epoch(1), Attempt(0)).expect("commit");
    backend.finalize_up_to(Epoch(1)).expect("finalize");
    let frozen = backend.snapshot_sync().expect("final");
    let storage = weir_snapshot::SnapshotStorage {
        store: std::sync::Arc::new(object_store::memory::InMemory::new()),
        root: object_store::path::Path::from("job-1"),
        local: None,
    };
    let future = weir_snapshot::spawn_full_snapshot(
        runtime.handle(),
        frozen,
        &storage,
        "chk-1/op/0",
        FullSnapshotOptions::default(),
    );
    let outcome = runtime.block_on(future).expect("written");
    assert!(outcome.handle.file.size * MAX_EXPANSION >= zeros.len() as u64);
    let handles = [weir_snapshot::KeyedStateHandle::Full(outcome.handle)];
    let mut restored = HeapKeyedStateBackend::new(max(), KeyGroupRange::new(0, 32).expect("valid"))
        .expect("valid");
    runtime
        .block_on(restore_keyed(
            &mut restored,
            &handles,
            &*storage.store,
            &storage.root,
        ))
        .expect("restores");
    let count = restored.register_state(&descriptors()[0]).expect("same");
    let value = restored
        .get_value(count, StateKey::new(kg, &key))
        .expect("get")
        .expect("present");
    assert!(value.len() == zeros.len() && value.iter().all(|&b| b == 0));
}
