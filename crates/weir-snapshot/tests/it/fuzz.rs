//! Fuzzing the snapshot file reader with arbitrary and mutated bytes: it
//! returns an error or the entries, never panics, and never allocates more
//! than a bound set by the file's size, whatever the file claims.
//!
//! `WEIR_FUZZ_CASES` sets the number of cases per property (see
//! [`fuzz_cases`]); raise it for a longer run.

use std::sync::OnceLock;

use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use proptest::prelude::*;
use weir_snapshot::format::{Compression, SnapshotHeader, SnapshotLayout, encode_frozen};
use weir_snapshot::{FormatError, SnapshotFile};
use weir_state::KeyedStateBackend;
use weir_testing::{Mutation, fuzz_cases, peak_allocated};
use weir_types::{KeyGroup, KeyGroupRange};

use crate::common::{StoredBlock, assemble, descriptors, filled_backend, max, one_value_header};

/// What reading `len` bytes may allocate: zstd's decoder state and window
/// (at most 8 MiB whatever the input), plus what the limits let each
/// stored byte expand to, with room for bookkeeping.
fn allowed(len: usize) -> u64 {
    (16 << 20) + 1100 * len as u64
}

/// The header of assembled files: every kind of state, key groups 2..10.
fn header(compression: Compression) -> SnapshotHeader {
    SnapshotHeader {
        descriptors: descriptors(),
        key_group_range: KeyGroupRange::new(2, 10).expect("valid"),
        ..one_value_header(compression)
    }
}

fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Zstd),
        Just(Compression::Lz4)
    ]
}

/// A valid file of every kind of state, written from a heap backend.
struct ValidFile {
    compression: Compression,
    bytes: Vec<u8>,
    entries: u64,
}

fn valid_file(compression: Compression) -> &'static ValidFile {
    static FILES: OnceLock<Vec<ValidFile>> = OnceLock::new();
    let files = FILES.get_or_init(|| {
        [Compression::None, Compression::Zstd, Compression::Lz4]
            .into_iter()
            .map(|compression| {
                let mut backend = filled_backend(4, 1);
                let frozen = backend.snapshot_sync().expect("all epochs final");
                let header = SnapshotHeader {
                    max_parallelism: max(),
                    key_group_range: frozen.key_group_range(),
                    descriptors: frozen.descriptors().to_vec(),
                    key_types: None,
                    compression,
                };
                let encode = |threads| {
                    let mut bytes = Vec::new();
                    let summary = encode_frozen(&*frozen, header.clone(), threads, &mut |chunk| {
                        bytes.extend_from_slice(&chunk);
                        Ok(())
                    })
                    .expect("encodes");
                    (bytes, summary)
                };
                let (bytes, summary) = encode(1);
                // Key groups encoded on several threads make the same file.
                assert_eq!(encode(3), (bytes.clone(), summary));
                ValidFile {
                    compression,
                    bytes,
                    entries: summary.entries,
                }
            })
            .collect()
    });
    files
        .iter()
        .find(|f| f.compression == compression)
        .expect("every mode")
}

/// Stored forms of raw payloads worth compressing (zeros, a bomb for zstd;
/// entry-shaped bytes; noise), each compressed without the writer's
/// padding, as a crafted file would hold them, and stored as is.
fn stored_payloads() -> &'static [Vec<u8>] {
    static STORED: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    STORED.get_or_init(|| {
        let entry = [0u8, 0, 1, b'k', 0, 1, b'v'];
        let raws = [
            vec![0; 32 << 20],
            entry.repeat(1 << 16),
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect(),
        ];
        raws.iter()
            .flat_map(|raw| {
                [
                    zstd::bulk::compress(raw, 3).expect("compresses"),
                    lz4_flex::block::compress(raw),
                    raw[..raw.len().min(4096)].to_vec(),
                ]
            })
            .collect()
    })
}

/// A stored block: a stored payload (whole or cut) or arbitrary bytes.
fn stored_block() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<prop::sample::Index>()).prop_map(|(which, cut)| {
            let stored = which.get(stored_payloads());
            let keep = cut.index(stored.len() + 1).max(stored.len() / 2);
            stored[..keep].to_vec()
        }),
        proptest::collection::vec(any::<u8>(), 0..512),
    ]
}

/// A claimed length: small, near the truth of a payload, or absurd.
fn claim() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..64,
        Just(7 << 16),
        Just(32 << 20),
        Just(u64::MAX),
        any::<u64>()
    ]
}

/// Every entry of a file held in memory, through the format layer.
fn read_in_memory(bytes: &[u8]) -> Result<u64, FormatError> {
    let layout = SnapshotLayout::from_file(bytes)?;
    let mut entries = 0;
    for info in layout.blocks() {
        layout.read_block(info, info.stored_in(bytes, 0), &mut |_| {
            entries += 1;
            Ok::<_, FormatError>(())
        })?;
    }
    Ok(entries)
}

/// Every entry of a file, through an object store as a restore reads it.
fn read_from_store(bytes: &[u8]) -> Result<u64, weir_snapshot::SnapshotError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let store = InMemory::new();
    runtime.block_on(async {
        store
            .put(&Path::from("f"), bytes.to_vec().into())
            .await
            .expect("in-memory put");
        let file = SnapshotFile::open(&store, &Path::default(), "f", None).await?;
        let range = file.layout().header().key_group_range;
        let mut entries = 0;
        file.read_entries(&store, range, &mut |_| {
            entries += 1;
            Ok(())
        })
        .await?;
        Ok(entries)
    })
}

/// Reads `bytes` both ways and checks the bound; both ways agree.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (in_memory, peak) = peak_allocated(|| read_in_memory(bytes));
    prop_assert!(
        peak <= allowed(bytes.len()),
        "{peak} bytes for a {}-byte file",
        bytes.len()
    );
    let (from_store, peak) = peak_allocated(|| read_from_store(bytes));
    // The store holds a copy of the file.
    prop_assert!(
        peak <= allowed(bytes.len()) + 2 * bytes.len() as u64,
        "{peak} bytes"
    );
    prop_assert_eq!(in_memory.ok(), from_store.ok());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

    #[test]
    fn arbitrary_bytes_are_errors(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check(&bytes)?;
    }

    #[test]
    fn mutated_files_are_errors_or_entries(
        compression in compression(),
        mutation in Mutation::strategy(6),
    ) {
        check(&mutation.apply(&valid_file(compression).bytes))?;
    }

    #[test]
    fn blocks_past_their_checksums_never_allocate_their_claims(
        compression in compression(),
        blocks in proptest::collection::vec((stored_block(), claim(), claim()), 1..3),
    ) {
        // Checksums match, so every claim reaches the decompressors.
        let blocks: Vec<_> = blocks
            .into_iter()
            .enumerate()
            .map(|(i, (stored, raw_length, entries))| StoredBlock {
                key_group: KeyGroup(3 + i as u16),
                stored,
                raw_length,
                entries,
            })
            .collect();
        check(&assemble(&header(compression), &blocks))?;
    }
}

#[test]
fn valid_files_read_in_full() {
    for c in [Compression::None, Compression::Zstd, Compression::Lz4] {
        let file = valid_file(c);
        assert!(file.entries > 200, "{}", file.entries);
        assert_eq!(read_in_memory(&file.bytes).expect("valid"), file.entries);
        assert_eq!(read_from_store(&file.bytes).expect("valid"), file.entries);
    }
}
