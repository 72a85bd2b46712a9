//! Per-key-group block compression, and the limits that keep a crafted
//! block from making a reader allocate or work without bound.
//!
//! Each key group is compressed on its own so a restore or the CLI can read
//! any one of them without the others. Two limits hold for every block,
//! whatever its codec, and the writer keeps both so every file it writes
//! passes: a block's raw length is at most [`MAX_BLOCK_RAW_LEN`] and at most
//! [`MAX_EXPANSION`] times its stored length. Readers check both before they
//! allocate or decompress anything, so the memory and time a block costs
//! are bounded by its size on disk. This module does not checksum; the
//! caller checks a block's CRC before decompressing it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Section};

/// The zstd level. On state data (many short entries) level 1 compresses as
/// well as level 3 and about 40% faster (`checkpoint_bench`, 10^6 keys:
/// 13.29 MB against 13.30 MB), and encoding is most of a full upload's time.
const ZSTD_LEVEL: i32 = 1;

/// A block never expands by more than this factor: state data compresses
/// far less, so only a crafted block (a "decompression bomb") claims more.
/// The writer pads a zstd block that compresses better than this with a
/// skippable frame, which decoders ignore.
pub const MAX_EXPANSION: u64 = 1024;

/// The most raw bytes one key group's block may hold (4 GiB); the writer
/// refuses a larger key group rather than write a file no reader accepts.
pub const MAX_BLOCK_RAW_LEN: u64 = 4 << 30;

/// The largest zstd window a reader accepts (8 MiB, what levels up to 19
/// use; level 1 uses at most 512 KiB), so a crafted frame header cannot make
/// the decoder allocate a huge window.
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// LZ4 cannot expand data by more than this factor (a maximal match costs one
/// byte per 255 output bytes); larger claims are corrupt.
const LZ4_MAX_RATIO: u64 = 256;

/// The magic number of a zstd skippable frame (any of 16 values), then a
/// little-endian u32 length and that many bytes the decoder skips.
const ZSTD_SKIPPABLE_MAGIC: u32 = 0x184D_2A50;
const ZSTD_SKIPPABLE_HEADER_LEN: usize = 8;

/// How the blocks of a snapshot file are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Stored as is.
    None,
    /// zstd (level 1): the best ratio; the default.
    #[default]
    Zstd,
    /// LZ4 block format: the fastest.
    Lz4,
}

/// Compresses the blocks of one writer, one after another. It keeps zstd's
/// context from block to block: a new one per block (allocating and clearing
/// its tables) cost about 3% of a full upload's time.
pub(crate) struct BlockCompressor {
    compression: Compression,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl BlockCompressor {
    pub(crate) fn new(compression: Compression) -> Self {
        Self {
            compression,
            zstd: None,
        }
    }

    /// Compresses one block of at most [`MAX_BLOCK_RAW_LEN`] bytes; the
    /// result is never less than `raw.len() / MAX_EXPANSION` bytes.
    pub(crate) fn compress(&mut self, raw: &[u8]) -> Vec<u8> {
        // Compressing an in-memory slice only fails on allocation failure.
        let fails = "in-memory zstd compression succeeds";
        match self.compression {
            Compression::None => raw.to_vec(),
            Compression::Zstd => {
                let zstd = match &mut self.zstd {
                    Some(zstd) => zstd,
                    empty => empty.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL).expect(fails)),
                };
                let mut stored = zstd.compress(raw).expect(fails);
                pad_to_expansion_limit(&mut stored, raw.len());
                stored
            }
            Compression::Lz4 => lz4_flex::block::compress(raw),
        }
    }
}

/// A copy compresses the same way, with a context of its own.
impl Clone for BlockCompressor {
    fn clone(&self) -> Self {
        Self::new(self.compression)
    }
}

impl std::fmt::Debug for BlockCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BlockCompressor")
            .field(&self.compression)
            .finish()
    }
}

