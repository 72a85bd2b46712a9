//! Where things are in a snapshot file: the prelude, footer and key-group
//! index, and the checks that make reading any slice of a file safe.
//!
//! ```text
//! prelude   magic (8) | version u32
//! header    JSON (see SnapshotHeader)
//! blocks    one per non-empty key group, ascending, back to back
//! index     count u32 | count x (key group u16, offset u64, length u64,
//!                                raw length u64, entries u64, crc32 u32)
//! footer    index offset u64 | index length u64 | index crc u32 |
//!           header length u32 | header crc u32 | footer crc u32 |
//!           version u32 | magic (8)
//! ```
//! Integers are little-endian; every CRC is CRC-32 (IEEE). This module does
//! no I/O: it says which byte ranges to read and checks what was read.

use std::ops::Range;

use weir_state::StateEntry;
use weir_types::{FORMAT_VERSION, KeyGroup, KeyGroupRange};

use super::SnapshotHeader;
use super::block::read_entries;
use crate::error::{FormatError, Section};

/// The first and last eight bytes of every snapshot file.
pub(crate) const MAGIC: [u8; 8] = *b"WEIRSNAP";
/// Magic plus version.
pub(crate) const PRELUDE_LEN: u64 = 12;
/// The fixed size of the footer.
pub const FOOTER_LEN: u64 = 44;
/// The size of one index record.
const INDEX_RECORD_LEN: u64 = 38;

/// The index record of one key group's block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// The key group.
    pub key_group: KeyGroup,
    /// Byte offset of the stored block in the file.
    pub offset: u64,
    /// Stored (compressed) length.
    pub length: u64,
    /// Length after decompression.
    pub raw_length: u64,
    /// Number of entries.
    pub entries: u64,
    /// CRC-32 of the stored bytes.
    pub crc32: u32,
}

impl BlockInfo {
    /// The stored bytes' range in the file.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.length
    }

    /// The stored bytes of this block in `file`, a whole file (or the part
    /// of it from `start` on) held in memory; short or empty when `file`
    /// ends early, which [`SnapshotLayout::read_block`] reports as truncated.
    pub fn stored_in<'a>(&self, file: &'a [u8], start: u64) -> &'a [u8] {
        usize::try_from(self.offset.saturating_sub(start))
            .ok()
            .zip(usize::try_from(self.length).ok())
            .and_then(|(from, len)| file.get(from..from.checked_add(len)?))
            .unwrap_or_default()
    }
}

/// The decoded footer: where the header and the index are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    file_size: u64,
    index_offset: u64,
    index_len: u64,
    index_crc: u32,
    header_len: u32,
    header_crc: u32,
}

impl Footer {
    /// The footer's range in a file of `file_size` bytes.
    pub fn range(file_size: u64) -> Range<u64> {
        file_size.saturating_sub(FOOTER_LEN)..file_size
    }

    /// Decodes and checks the last [`FOOTER_LEN`] bytes of a file.
    pub fn decode(file_size: u64, bytes: &[u8]) -> Result<Self, FormatError> {
        let min = PRELUDE_LEN + FOOTER_LEN;
        if file_size < min || bytes.len() as u64 != FOOTER_LEN {
            return Err(FormatError::Truncated {
                section: Section::Footer,
                needed: min,
                available: file_size.min(bytes.len() as u64),
            });
        }
        let mut r = Cursor(bytes);
        let (index_offset, index_len) = (r.u64(), r.u64());
        let (index_crc, header_len, header_crc, footer_crc) = (r.u32(), r.u32(), r.u32(), r.u32());
        let version = r.u32();
        if r.0 != MAGIC {
            return Err(FormatError::BadMagic {
                section: Section::Footer,
            });
        }
        check_version(version)?;
        check_crc(Section::Footer, footer_crc, &bytes[..28])?;
        let corrupt = |reason| FormatError::Corrupt {
            section: Section::Footer,
            reason,
        };
        let index_end = index_offset
            .checked_add(index_len)
            .and_then(|e| e.checked_add(FOOTER_LEN))
            .ok_or_else(|| corrupt("index range overflows"))?;
        if index_end != file_size {
            return Err(FormatError::Truncated {
                section: Section::Index,
                needed: index_end,
                available: file_size,
            });
        }
        if PRELUDE_LEN + u64::from(header_len) > index_offset {
            return Err(corrupt("header overlaps the index"));
        }
        Ok(Self {
            file_size,
            index_offset,
            index_len,
            index_crc,
            header_len,
            header_crc,
        })
    }

