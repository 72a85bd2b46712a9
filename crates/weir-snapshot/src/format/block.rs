//! The entries of one key group, before compression: writing them, and
//! reading them back one at a time from a block's raw bytes.
//!
//! An entry is: state index (varint), payload tag (one byte: 0 value, 1 list,
//! 2 map entry), key, namespace, then the payload (value or list payload; or
//! user key and value), each byte string prefixed by its varint length. The
//! key group is implied by the block. This module neither compresses nor
//! checksums.

use std::io::Read;

use weir_state::{EntryPayload, StateEntry, StateId, list_items};
use weir_types::{KeyGroup, StateDescriptor, StateKind, read_varint, write_varint};

use super::BlockInfo;
use super::compression::RawBlock;
use crate::error::{FormatError, Section};

const TAG_VALUE: u8 = 0;
const TAG_LIST: u8 = 1;
const TAG_MAP_ENTRY: u8 = 2;

/// Whether `payload` is the form entries of a `kind` state take.
pub(crate) fn payload_fits(kind: StateKind, payload: &EntryPayload<'_>) -> bool {
    match payload {
        EntryPayload::Value(_) => matches!(
            kind,
            StateKind::Value | StateKind::Reducing | StateKind::Aggregating
        ),
        EntryPayload::List(p) => {
            kind == StateKind::List && !p.is_empty() && list_items(p).all(|i| i.is_some())
        }
        EntryPayload::MapEntry { .. } => kind == StateKind::Map,
    }
}

/// Appends one entry (its state id is the snapshot's own index).
pub(crate) fn encode_entry(entry: &StateEntry<'_>, out: &mut Vec<u8>) {
    write_varint(u64::from(entry.state.0), out);
    let tag = match entry.payload {
        EntryPayload::Value(_) => TAG_VALUE,
        EntryPayload::List(_) => TAG_LIST,
        EntryPayload::MapEntry { .. } => TAG_MAP_ENTRY,
    };
    out.push(tag);
    put_bytes(entry.key, out);
    put_bytes(entry.namespace, out);
    match entry.payload {
        EntryPayload::Value(v) | EntryPayload::List(v) => put_bytes(v, out),
        EntryPayload::MapEntry { user_key, value } => {
            put_bytes(user_key, out);
            put_bytes(value, out);
        }
    }
}

/// Reads raw bytes from a decompressor this many at a time.
const READ_CHUNK: usize = 64 << 10;