/// The raw bytes of one block, ready to be read entry by entry.
pub(crate) enum RawBlock<'a> {
    /// Every raw byte at once: stored as is, or decompressed LZ4 (whose
    /// block format cannot be streamed).
    Whole(Cow<'a, [u8]>),
    /// zstd, decompressed as it is read, so a reader holds about one entry
    /// of it at a time.
    Stream(Box<zstd::stream::read::Decoder<'static, &'a [u8]>>),
}

impl Compression {
    /// Every compression, by name.
    pub const ALL: [Compression; 3] = [Compression::None, Compression::Zstd, Compression::Lz4];

    /// The compression's name: `none`, `zstd` or `lz4`.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
            Compression::Lz4 => "lz4",
        }
    }

    /// The compression named `name`, if any (see [`as_str`](Self::as_str)).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// Compresses one block of at most [`MAX_BLOCK_RAW_LEN`] bytes; the
    /// result is never less than `raw.len() / MAX_EXPANSION` bytes.
    #[cfg(test)]
    pub(crate) fn compress(self, raw: &[u8]) -> Vec<u8> {
        BlockCompressor::new(self).compress(raw)
    }

    /// Opens a block stored as `stored` that must expand to exactly
    /// `raw_len` bytes, after checking the limits. An LZ4 block is
    /// decompressed here; a zstd block as it is read.
    pub(crate) fn open<'a>(
        self,
        section: Section,
        stored: &'a [u8],
        raw_len: u64,
    ) -> Result<RawBlock<'a>, FormatError> {
        let corrupt = |reason| FormatError::Corrupt { section, reason };
        let failed = |reason: String| FormatError::Decompress { section, reason };
        if raw_len > MAX_BLOCK_RAW_LEN {
            return Err(corrupt("the index claims a block larger than 4 GiB"));
        }
        if raw_len > (stored.len() as u64).saturating_mul(MAX_EXPANSION) {
            return Err(corrupt(
                "the index claims the block expands more than 1024 times",
            ));
        }
        let wrong_size = || corrupt("decompressed size differs from the index");
        match self {
            Compression::None => {
                if stored.len() as u64 != raw_len {
                    return Err(wrong_size());
                }
                Ok(RawBlock::Whole(Cow::Borrowed(stored)))
            }
            Compression::Zstd => {
                let mut decoder = zstd::stream::read::Decoder::with_buffer(stored)
                    .map_err(|e| failed(e.to_string()))?;
                decoder
                    .window_log_max(ZSTD_WINDOW_LOG_MAX)
                    .map_err(|e| failed(e.to_string()))?;
                Ok(RawBlock::Stream(Box::new(decoder)))
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
                Ok(RawBlock::Whole(Cow::Owned(raw)))
            }
        }
    }
}