    /// The prelude and header's range.
    pub fn header_range(&self) -> Range<u64> {
        0..PRELUDE_LEN + u64::from(self.header_len)
    }

    /// The index's range.
    pub fn index_range(&self) -> Range<u64> {
        self.index_offset..self.index_offset + self.index_len
    }
}

/// A snapshot file's header and key-group index: enough to read any key
/// group with one ranged read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotLayout {
    header: SnapshotHeader,
    blocks: Vec<BlockInfo>,
    file_size: u64,
}

impl SnapshotLayout {
    /// Checks and decodes the bytes of [`Footer::header_range`] and
    /// [`Footer::index_range`].
    pub fn decode(footer: &Footer, header: &[u8], index: &[u8]) -> Result<Self, FormatError> {
        let header = decode_header(footer, header)?;
        let blocks = decode_index(footer, &header, index)?;
        Ok(Self {
            header,
            blocks,
            file_size: footer.file_size,
        })
    }

    /// Decodes the layout of a whole file held in memory.
    pub fn from_file(file: &[u8]) -> Result<Self, FormatError> {
        let size = file.len() as u64;
        let footer = Footer::decode(size, slice(file, Footer::range(size)))?;
        Self::decode(
            &footer,
            slice(file, footer.header_range()),
            slice(file, footer.index_range()),
        )
    }

    /// The header.
    pub fn header(&self) -> &SnapshotHeader {
        &self.header
    }

    /// Every block, by ascending key group.
    pub fn blocks(&self) -> &[BlockInfo] {
        &self.blocks
    }

    /// The file's size in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The blocks of the key groups in `range` (empty key groups have none).
    pub fn blocks_in(&self, range: KeyGroupRange) -> &[BlockInfo] {
        let from = self
            .blocks
            .partition_point(|b| u32::from(b.key_group.0) < range.start());
        let to = self
            .blocks
            .partition_point(|b| u32::from(b.key_group.0) < range.end());
        &self.blocks[from..to.max(from)]
    }

    /// The byte range holding `blocks` (a run of consecutive index records):
    /// blocks are back to back, so one ranged read fetches them all.
    pub fn span(blocks: &[BlockInfo]) -> Option<Range<u64>> {
        Some(blocks.first()?.offset..blocks.last()?.range().end)
    }

    /// Checks one block's stored bytes against its index record (length,
    /// CRC-32, the expansion limits of [`Compression`](super::Compression))
    /// and hands each of its entries to `visit`, in order, checked against
    /// the header's descriptors; stops at the first error, of either.
    ///
    /// Memory stays bounded by the bytes given, never by what the index
    /// claims: a zstd block is decompressed as its entries are read, so a
    /// reader holds about one entry at a time.
    pub fn read_block<E: From<FormatError>>(
        &self,
        info: &BlockInfo,
        stored: &[u8],
        visit: &mut dyn FnMut(StateEntry<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let section = Section::KeyGroup(info.key_group);
        if stored.len() as u64 != info.length {
            return Err(FormatError::Truncated {
                section,
                needed: info.length,
                available: stored.len() as u64,
            }
            .into());
        }
        check_crc(section, info.crc32, stored)?;
        let raw = self
            .header
            .compression
            .open(section, stored, info.raw_length)?;
        read_entries(raw, info, &self.header.descriptors, visit)
    }
}

/// Encodes the footer for the given positions and checksums.
pub(crate) fn encode_footer(index_offset: u64, index: &[u8], header: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FOOTER_LEN as usize);
    out.extend_from_slice(&index_offset.to_le_bytes());
    out.extend_from_slice(&(index.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(index).to_le_bytes());
    let header_len = u32::try_from(header.len()).expect("a header is far below 4 GiB");
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(header).to_le_bytes());
    let footer_crc = crc32fast::hash(&out);
    out.extend_from_slice(&footer_crc.to_le_bytes());
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&MAGIC);
    out
}