/// Decodes the entries of one block from its raw bytes and hands each to
/// `visit`, in order. Entries are checked against `descriptors` (the
/// header's): state indexes in range, payloads of the state's kind, exactly
/// `info.entries` of them in exactly `info.raw_length` bytes. A streamed
/// block is read in chunks into a window that grows only to hold the
/// largest entry, and never past the bytes the block has left, so memory
/// follows the data actually there, not what the index claims.
pub(crate) fn read_entries<E: From<FormatError>>(
    raw: RawBlock<'_>,
    info: &BlockInfo,
    descriptors: &[StateDescriptor],
    visit: &mut dyn FnMut(StateEntry<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let mut count = EntryCount::new(info);
    match raw {
        RawBlock::Whole(raw) => {
            let mut rest: &[u8] = &raw;
            while !rest.is_empty() {
                let (entry, len) = match parse_entry(rest, info.key_group, descriptors) {
                    Parsed::Entry(entry, len) => (entry, len),
                    Parsed::Short(_) => {
                        return Err(count.corrupt("an entry runs past the block").into());
                    }
                    Parsed::Malformed => return Err(count.corrupt("malformed entry").into()),
                };
                count.one_more()?;
                visit(entry)?;
                rest = &rest[len..];
            }
        }
        RawBlock::Stream(decoder) => {
            let mut window = Window::new(*decoder, info);
            loop {
                match parse_entry(window.unparsed(), info.key_group, descriptors) {
                    Parsed::Entry(entry, len) => {
                        count.one_more()?;
                        visit(entry)?;
                        window.consume(len);
                    }
                    Parsed::Short(needed) => {
                        if !window.fill(needed)? {
                            break;
                        }
                    }
                    Parsed::Malformed => return Err(count.corrupt("malformed entry").into()),
                }
            }
            window.finish()?;
        }
    }
    count.finish()?;
    Ok(())
}

/// Counts entries against the index.
struct EntryCount {
    section: Section,
    expected: u64,
    seen: u64,
}

impl EntryCount {
    fn new(info: &BlockInfo) -> Self {
        Self {
            section: Section::KeyGroup(info.key_group),
            expected: info.entries,
            seen: 0,
        }
    }

    fn corrupt(&self, reason: &'static str) -> FormatError {
        FormatError::Corrupt {
            section: self.section,
            reason,
        }
    }

    fn one_more(&mut self) -> Result<(), FormatError> {
        self.seen += 1;
        if self.seen > self.expected {
            return Err(self.corrupt("more entries than the index says"));
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), FormatError> {
        if self.seen < self.expected {
            return Err(self.corrupt("fewer entries than the index says"));
        }
        Ok(())
    }
}

/// The part of a streamed block read but not yet decoded.
struct Window<R> {
    source: R,
    section: Section,
    buf: Vec<u8>,
    start: usize,
    /// Raw bytes the index says are still to come.
    unread: u64,
}

impl<R: Read> Window<R> {
    fn new(source: R, info: &BlockInfo) -> Self {
        Self {
            source,
            section: Section::KeyGroup(info.key_group),
            buf: Vec::new(),
            start: 0,
            unread: info.raw_length,
        }
    }

    fn unparsed(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, len: usize) {
        self.start += len;
    }

    /// Reads more, so the window holds at least `needed` bytes; false when
    /// the block is over and the window is empty. A block that ends inside
    /// an entry, or decompresses to fewer bytes than the index says, is
    /// corrupt.
    fn fill(&mut self, needed: u64) -> Result<bool, FormatError> {
        let held = self.unparsed().len();
        if self.unread == 0 {
            if held == 0 {
                return Ok(false);
            }
            return Err(self.corrupt("an entry runs past the block"));
        }
        let held = held as u64;
        // An entry cannot be longer than what the block has left: checking
        // that first means a lying length allocates nothing.
        if needed > held.saturating_add(self.unread) {
            return Err(self.corrupt("an entry runs past the block"));
        }
        let more = needed
            .saturating_sub(held)
            .max(READ_CHUNK as u64)
            .min(self.unread);
        let more = usize::try_from(more).map_err(|_| self.corrupt("block too large"))?;
        self.buf.drain(..self.start);
        self.start = 0;
        let mut filled = self.buf.len();
        self.buf.resize(filled + more, 0);
        while filled < self.buf.len() {
            match self.source.read(&mut self.buf[filled..]) {
                Ok(0) => return Err(self.wrong_size()),
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failed(&e)),
            }
        }
        self.unread -= more as u64;
        Ok(true)
    }

    /// Checks that the block holds no bytes beyond the index's raw length.
    fn finish(mut self) -> Result<(), FormatError> {
        let mut probe = [0u8; 1];
        loop {
            match self.source.read(&mut probe) {
                Ok(0) => return Ok(()),
                Ok(_) => return Err(self.wrong_size()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failed(&e)),
            }
        }
    }

    fn corrupt(&self, reason: &'static str) -> FormatError {
        FormatError::Corrupt {
            section: self.section,
            reason,
        }
    }

    fn wrong_size(&self) -> FormatError {
        self.corrupt("decompressed size differs from the index")
    }

    fn failed(&self, e: &std::io::Error) -> FormatError {
        FormatError::Decompress {
            section: self.section,
            reason: e.to_string(),
        }
    }
}

/// One entry at the start of some bytes.
enum Parsed<'a> {
    /// The entry and its encoded length.
    Entry(StateEntry<'a>, usize),
    /// The bytes end inside the entry, which needs at least this many.
    Short(u64),
    /// Not an entry.
    Malformed,
}

fn parse_entry<'a>(
    bytes: &'a [u8],
    key_group: KeyGroup,
    descriptors: &[StateDescriptor],
) -> Parsed<'a> {
    let mut r = EntryReader { bytes, at: 0 };
    match r.entry(key_group, descriptors) {
        Ok(entry) => Parsed::Entry(entry, r.at),
        Err(Stop::Short(needed)) => Parsed::Short(needed),
        Err(Stop::Malformed) => Parsed::Malformed,
    }
}

