//! Writes a snapshot file as a sequence of byte chunks, key group by key
//! group, so a caller can stream it to storage with bounded memory.
//!
//! Sans-IO: the encoder returns bytes and never writes them itself.

use bytes::Bytes;
use weir_state::{FrozenKeyedState, StateEntry};
use weir_types::KeyGroup;

use super::block::{encode_entry, payload_fits};
use super::layout::{encode_footer, encode_index, encode_prelude};
use super::{BlockInfo, MAX_BLOCK_RAW_LEN, SnapshotHeader};
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

/// Builds a snapshot file: [`start`](Self::start), then for each key group in
/// ascending order [`start_key_group`](Self::start_key_group),
/// [`push_entry`](Self::push_entry) and
/// [`finish_key_group`](Self::finish_key_group), then
/// [`finish`](Self::finish). Concatenating the returned chunks gives the file.
#[derive(Debug)]
pub struct SnapshotEncoder {
    header: SnapshotHeader,
    header_bytes: Vec<u8>,
    offset: u64,
    file_crc: crc32fast::Hasher,
    blocks: Vec<BlockInfo>,
    current: Option<(KeyGroup, u64)>,
    last: Option<KeyGroup>,
    raw: Vec<u8>,
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
            header,
            header_bytes,
            offset: first.len() as u64,
            file_crc,
            blocks: Vec::new(),
            current: None,
            last: None,
            raw: Vec::new(),
        };
        (encoder, Bytes::from(first))
    }

    /// Opens the block of `key_group`, which must lie in the header's range
    /// and follow the previous key group.
    pub fn start_key_group(&mut self, key_group: KeyGroup) -> Result<()> {
        let invalid = |reason| SnapshotError::InvalidEntry { key_group, reason };
        if self.current.is_some() {
            return Err(invalid("the previous key group is still open"));
        }
        if !self.header.key_group_range.contains(key_group) {
            return Err(invalid("key group outside the snapshot's range"));
        }
        if self.last.is_some_and(|l| l >= key_group) {
            return Err(invalid("key groups must be written in ascending order"));
        }
        self.current = Some((key_group, 0));
        self.raw.clear();
        Ok(())
    }

    /// Adds an entry of the open key group; its state id indexes the header's
    /// descriptors and its payload must match that state's kind.
    pub fn push_entry(&mut self, entry: &StateEntry<'_>) -> Result<()> {
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
        let descriptor = usize::try_from(entry.state.0)
            .ok()
            .and_then(|i| self.header.descriptors.get(i))
            .ok_or_else(|| invalid("unknown state id"))?;
        if !payload_fits(descriptor.kind, &entry.payload) {
            return Err(invalid("payload does not match the state's kind"));
        }
        encode_entry(entry, &mut self.raw);
        *count += 1;
        Ok(())
    }

    /// Closes the open key group; returns its compressed block, or `None`
    /// when it had no entries (empty key groups take no space).
    pub fn finish_key_group(&mut self) -> Result<Option<Bytes>> {
        let Some((key_group, entries)) = self.current.take() else {
            return Err(SnapshotError::InvalidEntry {
                key_group: self.last.unwrap_or_default(),
                reason: "no key group is open",
            });
        };
        self.last = Some(key_group);
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
        let stored = self.header.compression.compress(&self.raw);
        let info = BlockInfo {
            key_group,
            offset: self.offset,
            length: stored.len() as u64,
            raw_length: self.raw.len() as u64,
            entries,
            crc32: crc32fast::hash(&stored),
        };
        self.offset += info.length;
        self.file_crc.update(&stored);
        self.blocks.push(info);
        Ok(Some(Bytes::from(stored)))
    }

    /// The index and footer (the last chunk) and a summary of the file.
    pub fn finish(mut self) -> Result<(Bytes, EncodedFile)> {
        if let Some((key_group, _)) = self.current {
            return Err(SnapshotError::InvalidEntry {
                key_group,
                reason: "the last key group was never finished",
            });
        }
        let index = encode_index(&self.blocks);
        let mut tail = index.clone();
        tail.extend_from_slice(&encode_footer(self.offset, &index, &self.header_bytes));
        self.file_crc.update(&tail);
        let summary = EncodedFile {
            size: self.offset + tail.len() as u64,
            crc32: self.file_crc.finalize(),
            entries: self.blocks.iter().map(|b| b.entries).sum(),
            key_groups: u32::try_from(self.blocks.len()).expect("at most 32768 key groups"),
        };
        Ok((Bytes::from(tail), summary))
    }
}

/// Encodes every key group of `frozen` in order, handing each chunk to
/// `sink` as soon as it is ready; a sink error stops the work.
pub fn encode_frozen(
    frozen: &dyn FrozenKeyedState,
    header: SnapshotHeader,
    sink: &mut dyn FnMut(Bytes) -> Result<()>,
) -> Result<EncodedFile> {
    let range = header.key_group_range;
    let (mut encoder, first) = SnapshotEncoder::start(header);
    sink(first)?;
    for key_group in range.iter() {
        encoder.start_key_group(key_group)?;
        let mut failed = None;
        let walked = frozen.for_each_entry(key_group, &mut |entry| {
            // The visitor must return a state error; keep ours aside and stop
            // the walk with a marker.
            encoder.push_entry(&entry).map_err(|e| {
                failed = Some(e);
                weir_state::StateError::Corrupt {
                    what: "snapshot entry",
                }
            })
        });
        if let Err(source) = walked {
            return Err(failed.unwrap_or(SnapshotError::State { source }));
        }
        if let Some(block) = encoder.finish_key_group()? {
            sink(block)?;
        }
    }
    let (tail, summary) = encoder.finish()?;
    sink(tail)?;
    Ok(summary)
}