/// Encodes the prelude (magic and version).
pub(crate) fn encode_prelude() -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out
}

/// Encodes the index records.
pub(crate) fn encode_index(blocks: &[BlockInfo]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + blocks.len() * INDEX_RECORD_LEN as usize);
    let count = u32::try_from(blocks.len()).expect("at most 32768 key groups");
    out.extend_from_slice(&count.to_le_bytes());
    for b in blocks {
        out.extend_from_slice(&b.key_group.0.to_le_bytes());
        for v in [b.offset, b.length, b.raw_length, b.entries] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&b.crc32.to_le_bytes());
    }
    out
}

fn decode_header(footer: &Footer, bytes: &[u8]) -> Result<SnapshotHeader, FormatError> {
    let needed = footer.header_range().end;
    if (bytes.len() as u64) != needed {
        return Err(FormatError::Truncated {
            section: Section::Header,
            needed,
            available: bytes.len() as u64,
        });
    }
    let (prelude, json) = bytes.split_at(PRELUDE_LEN as usize);
    let mut r = Cursor(prelude);
    if r.take(8) != MAGIC {
        return Err(FormatError::BadMagic {
            section: Section::Prelude,
        });
    }
    check_version(r.u32())?;
    check_crc(Section::Header, footer.header_crc, json)?;
    SnapshotHeader::decode(json)
}

fn decode_index(
    footer: &Footer,
    header: &SnapshotHeader,
    bytes: &[u8],
) -> Result<Vec<BlockInfo>, FormatError> {
    let section = Section::Index;
    if bytes.len() as u64 != footer.index_len {
        return Err(FormatError::Truncated {
            section,
            needed: footer.index_len,
            available: bytes.len() as u64,
        });
    }
    check_crc(section, footer.index_crc, bytes)?;
    let corrupt = |reason| FormatError::Corrupt { section, reason };
    if bytes.len() < 4 {
        return Err(corrupt("missing record count"));
    }
    let mut r = Cursor(bytes);
    let count = u64::from(r.u32());
    if 4 + count * INDEX_RECORD_LEN != bytes.len() as u64 {
        return Err(corrupt("record count does not match the index length"));
    }
    let mut next_offset = footer.header_range().end;
    let mut previous: Option<KeyGroup> = None;
    let mut blocks = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let key_group = KeyGroup(r.u16());
        let (offset, length, raw_length, entries) = (r.u64(), r.u64(), r.u64(), r.u64());
        let crc32 = r.u32();
        if previous.is_some_and(|p| p >= key_group) {
            return Err(corrupt("key groups are not in ascending order"));
        }
        if !header.key_group_range.contains(key_group) {
            return Err(corrupt("a key group lies outside the header's range"));
        }
        if offset != next_offset || entries == 0 {
            return Err(corrupt("blocks are not back to back"));
        }
        next_offset = offset
            .checked_add(length)
            .ok_or_else(|| corrupt("block length overflows"))?;
        previous = Some(key_group);
        blocks.push(BlockInfo {
            key_group,
            offset,
            length,
            raw_length,
            entries,
            crc32,
        });
    }
    if next_offset != footer.index_offset {
        return Err(corrupt("blocks do not end where the index starts"));
    }
    Ok(blocks)
}

fn check_version(version: u32) -> Result<(), FormatError> {
    if version == FORMAT_VERSION {
        Ok(())
    } else {
        Err(FormatError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        })
    }
}

fn check_crc(section: Section, stored: u32, bytes: &[u8]) -> Result<(), FormatError> {
    let computed = crc32fast::hash(bytes);
    if computed == stored {
        Ok(())
    } else {
        Err(FormatError::ChecksumMismatch {
            section,
            stored,
            computed,
        })
    }
}

/// `file[range]`, clamped so that bad ranges yield short slices (which the
/// decoders then report as truncated) instead of panics.
fn slice(file: &[u8], range: Range<u64>) -> &[u8] {
    let len = file.len() as u64;
    let (start, end) = (range.start.min(len), range.end.min(len));
    &file[start as usize..end.max(start) as usize]
}

/// Reads fixed-size little-endian fields; callers check lengths first.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        head
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take(2).try_into().expect("two bytes"))
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("four bytes"))
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("eight bytes"))
    }
}