/// Appends a skippable frame to a zstd block that compressed better than
/// [`MAX_EXPANSION`] allows, so readers accept it.
fn pad_to_expansion_limit(stored: &mut Vec<u8>, raw_len: usize) {
    let limit = usize::try_from(MAX_EXPANSION).expect("a small constant");
    let needed = raw_len.div_ceil(limit);
    if stored.len() >= needed {
        return;
    }
    let skipped = (needed - stored.len()).saturating_sub(ZSTD_SKIPPABLE_HEADER_LEN);
    let length = u32::try_from(skipped).expect("raw blocks are at most 4 GiB, padding 4 MiB");
    stored.extend_from_slice(&ZSTD_SKIPPABLE_MAGIC.to_le_bytes());
    stored.extend_from_slice(&length.to_le_bytes());
    stored.resize(stored.len() + skipped, 0);
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use weir_types::KeyGroup;

    use super::*;

    const SECTION: Section = Section::KeyGroup(KeyGroup(0));

    /// Every raw byte of an opened block.
    fn read(block: RawBlock<'_>) -> std::io::Result<Vec<u8>> {
        match block {
            RawBlock::Whole(raw) => Ok(raw.into_owned()),
            RawBlock::Stream(mut decoder) => {
                let mut raw = Vec::new();
                decoder.read_to_end(&mut raw)?;
                Ok(raw)
            }
        }
    }

    #[test]
    fn every_mode_round_trips() {
        let raw: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 97).to_le_bytes())
            .collect();
        for c in [Compression::None, Compression::Zstd, Compression::Lz4] {
            let stored = c.compress(&raw);
            let block = c.open(SECTION, &stored, raw.len() as u64).expect("opens");
            assert_eq!(read(block).expect("reads"), raw, "{c:?}");
        }
    }

    #[test]
    fn blocks_that_compress_too_well_are_padded_and_still_read() {
        // 4 MiB of zeros: zstd alone stores it in a few hundred bytes.
        let raw = vec![0u8; 4 << 20];
        let stored = Compression::Zstd.compress(&raw);
        assert!(stored.len() as u64 * MAX_EXPANSION >= raw.len() as u64);
        assert!(
            stored.len() < 2 * (raw.len() / 1024),
            "padded only to the limit"
        );
        let block = Compression::Zstd
            .open(SECTION, &stored, raw.len() as u64)
            .expect("within the limit");
        assert_eq!(read(block).expect("skips the padding"), raw);
    }

    #[test]
    fn a_zstd_bomb_is_refused_before_decompressing() {
        // 64 MiB of zeros in one unpadded frame, the way a crafted file would
        // store it: the index's claim is true, but far above the limit.
        let raw_len = 64u64 << 20;
        let bomb =
            zstd::bulk::compress(&vec![0u8; raw_len as usize], ZSTD_LEVEL).expect("compresses");
        assert!((bomb.len() as u64) * MAX_EXPANSION < raw_len);
        let err = Compression::Zstd
            .open(SECTION, &bomb, raw_len)
            .err()
            .expect("refused");
        assert!(
            matches!(err, FormatError::Corrupt { .. }) && err.to_string().contains("1024"),
            "{err}"
        );
        for c in [Compression::None, Compression::Zstd, Compression::Lz4] {
            let err = c.open(SECTION, &[0; 1 << 24], MAX_BLOCK_RAW_LEN + 1).err();
            assert!(err.is_some(), "{c:?}: larger than any block may be");
        }
    }

    #[test]
    fn a_huge_zstd_window_is_refused() {
        // A frame without a content size whose window is 2^log bytes, holding
        // one raw block "hello".
        let frame = |log: u8| {
            let mut frame = 0xFD2F_B528u32.to_le_bytes().to_vec();
            frame.extend_from_slice(&[0x00, (log - 10) << 3]);
            frame.extend_from_slice(&[1 | (5 << 3), 0, 0]);
            frame.extend_from_slice(b"hello");
            frame
        };
        let small = frame(20);
        let block = Compression::Zstd.open(SECTION, &small, 5).expect("opens");
        assert_eq!(read(block).expect("a 1 MiB window is fine"), b"hello");
        let huge = frame(26);
        let block = Compression::Zstd.open(SECTION, &huge, 5).expect("opens");
        assert!(read(block).is_err(), "a 64 MiB window is refused");
    }

    #[test]
    fn wrong_sizes_are_errors() {
        let raw = vec![7u8; 1000];
        for c in [Compression::None, Compression::Lz4] {
            let stored = c.compress(&raw);
            for len in [999, 1001, u64::MAX] {
                assert!(c.open(SECTION, &stored, len).is_err(), "{c:?} {len}");
            }
        }
        assert!(Compression::Zstd.open(SECTION, b"", 1).is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        for c in [Compression::Zstd, Compression::Lz4] {
            let garbage = c.open(SECTION, b"\xff\x00garbage", 100).and_then(|b| {
                read(b).map_err(|e| FormatError::Decompress {
                    section: SECTION,
                    reason: e.to_string(),
                })
            });
            assert!(garbage.is_err(), "{c:?}");
        }
    }
}
