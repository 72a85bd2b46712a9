//! Writes a snapshot file as a sequence of byte chunks, key group by key
//! group, so a caller can stream it to storage with bounded memory.
//!
//! Sans-IO: the encoder returns bytes and never writes them itself. Key
//! groups are encoded and compressed independently, on several threads when
//! asked (`parallel.rs`), and placed in the file in order.

use bytes::Bytes;
use weir_state::{FrozenKeyedState, StateEntry};
use weir_types::{KeyGroup, KeyGroupRange, StateKind};

use super::block::{encode_entry, payload_fits};
use super::compression::BlockCompressor;
use super::layout::{encode_footer, encode_index, encode_prelude};
use super::{BlockInfo, MAX_BLOCK_RAW_LEN, SnapshotHeader, parallel};
use crate::error::{Result, SnapshotError};

/// What was written, known once the file is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedFile {
    /// File size in bytes.
    pub size: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
    /// Number of entries.
    pub entries: u64,
    /// Number of non-empty key groups.
    pub key_groups: u32,
}

/// One key group's entries, encoded and compressed: a block of the file
/// before it has a place (an offset) in it.
#[derive(Debug)]
pub(crate) struct KeyGroupBlock {
    key_group: KeyGroup,
    stored: Vec<u8>,
    raw_length: u64,
    entries: u64,
}

/// Encodes one key group at a time into a [`KeyGroupBlock`]: the part of a
/// file's work that key groups do independently, so several threads can
/// each have one.
#[derive(Debug, Clone)]
pub(crate) struct BlockWriter {
    kinds: Vec<StateKind>,
    range: KeyGroupRange,
    compressor: BlockCompressor,
    current: Option<(KeyGroup, u64)>,
    raw: Vec<u8>,
}

impl BlockWriter {
    fn new(header: &SnapshotHeader) -> Self {
        Self {
            kinds: header.descriptors.iter().map(|d| d.kind).collect(),
            range: header.key_group_range,
            compressor: BlockCompressor::new(header.compression),
            current: None,
            raw: Vec::new(),
        }
    }

    fn start(&mut self, key_group: KeyGroup) -> Result<()> {
        let invalid = |reason| SnapshotError::InvalidEntry { key_group, reason };
        if self.current.is_some() {
            return Err(invalid("the previous key group is still open"));
        }
        if !self.range.contains(key_group) {
            return Err(invalid("key group outside the snapshot's range"));
        }
        self.current = Some((key_group, 0));
        self.raw.clear();
        Ok(())
    }

    fn push(&mut self, entry: &StateEntry<'_>) -> Result<()> {
        let Some((key_group, count)) = self.current.as_mut() else {
            return Err(SnapshotError::InvalidEntry {
                key_group: entry.key_group,
                reason: "no key group is open",
            });
        };
        let invalid = |reason| SnapshotError::InvalidEntry {
            key_group: entry.key_group,
            reason,
        };
        if entry.key_group != *key_group {
            return Err(invalid("entry of another key group"));
        }
        let kind = usize::try_from(entry.state.0)
            .ok()
            .and_then(|i| self.kinds.get(i))
            .ok_or_else(|| invalid("unknown state id"))?;
        if !payload_fits(*kind, &entry.payload) {
            return Err(invalid("payload does not match the state's kind"));
        }
        encode_entry(entry, &mut self.raw);
        *count += 1;
        Ok(())
    }

    /// Closes the open key group: its block, or `None` when it had no
    /// entries; the error names `last` when no key group is open.
    fn finish(&mut self, last: Option<KeyGroup>) -> Result<Option<KeyGroupBlock>> {
        let Some((key_group, entries)) = self.current.take() else {
            return Err(SnapshotError::InvalidEntry {
                key_group: last.unwrap_or_default(),
                reason: "no key group is open",
            });
        };
        if entries == 0 {
            return Ok(None);
        }
        if self.raw.len() as u64 > MAX_BLOCK_RAW_LEN {
            return Err(SnapshotError::InvalidEntry {
                key_group,
                reason: "the key group holds more than 4 GiB, the most one block may hold; \
                         spread the state over more key groups (a higher max parallelism)",
            });
        }
        Ok(Some(KeyGroupBlock {
            key_group,
            stored: self.compressor.compress(&self.raw),
            raw_length: self.raw.len() as u64,
            entries,
        }))
    }

    /// Encodes every entry `frozen` holds in `key_group`.
    pub(crate) fn encode(
        &mut self,
        frozen: &dyn FrozenKeyedState,
        key_group: KeyGroup,
    ) -> Result<Option<KeyGroupBlock>> {
        self.start(key_group)?;
        let mut failed = None;
        let walked = frozen.for_each_entry(key_group, &mut |entry| {
            // The visitor must return a state error; keep ours aside and stop
            // the walk with a marker.
            self.push(&entry).map_err(|e| {
                failed = Some(e);
                weir_state::StateError::Corrupt {
                    what: "snapshot entry",
                }
            })
        });
        if let Err(source) = walked {
            self.current = None;
            return Err(failed.unwrap_or(SnapshotError::State { source }));
        }
        self.finish(None)
    }
}