enum Stop {
    Short(u64),
    Malformed,
}

/// Reads the fields of one entry, knowing how far it got.
struct EntryReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> EntryReader<'a> {
    fn entry(
        &mut self,
        key_group: KeyGroup,
        descriptors: &[StateDescriptor],
    ) -> Result<StateEntry<'a>, Stop> {
        let index = u32::try_from(self.varint()?).map_err(|_| Stop::Malformed)?;
        let descriptor = usize::try_from(index)
            .ok()
            .and_then(|i| descriptors.get(i))
            .ok_or(Stop::Malformed)?;
        let tag = self.take(1)?[0];
        let key = self.bytes_field()?;
        let namespace = self.bytes_field()?;
        let payload = match tag {
            TAG_VALUE => EntryPayload::Value(self.bytes_field()?),
            TAG_LIST => EntryPayload::List(self.bytes_field()?),
            TAG_MAP_ENTRY => EntryPayload::MapEntry {
                user_key: self.bytes_field()?,
                value: self.bytes_field()?,
            },
            _ => return Err(Stop::Malformed),
        };
        if !payload_fits(descriptor.kind, &payload) {
            return Err(Stop::Malformed);
        }
        Ok(StateEntry {
            state: StateId(index),
            key_group,
            key,
            namespace,
            payload,
        })
    }

    fn varint(&mut self) -> Result<u64, Stop> {
        let mut rest = &self.bytes[self.at..];
        match read_varint(&mut rest) {
            Some(v) => {
                self.at = self.bytes.len() - rest.len();
                Ok(v)
            }
            // A varint is at most ten bytes; fewer left means it may go on.
            None if self.bytes.len() - self.at < MAX_VARINT_LEN => {
                Err(Stop::Short(self.bytes.len() as u64 + 1))
            }
            None => Err(Stop::Malformed),
        }
    }

    fn bytes_field(&mut self) -> Result<&'a [u8], Stop> {
        let len = usize::try_from(self.varint()?).map_err(|_| Stop::Malformed)?;
        self.take(len)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], Stop> {
        let end = self.at.checked_add(len).ok_or(Stop::Malformed)?;
        let Some(bytes) = self.bytes.get(self.at..end) else {
            return Err(Stop::Short(end as u64));
        };
        self.at = end;
        Ok(bytes)
    }
}

/// The longest varint encoding of a u64.
const MAX_VARINT_LEN: usize = 10;

