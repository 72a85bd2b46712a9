//! Fuzzing the `_metadata` reader with arbitrary and mutated bytes: it
//! returns an error or valid metadata, never panics, and never allocates
//! more than a bound set by the file's size, whatever lengths it declares.
//!
//! `WEIR_FUZZ_CASES` sets the number of cases per property (see
//! [`fuzz_cases`]); raise it for a longer run.

use std::sync::OnceLock;

use proptest::prelude::*;
use weir_checkpoint::{
    CheckpointStorage, InlineFile, StorageLocation, StorageOptions, decode_metadata,
    encode_metadata,
};
use weir_testing::{Mutation, fuzz_cases, peak_allocated};
use weir_types::OperatorUid;

use crate::common::{incremental_checkpoint, job};

/// A valid `_metadata`: an incremental handle with shared and private
/// files, sources, sinks and an inline file.
fn valid() -> &'static [u8] {
    static VALID: OnceLock<Vec<u8>> = OnceLock::new();
    VALID.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let location =
            StorageLocation::parse("memory://fuzz", &StorageOptions::default()).expect("memory");
        let storage = CheckpointStorage::filesystem(&location, job()).expect("storage");
        let mut meta = runtime.block_on(incremental_checkpoint(&storage, 5, &["a.sst", "b.sst"]));
        meta.inline.insert(
            "chk-5/avg/0/operator".to_owned(),
            InlineFile(bytes::Bytes::from_static(b"inline state")),
        );
        meta.sinks.insert(
            OperatorUid::new("sink").expect("valid"),
            serde_json::json!({"staged": [1, 2, 3], "txn": "t-5"}),
        );
        encode_metadata(&meta).expect("encodes")
    })
}

/// Decodes `bytes`, checking the allocation bound: parsing JSON costs a
/// small multiple of its length, and nothing follows declared lengths.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (decoded, peak) = peak_allocated(|| decode_metadata(bytes, "fuzz/_metadata"));
    let allowed = (64 << 10) + 64 * bytes.len() as u64;
    prop_assert!(
        peak <= allowed,
        "{peak} bytes for a {}-byte file",
        bytes.len()
    );
    if let Ok(meta) = decoded {
        // Whatever decodes is consistent and encodes again.
        prop_assert!(meta.validate().is_ok());
        prop_assert!(encode_metadata(&meta).is_ok());
    }
    Ok(())
}

/// `body` behind a header whose checksum matches and whose length is
/// `declared` (the real length when `None`).
fn with_header(body: &[u8], declared: Option<u64>) -> Vec<u8> {
    let len = declared.unwrap_or(body.len() as u64);
    let mut out = format!("WEIRMETA 1 {:08x} {len}\n", crc32fast::hash(body)).into_bytes();
    out.extend_from_slice(body);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

    #[test]
    fn arbitrary_bytes_are_errors(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        check(&bytes)?;
    }

    #[test]
    fn mutated_files_are_errors_or_metadata(mutation in Mutation::strategy(6)) {
        check(&mutation.apply(valid()))?;
    }

    #[test]
    fn mutated_bodies_past_the_checksum_are_errors_or_metadata(
        mutation in Mutation::strategy(6),
        declared in proptest::option::of(prop_oneof![
            Just(u64::MAX),
            Just(u64::MAX - 1),
            any::<u64>(),
            0u64..4096,
        ]),
    ) {
        let bytes = valid();
        let newline = bytes.iter().position(|&b| b == b'\n').expect("header line");
        let body = mutation.apply(&bytes[newline + 1..]);
        check(&with_header(&body, declared))?;
    }
}

#[test]
fn the_valid_file_decodes() {
    let meta = decode_metadata(valid(), "fuzz/_metadata").expect("valid");
    assert_eq!(meta.inline.len(), 1);
}
