//! The bytes of `_metadata`: one text header line, then the body.
//!
//! ```text
//! WEIRMETA <format version> <crc32 of body, 8 hex digits> <body length>\n
//! <body: the metadata as JSON>
//! ```
//!
//! The header comes first so a reader can tell "not a checkpoint", "written
//! by a newer Weir", "truncated" and "corrupt" apart before parsing anything.
//! The decoder dispatches on the version; version 1 is the only one so far.
//! Where the bytes are stored is `storage`'s business, not this module's.

use weir_types::FORMAT_VERSION;

use super::CheckpointMetadata;
use crate::error::{CheckpointError, MetadataProblem, Result};

/// The first bytes of every `_metadata` file.
pub const METADATA_MAGIC: &[u8] = b"WEIRMETA";

/// A header is far shorter than this; a longer first line is not a header.
const MAX_HEADER_LEN: usize = 64;

/// Encodes metadata for writing, after checking it is consistent.
pub fn encode_metadata(meta: &CheckpointMetadata) -> Result<Vec<u8>> {
    if meta.format_version != FORMAT_VERSION {
        return Err(CheckpointError::InconsistentMetadata {
            checkpoint: meta.checkpoint_id,
            problem: MetadataProblem::VersionMismatch {
                header: FORMAT_VERSION,
                body: meta.format_version,
            },
        });
    }
    meta.validate()?;
    let body = serde_json::to_vec(meta).map_err(|source| CheckpointError::Encode {
        checkpoint: meta.checkpoint_id,
        source,
    })?;
    let crc = crc32fast::hash(&body);
    let magic = String::from_utf8_lossy(METADATA_MAGIC);
    let mut out = format!("{magic} {FORMAT_VERSION} {crc:08x} {}\n", body.len()).into_bytes();
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes and validates `_metadata` bytes; `location` names them in errors.
///
/// Never panics: every malformed input is a typed error.
pub fn decode_metadata(bytes: &[u8], location: &str) -> Result<CheckpointMetadata> {
    let header = Header::parse(bytes, location)?;
    if header.version > FORMAT_VERSION {
        return Err(CheckpointError::NewerVersion {
            location: location.to_owned(),
            found: header.version,
            supported: FORMAT_VERSION,
        });
    }
    let body = &bytes[header.len..];
    let announced = header.body_len;
    // Lengths come from the file: a sum that does not fit is no metadata.
    let expected = u64::try_from(header.len)
        .ok()
        .and_then(|len| len.checked_add(announced))
        .ok_or_else(|| not_metadata(location, "its header announces an impossible length"))?;
    let found = body.len() as u64;
    if found < announced {
        return Err(CheckpointError::Truncated {
            location: location.to_owned(),
            expected,
            found: bytes.len() as u64,
        });
    }
    if found > announced {
        return Err(not_metadata(location, "bytes follow the end of the body"));
    }
    let actual = crc32fast::hash(body);
    if actual != header.crc32 {
        return Err(CheckpointError::ChecksumMismatch {
            location: location.to_owned(),
            expected: header.crc32,
            actual,
        });
    }
    let meta: CheckpointMetadata = match header.version {
        1 => serde_json::from_slice(body).map_err(|source| CheckpointError::MalformedMetadata {
            location: location.to_owned(),
            source,
        })?,
        _ => return Err(not_metadata(location, "format version 0 does not exist")),
    };
    if meta.format_version != header.version {
        return Err(CheckpointError::InconsistentMetadata {
            checkpoint: meta.checkpoint_id,
            problem: MetadataProblem::VersionMismatch {
                header: header.version,
                body: meta.format_version,
            },
        });
    }
    meta.validate()?;
    Ok(meta)
}

/// The parsed header line.
struct Header {
    version: u32,
    crc32: u32,
    body_len: u64,
    /// Length of the header line including its newline.
    len: usize,
}

impl Header {
    fn parse(bytes: &[u8], location: &str) -> Result<Self> {
        // `WEIRMETA ` must open the file; a shorter file that is a prefix of
        // it was cut off while being written.
        let opening = [METADATA_MAGIC, b" "].concat();
        let shared = bytes.len().min(opening.len());
        if bytes[..shared] != opening[..shared] {
            return Err(not_metadata(location, "it does not start with WEIRMETA"));
        }
        let Some(newline) = bytes.iter().take(MAX_HEADER_LEN).position(|&b| b == b'\n') else {
            if bytes.len() < MAX_HEADER_LEN {
                return Err(CheckpointError::Truncated {
                    location: location.to_owned(),
                    expected: bytes.len() as u64 + 1,
                    found: bytes.len() as u64,
                });
            }
            return Err(not_metadata(location, "its header line does not end"));
        };
        let malformed = || not_metadata(location, "its header line is malformed");
        let line = std::str::from_utf8(&bytes[opening.len()..newline]).map_err(|_| malformed())?;
        let mut fields = line.split(' ');
        let (Some(version), Some(crc32), Some(body_len), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(malformed());
        };
        if crc32.len() != 8 {
            return Err(malformed());
        }
        Ok(Self {
            version: version.parse().map_err(|_| malformed())?,
            crc32: u32::from_str_radix(crc32, 16).map_err(|_| malformed())?,
            body_len: body_len.parse().map_err(|_| malformed())?,
            len: newline + 1,
        })
    }
}

fn not_metadata(location: &str, reason: &'static str) -> CheckpointError {
    CheckpointError::NotMetadata {
        location: location.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::metadata::InlineFile;
    use crate::metadata::tests::sample;

    fn decode(bytes: &[u8]) -> Result<CheckpointMetadata> {
        decode_metadata(bytes, "test/_metadata")
    }

    #[test]
    fn round_trips_with_inline_files() {
        let mut meta = sample(4, 3);
        meta.inline.insert(
            "chk-4/avg/0/keyed".into(),
            InlineFile(vec![0, 1, 255].into()),
        );
        let bytes = encode_metadata(&meta).expect("encodes");
        assert!(bytes.starts_with(b"WEIRMETA 1 "));
        assert_eq!(decode(&bytes).expect("decodes"), meta);
    }

    #[test]
    fn other_files_are_not_checkpoints() {
        for bytes in [
            &b"PAR1\x00\x00"[..],
            b"{\"job_id\": 1}",
            b"WEIRMETAX 1 0 0\n",
        ] {
            assert!(
                matches!(decode(bytes), Err(CheckpointError::NotMetadata { .. })),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn every_cut_is_truncated() {
        let bytes = encode_metadata(&sample(2, 2)).expect("encodes");
        for cut in 0..bytes.len() {
            let err = decode(&bytes[..cut]).expect_err("a cut file must not decode");
            assert!(
                matches!(err, CheckpointError::Truncated { .. }),
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn flipped_body_byte_is_a_checksum_mismatch() {
        let mut bytes = encode_metadata(&sample(2, 2)).expect("encodes");
        let last = bytes.len() - 2;
        bytes[last] ^= 0x20;
        assert!(matches!(
            decode(&bytes),
            Err(CheckpointError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn newer_version_names_both_versions() {
        let bytes = encode_metadata(&sample(2, 1)).expect("encodes");
        let text = String::from_utf8(bytes).expect("json is utf-8");
        let newer = text.replacen("WEIRMETA 1 ", "WEIRMETA 2 ", 1);
        let err = decode(newer.as_bytes()).expect_err("version 2 is unknown");
        assert!(matches!(
            err,
            CheckpointError::NewerVersion {
                found: 2,
                supported: 1,
                ..
            }
        ));
        let message = err.to_string();
        assert!(
            message.contains("version 2") && message.contains("newer weir"),
            "{message}"
        );
    }

    #[test]
    fn checksummed_garbage_is_malformed() {
        let body = b"{\"not\": \"metadata\"}";
        let mut bytes =
            format!("WEIRMETA 1 {:08x} {}\n", crc32fast::hash(body), body.len()).into_bytes();
        bytes.extend_from_slice(body);
        assert!(matches!(
            decode(&bytes),
            Err(CheckpointError::MalformedMetadata { .. })
        ));
    }

    #[test]
    fn a_body_length_near_u64_max_is_refused_without_overflow() {
        // `header length + announced length` used to wrap: a panic with
        // overflow checks, a nonsense "expected" size without.
        let err = decode(format!("WEIRMETA 1 00000000 {}\n{{}}", u64::MAX).as_bytes())
            .expect_err("no body is that long");
        assert!(matches!(err, CheckpointError::NotMetadata { .. }), "{err}");
    }

    proptest! {
        #[test]
        fn huge_declared_lengths_never_panic_and_never_claim_less_than_found(
            announced in prop_oneof![Just(u64::MAX), u64::MAX - 4096.., any::<u64>()],
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut bytes =
                format!("WEIRMETA 1 {:08x} {announced}\n", crc32fast::hash(&body)).into_bytes();
            bytes.extend_from_slice(&body);
            match decode(&bytes) {
                Err(CheckpointError::Truncated { expected, found, .. }) => {
                    prop_assert!(expected > found, "expected {expected}, found {found}");
                }
                other => prop_assert!(other.is_err(), "{other:?}"),
            }
        }

        #[test]
        fn metadata_round_trips(
            id in 0u64..1 << 40,
            parallelism in 1u32..8,
            timestamp_millis in any::<u64>(),
            inline in proptest::collection::vec(any::<u8>(), 0..64),
            position in any::<i64>(),
        ) {
            let mut meta = sample(id, parallelism);
            meta.timestamp_millis = timestamp_millis;
            meta.inline.insert(format!("chk-{id}/avg/0/keyed"), InlineFile(inline.into()));
            meta.sinks.insert(meta.operators[0].uid.clone(), serde_json::json!([position, "txn"]));
            let bytes = encode_metadata(&meta).expect("encodes");
            prop_assert_eq!(decode(&bytes).expect("decodes"), meta);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn random_bytes_after_magic_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..128)) {
            let bytes = [b"WEIRMETA 1 ".as_slice(), &tail].concat();
            prop_assert!(decode(&bytes).is_err());
        }

        #[test]
        fn corrupted_valid_files_never_panic(
            cut in 0usize..4096,
            flips in proptest::collection::vec((0usize..4096, any::<u8>()), 0..4),
        ) {
            let mut bytes = encode_metadata(&sample(9, 3)).expect("encodes");
            for (at, byte) in flips {
                let at = at % bytes.len();
                bytes[at] = byte;
            }
            bytes.truncate(cut.min(bytes.len()));
            let _ = decode(&bytes);
        }
    }
}