/// Builds a snapshot file: [`start`](Self::start), then for each key group in
/// ascending order [`start_key_group`](Self::start_key_group),
/// [`push_entry`](Self::push_entry) and
/// [`finish_key_group`](Self::finish_key_group), then
/// [`finish`](Self::finish). Concatenating the returned chunks gives the file.
#[derive(Debug)]
pub struct SnapshotEncoder {
    header_bytes: Vec<u8>,
    offset: u64,
    file_crc: crc32fast::Hasher,
    blocks: Vec<BlockInfo>,
    last: Option<KeyGroup>,
    writer: BlockWriter,
}

impl SnapshotEncoder {
    /// An encoder for a file with `header`, and the file's first chunk.
    pub fn start(header: SnapshotHeader) -> (Self, Bytes) {
        let header_bytes = header.encode();
        let mut first = encode_prelude();
        first.extend_from_slice(&header_bytes);
        let mut file_crc = crc32fast::Hasher::new();
        file_crc.update(&first);
        let encoder = Self {
            writer: BlockWriter::new(&header),
            header_bytes,
            offset: first.len() as u64,
            file_crc,
            blocks: Vec::new(),
            last: None,
        };
        (encoder, Bytes::from(first))
    }

    /// Opens the block of `key_group`, which must lie in the header's range
    /// and follow the previous key group.
    pub fn start_key_group(&mut self, key_group: KeyGroup) -> Result<()> {
        if self.writer.current.is_none() && self.last.is_some_and(|l| l >= key_group) {
            return Err(SnapshotError::InvalidEntry {
                key_group,
                reason: "key groups must be written in ascending order",
            });
        }
        self.writer.start(key_group)
    }

    /// Adds an entry of the open key group; its state id indexes the header's
    /// descriptors and its payload must match that state's kind.
    pub fn push_entry(&mut self, entry: &StateEntry<'_>) -> Result<()> {
        self.writer.push(entry)
    }

    /// Closes the open key group; returns its compressed block, or `None`
    /// when it had no entries (empty key groups take no space).
    pub fn finish_key_group(&mut self) -> Result<Option<Bytes>> {
        let key_group = self.writer.current.map(|(key_group, _)| key_group);
        let block = self.writer.finish(self.last)?;
        self.last = key_group;
        Ok(block.map(|block| self.place(block)))
    }

    /// Appends `block` at the end of the file so far; returns its bytes.
    fn place(&mut self, block: KeyGroupBlock) -> Bytes {
        let info = BlockInfo {
            key_group: block.key_group,
            offset: self.offset,
            length: block.stored.len() as u64,
            raw_length: block.raw_length,
            entries: block.entries,
            crc32: crc32fast::hash(&block.stored),
        };
        self.offset += info.length;
        self.file_crc.update(&block.stored);
        self.blocks.push(info);
        Bytes::from(block.stored)
    }

    /// The index and footer (the last chunk) and a summary of the file.
    pub fn finish(self) -> Result<(Bytes, EncodedFile)> {
        if let Some((key_group, _)) = self.writer.current {
            return Err(SnapshotError::InvalidEntry {
                key_group,
                reason: "the last key group was never finished",
            });
        }
        let Self {
            header_bytes,
            offset,
            mut file_crc,
            blocks,
            ..
        } = self;
        let index = encode_index(&blocks);
        let mut tail = index.clone();
        tail.extend_from_slice(&encode_footer(offset, &index, &header_bytes));
        file_crc.update(&tail);
        let summary = EncodedFile {
            size: offset + tail.len() as u64,
            crc32: file_crc.finalize(),
            entries: blocks.iter().map(|b| b.entries).sum(),
            key_groups: u32::try_from(blocks.len()).expect("at most 32768 key groups"),
        };
        Ok((Bytes::from(tail), summary))
    }
}

/// Encodes every key group of `frozen` in order, on up to `threads` threads
/// (key groups are encoded and compressed independently; the calling thread
/// puts them in order), handing each chunk to `sink` as soon as it is ready
/// and in file order; a sink error stops the work.
pub fn encode_frozen(
    frozen: &dyn FrozenKeyedState,
    header: SnapshotHeader,
    threads: usize,
    sink: &mut dyn FnMut(Bytes) -> Result<()>,
) -> Result<EncodedFile> {
    let key_groups: Vec<KeyGroup> = header.key_group_range.iter().collect();
    let (mut encoder, first) = SnapshotEncoder::start(header);
    sink(first)?;
    let mut writer = encoder.writer.clone();
    let mut place = |block: KeyGroupBlock| sink(encoder.place(block));
    if threads <= 1 || key_groups.len() <= 1 {
        for &key_group in &key_groups {
            if let Some(block) = writer.encode(frozen, key_group)? {
                place(block)?;
            }
        }
    } else {
        parallel::encode(frozen, &key_groups, threads, &writer, &mut place)?;
    }
    let (tail, summary) = encoder.finish()?;
    sink(tail)?;
    Ok(summary)
}