fn put_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    write_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use weir_state::push_list_item;
    use weir_types::ValueType;

    use super::*;
    use crate::format::Compression;

    fn descriptors() -> Vec<StateDescriptor> {
        vec![
            StateDescriptor::new("v", StateKind::Value, ValueType::Int64).expect("valid"),
            StateDescriptor::new("l", StateKind::List, ValueType::Utf8).expect("valid"),
            StateDescriptor::map("m", ValueType::Utf8, ValueType::Int64).expect("valid"),
        ]
    }

    /// Stores `raw` with `compression` as a block whose index says
    /// `raw_length` and `entries`, reads it back and returns the entries
    /// visited, re-encoded.
    fn read_back(
        compression: Compression,
        raw: &[u8],
        raw_length: u64,
        entries: u64,
    ) -> Result<Vec<u8>, FormatError> {
        let kg = KeyGroup(3);
        let stored = compression.compress(raw);
        let info = BlockInfo {
            key_group: kg,
            offset: 0,
            length: stored.len() as u64,
            raw_length,
            entries,
            crc32: 0,
        };
        let block = compression.open(Section::KeyGroup(kg), &stored, raw_length)?;
        let mut out = Vec::new();
        read_entries(block, &info, &descriptors(), &mut |e: StateEntry<'_>| {
            assert_eq!(e.key_group, kg);
            encode_entry(&e, &mut out);
            Ok::<_, FormatError>(())
        })?;
        Ok(out)
    }

    #[test]
    fn entries_round_trip_whole_and_streamed() {
        let kg = KeyGroup(3);
        let mut list = Vec::new();
        push_list_item(b"a", &mut list);
        push_list_item(b"", &mut list);
        // Larger than a read chunk, so the streamed window must grow.
        let big = vec![b'x'; 3 * READ_CHUNK + 17];
        let mut raw = Vec::new();
        let mut count = 0;
        for i in 0..2000u32 {
            let key = i.to_le_bytes();
            let payload = match i % 4 {
                0 => EntryPayload::Value(&key),
                1 => EntryPayload::List(&list),
                2 => EntryPayload::MapEntry {
                    user_key: b"u",
                    value: &key,
                },
                _ if i % 500 == 3 => EntryPayload::Value(&big),
                _ => EntryPayload::Value(b""),
            };
            let state = match payload {
                EntryPayload::Value(_) => StateId(0),
                EntryPayload::List(_) => StateId(1),
                EntryPayload::MapEntry { .. } => StateId(2),
            };
            let entry = StateEntry {
                state,
                key_group: kg,
                key: &key,
                namespace: if i % 3 == 0 { b"ns" } else { b"" },
                payload,
            };
            encode_entry(&entry, &mut raw);
            count += 1;
        }
        let len = raw.len() as u64;
        for c in [Compression::None, Compression::Zstd, Compression::Lz4] {
            assert_eq!(read_back(c, &raw, len, count).expect("valid"), raw, "{c:?}");
            for (raw_length, entries) in [(len, count + 1), (len, count - 1), (len + 1, count)] {
                let err = read_back(c, &raw, raw_length, entries).expect_err("index disagrees");
                assert!(matches!(err, FormatError::Corrupt { .. }), "{c:?}: {err}");
            }
            let cut = &raw[..raw.len() - 3];
            let err = read_back(c, cut, cut.len() as u64, count).expect_err("cut entry");
            assert!(matches!(err, FormatError::Corrupt { .. }), "{c:?}: {err}");
        }
        let err = read_back(Compression::Zstd, &raw, len - 1, count).expect_err("more bytes");
        assert!(matches!(err, FormatError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn a_lying_entry_length_allocates_nothing() {
        // A value claiming u64::MAX / 2 bytes, in a block of a few bytes.
        let mut raw = vec![0, TAG_VALUE, 0, 0];
        write_varint(u64::MAX / 2, &mut raw);
        for c in [Compression::None, Compression::Zstd] {
            let err = read_back(c, &raw, raw.len() as u64, 1).expect_err("too long");
            assert!(err.to_string().contains("runs past"), "{c:?}: {err}");
        }
    }

    #[test]
    fn wrong_kinds_and_indexes_are_corrupt() {
        let kg = KeyGroup(0);
        for (state, payload) in [
            (StateId(0), EntryPayload::List(b"\x01a")),
            (StateId(1), EntryPayload::Value(b"x")),
            (StateId(1), EntryPayload::List(b"\x05a")),
            (StateId(5), EntryPayload::Value(b"x")),
        ] {
            let mut raw = Vec::new();
            let entry = StateEntry {
                state,
                key_group: kg,
                key: b"k",
                namespace: b"",
                payload,
            };
            encode_entry(&entry, &mut raw);
            for c in [Compression::None, Compression::Zstd] {
                let err = read_back(c, &raw, raw.len() as u64, 1).expect_err("corrupt");
                assert!(matches!(err, FormatError::Corrupt { .. }), "{entry:?}");
            }
        }
    }
}
