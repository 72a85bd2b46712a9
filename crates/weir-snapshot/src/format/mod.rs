//! The canonical, key-group-indexed snapshot file (format version
//! [`FORMAT_VERSION`](weir_types::FORMAT_VERSION)).
//!
//! Any backend writes and restores it, so a heap snapshot restores into
//! RocksDB and any key-group range of it can be read alone (rescaling). The
//! layout is documented in [`layout`]; readers refuse other versions, and
//! no file makes them allocate or work beyond a bound set by its size on
//! disk ([`MAX_EXPANSION`], [`MAX_BLOCK_RAW_LEN`]). This module does no I/O: [`crate::SnapshotFile`] reads files from an object
//! store and the snapshot tasks upload what [`SnapshotEncoder`] produces.

mod block;
mod compression;
mod encoder;
mod header;
pub mod layout;
mod parallel;

pub use compression::{Compression, MAX_BLOCK_RAW_LEN, MAX_EXPANSION};
pub use encoder::{EncodedFile, SnapshotEncoder, encode_frozen};
pub use header::SnapshotHeader;
pub use layout::{BlockInfo, FOOTER_LEN, Footer, SnapshotLayout};

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use weir_state::{EntryPayload, StateEntry, StateId, push_list_item};
    use weir_types::{
        KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor, StateKind, ValueType,
    };

    use super::*;
    use crate::error::FormatError;

    fn header(compression: Compression) -> SnapshotHeader {
        SnapshotHeader {
            max_parallelism: MaxParallelism::new(16).expect("valid"),
            key_group_range: KeyGroupRange::new(4, 12).expect("valid"),
            descriptors: vec![
                StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
                StateDescriptor::new("seen", StateKind::List, ValueType::Utf8).expect("valid"),
                StateDescriptor::map("by", ValueType::Utf8, ValueType::Int64).expect("valid"),
            ],
            key_types: Some(vec![ValueType::Int64]),
            compression,
        }
    }

    /// A file with entries in key groups 5, 6 and 9 (7 and 8 stay empty).
    fn file(compression: Compression) -> (Vec<u8>, EncodedFile) {
        let (mut enc, first) = SnapshotEncoder::start(header(compression));
        let mut out = first.to_vec();
        let mut list = Vec::new();
        push_list_item(b"x", &mut list);
        for kg in 5..10u16 {
            let key_group = KeyGroup(kg);
            enc.start_key_group(key_group).expect("ascending");
            if !(7..9).contains(&kg) {
                for i in 0..20u8 {
                    let key = [i, kg as u8];
                    for (state, payload) in [
                        (0, EntryPayload::Value(&key[..])),
                        (1, EntryPayload::List(&list)),
                        (
                            2,
                            EntryPayload::MapEntry {
                                user_key: b"u",
                                value: &key[..],
                            },
                        ),
                    ] {
                        let entry = StateEntry {
                            state: StateId(state),
                            key_group,
                            key: &key,
                            namespace: b"",
                            payload,
                        };
                        enc.push_entry(&entry).expect("valid entry");
                    }
                }
            }
            if let Some(block) = enc.finish_key_group().expect("open") {
                out.extend_from_slice(&block);
            }
        }
        let (tail, summary) = enc.finish().expect("closed");
        out.extend_from_slice(&tail);
        (out, summary)
    }

    /// Reads every block of a file held in memory.
    fn read_all(bytes: &[u8]) -> Result<u64, FormatError> {
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

    #[test]
    fn files_round_trip_in_every_compression() {
        for c in [Compression::None, Compression::Zstd, Compression::Lz4] {
            let (bytes, summary) = file(c);
            assert_eq!(summary.size, bytes.len() as u64);
            assert_eq!(summary.crc32, crc32fast::hash(&bytes));
            assert_eq!((summary.entries, summary.key_groups), (180, 3));
            assert_eq!(read_all(&bytes).expect("valid file"), 180);
            let layout = SnapshotLayout::from_file(&bytes).expect("valid");
            assert_eq!(layout.header(), &header(c));
            let some = layout.blocks_in(KeyGroupRange::new(6, 9).expect("valid"));
            assert_eq!(
                some.iter().map(|b| b.key_group.0).collect::<Vec<_>>(),
                vec![6]
            );
            assert!(
                layout
                    .blocks_in(KeyGroupRange::new(7, 9).expect("valid"))
                    .is_empty()
            );
        }
    }

    #[test]
    fn encoder_rejects_misuse() {
        let (mut enc, _) = SnapshotEncoder::start(header(Compression::None));
        assert!(
            enc.start_key_group(KeyGroup(3)).is_err(),
            "outside the range"
        );
        enc.start_key_group(KeyGroup(6)).expect("valid");
        let entry = StateEntry {
            state: StateId(1),
            key_group: KeyGroup(6),
            key: b"k",
            namespace: b"",
            payload: EntryPayload::Value(b"v"),
        };
        assert!(
            enc.push_entry(&entry).is_err(),
            "value payload on a list state"
        );
        let other = StateEntry {
            key_group: KeyGroup(7),
            state: StateId(0),
            ..entry
        };
        assert!(
            enc.push_entry(&other).is_err(),
            "entry of another key group"
        );
        assert!(enc.finish_key_group().expect("open").is_none());
        assert!(enc.start_key_group(KeyGroup(6)).is_err(), "not ascending");
    }

    #[test]
    fn damage_gives_typed_errors() {
        let (bytes, _) = file(Compression::Zstd);
        let n = bytes.len();
        let truncated = read_all(&bytes[..n - 1]).expect_err("truncated");
        assert!(
            matches!(truncated, FormatError::BadMagic { .. }),
            "{truncated}"
        );
        let mut flipped = bytes.clone();
        flipped[n / 2] ^= 0x40;
        let err = read_all(&flipped).expect_err("corrupt");
        assert!(matches!(err, FormatError::ChecksumMismatch { .. }), "{err}");

        let mut future = bytes.clone();
        let version = (weir_types::FORMAT_VERSION + 1).to_le_bytes();
        future[n - 12..n - 8].copy_from_slice(&version);
        let err = read_all(&future).expect_err("newer version");
        assert!(
            matches!(err, FormatError::UnsupportedVersion { found: 2, .. }),
            "{err}"
        );
        assert!(read_all(b"short").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn arbitrary_blocks_never_panic(
            compression in prop_oneof![Just(Compression::None), Just(Compression::Zstd), Just(Compression::Lz4)],
            stored in proptest::collection::vec(any::<u8>(), 0..256),
            raw_length in prop_oneof![0u64..1024, Just(u64::MAX)],
            entries in 0u64..8,
        ) {
            // Bytes that got past the checksums still only give errors.
            let (bytes, _) = file(compression);
            let layout = SnapshotLayout::from_file(&bytes).expect("valid");
            let info = BlockInfo {
                key_group: KeyGroup(5),
                offset: 0,
                length: stored.len() as u64,
                raw_length,
                entries,
                crc32: crc32fast::hash(&stored),
            };
            let _ = layout.read_block(&info, &stored, &mut |_| Ok::<_, FormatError>(()));
            let _ = SnapshotHeader::decode(&stored);
        }
    }
}
