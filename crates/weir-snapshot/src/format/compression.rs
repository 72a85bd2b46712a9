//! Per-key-group block compression.
//!
//! Each key group is compressed on its own so a restore or the CLI can read
//! any one of them without the others. This module does not checksum; the
//! caller checks a block's CRC before decompressing it.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Section};

/// The zstd level: fast, and most of the ratio of higher levels on state data.
const ZSTD_LEVEL: i32 = 3;

/// LZ4 cannot expand data by more than this factor (a maximal match costs one
/// byte per 255 output bytes); larger claims are corrupt and would only make
/// us allocate a huge buffer.
const LZ4_MAX_RATIO: u64 = 256;

/// How the blocks of a snapshot file are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Stored as is.
    None,
    /// zstd (level 3): the best ratio; the default.
    #[default]
    Zstd,
    /// LZ4 block format: the fastest.
    Lz4,
}

impl Compression {
    /// Compresses one block.
    pub(crate) fn compress(self, raw: &[u8]) -> Vec<u8> {
        match self {
            Compression::None => raw.to_vec(),
            // Compressing an in-memory slice only fails on allocation failure.
            Compression::Zstd => {
                zstd::bulk::compress(raw, ZSTD_LEVEL).expect("in-memory zstd compression succeeds")
            }
            Compression::Lz4 => lz4_flex::block::compress(raw),
        }
    }

    /// Decompresses one block that must expand to exactly `raw_len` bytes.
    pub(crate) fn decompress(
        self,
        section: Section,
        stored: &[u8],
        raw_len: u64,
    ) -> Result<Vec<u8>, FormatError> {
        let wrong_size = || FormatError::Corrupt {
            section,
            reason: "decompressed size differs from the index",
        };
        let failed = |reason: String| FormatError::Decompress { section, reason };
        match self {
            Compression::None => {
                if stored.len() as u64 != raw_len {
                    return Err(wrong_size());
                }
                Ok(stored.to_vec())
            }
            Compression::Zstd => {
                // Stream through a `take` so a lying size costs no memory.
                let decoder =
                    zstd::stream::read::Decoder::new(stored).map_err(|e| failed(e.to_string()))?;
                let mut raw = Vec::new();
                decoder
                    .take(raw_len.saturating_add(1))
                    .read_to_end(&mut raw)
                    .map_err(|e| failed(e.to_string()))?;
                if raw.len() as u64 != raw_len {
                    return Err(wrong_size());
                }
                Ok(raw)
            }
            Compression::Lz4 => {
                if raw_len > (stored.len() as u64).saturating_mul(LZ4_MAX_RATIO) {
                    return Err(wrong_size());
                }
                let len = usize::try_from(raw_len).map_err(|_| wrong_size())?;
                let mut raw = vec![0; len];
                let n = lz4_flex::block::decompress_into(stored, &mut raw)
                    .map_err(|e| failed(e.to_string()))?;
                if n != len {
                    return Err(wrong_size());
                }
                Ok(raw)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use weir_types::KeyGroup;

    use super::*;

    const SECTION: Section = Section::KeyGroup(KeyGroup(0));

    #[test]
    fn every_mode_round_trips() {
        let raw: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 97).to_le_bytes())
            .collect();
        for c in [Compression::None, Compression::Zstd, Compression::Lz4] {
            let stored = c.compress(&raw);
            let back = c
                .decompress(SECTION, &stored, raw.len() as u64)
                .expect("round trip");
            assert_eq!(back, raw, "{c:?}");
        }
    }

    #[test]
    fn wrong_sizes_are_errors() {
        let raw = vec![7u8; 1000];
        for c in [Compression::None, Compression::Zstd, Compression::Lz4] {
            let stored = c.compress(&raw);
            for len in [999, 1001, u64::MAX] {
                assert!(c.decompress(SECTION, &stored, len).is_err(), "{c:?} {len}");
            }
        }
    }

    #[test]
    fn garbage_is_an_error() {
        for c in [Compression::Zstd, Compression::Lz4] {
            assert!(
                c.decompress(SECTION, b"\xff\x00garbage", 100).is_err(),
                "{c:?}"
            );
        }
    }
}
