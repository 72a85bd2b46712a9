//! Operator state as checkpoints carry it: an [`OperatorStateSnapshot`] per
//! subtask, serializable with serde and with a compact, checksummed binary
//! encoding.
//!
//! Binary layout (integers are LEB128 varints unless noted):
//! `"WOPS"`, version (u32 LE), state count, then per state: name length, name
//! (UTF-8), mode (one byte: 0 split, 1 union, 2 broadcast), item count, and per
//! item its length and bytes; last a CRC32 (u32 LE) of everything before it.
//! This module does no I/O.

use serde::{Deserialize, Serialize};
use weir_types::{read_varint, write_varint};

use crate::error::{Result, StateError};

/// The first bytes of an encoded operator state snapshot.
const MAGIC: &[u8; 4] = b"WOPS";

/// The version of the binary encoding this build writes and reads.
pub const OPERATOR_STATE_VERSION: u32 = 1;

const WHAT: &str = "operator state snapshot";

/// How a named operator state's items are spread over the subtasks when a
/// job restores at another parallelism (Flink's `OperatorStateHandle.Mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedistributionMode {
    /// All subtasks' items are concatenated in subtask order and split into
    /// contiguous, even chunks (Flink's `SPLIT_DISTRIBUTE`).
    Split,
    /// Every new subtask gets all items of all subtasks (`UNION`).
    Union,
    /// Every subtask holds the same items; each new subtask gets one copy
    /// (`BROADCAST`).
    Broadcast,
}

impl RedistributionMode {
    /// The name used in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            RedistributionMode::Split => "split",
            RedistributionMode::Union => "union",
            RedistributionMode::Broadcast => "broadcast",
        }
    }

    fn tag(self) -> u8 {
        match self {
            RedistributionMode::Split => 0,
            RedistributionMode::Union => 1,
            RedistributionMode::Broadcast => 2,
        }
    }

    fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            0 => Some(RedistributionMode::Split),
            1 => Some(RedistributionMode::Union),
            2 => Some(RedistributionMode::Broadcast),
            _ => None,
        }
    }
}

/// One named list state of one subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorListSnapshot {
    /// The state's name, unique within the operator.
    pub name: String,
    /// How it is redistributed.
    pub mode: RedistributionMode,
    /// Its items (user bytes), in order.
    pub items: Vec<Vec<u8>>,
}

/// All operator state of one subtask; states are sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorStateSnapshot {
    /// The named list states, sorted by name, names unique.
    pub states: Vec<OperatorListSnapshot>,
}

impl OperatorStateSnapshot {
    /// The state named `name`, if present.
    pub fn get(&self, name: &str) -> Option<&OperatorListSnapshot> {
        self.states
            .binary_search_by(|s| s.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.states[i])
    }

    /// The compact binary form (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&OPERATOR_STATE_VERSION.to_le_bytes());
        write_varint(self.states.len() as u64, &mut out);
        for state in &self.states {
            write_bytes(state.name.as_bytes(), &mut out);
            out.push(state.mode.tag());
            write_varint(state.items.len() as u64, &mut out);
            for item in &state.items {
                write_bytes(item, &mut out);
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses [`encode`](Self::encode)'s output, checking the magic, the
    /// version, the checksum and that states are sorted with unique names.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let corrupt = StateError::Corrupt { what: WHAT };
        if bytes.len() < MAGIC.len() + 8 || &bytes[..MAGIC.len()] != MAGIC {
            return Err(corrupt);
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes(crc.try_into().expect("split four bytes off"));
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(StateError::ChecksumMismatch {
                what: WHAT,
                stored,
                computed,
            });
        }
        let mut rest = &body[MAGIC.len()..];
        let version = u32::from_le_bytes(take(&mut rest, 4)?.try_into().expect("took four bytes"));
        if version != OPERATOR_STATE_VERSION {
            return Err(StateError::UnsupportedVersion {
                what: WHAT,
                version,
                supported: OPERATOR_STATE_VERSION,
            });
        }
        let count = read_len(&mut rest)?;
        let mut states: Vec<OperatorListSnapshot> = Vec::new();
        for _ in 0..count {
            let name = std::str::from_utf8(read_bytes(&mut rest)?)
                .map_err(|_| StateError::Corrupt { what: WHAT })?
                .to_owned();
            if states.last().is_some_and(|prev| prev.name >= name) {
                return Err(StateError::Corrupt { what: WHAT });
            }
            let mode = RedistributionMode::from_tag(take(&mut rest, 1)?[0])
                .ok_or(StateError::Corrupt { what: WHAT })?;
            let n = read_len(&mut rest)?;
            // Every item takes at least its length byte, so `n` is bounded
            // by what is left; a corrupt count cannot reserve gigabytes.
            let mut items = Vec::with_capacity(n.min(rest.len()));
            for _ in 0..n {
                items.push(read_bytes(&mut rest)?.to_vec());
            }
            states.push(OperatorListSnapshot { name, mode, items });
        }
        if !rest.is_empty() {
            return Err(StateError::Corrupt { what: WHAT });
        }
        Ok(Self { states })
    }
}

fn write_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    write_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if rest.len() < n {
        return Err(StateError::Corrupt { what: WHAT });
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn read_len(rest: &mut &[u8]) -> Result<usize> {
    read_varint(rest)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(StateError::Corrupt { what: WHAT })
}

fn read_bytes<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8]> {
    let n = read_len(rest)?;
    take(rest, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> OperatorStateSnapshot {
        OperatorStateSnapshot {
            states: vec![
                OperatorListSnapshot {
                    name: "offsets".into(),
                    mode: RedistributionMode::Split,
                    items: vec![b"p0:10".to_vec(), Vec::new(), b"p1:7".to_vec()],
                },
                OperatorListSnapshot {
                    name: "rules".into(),
                    mode: RedistributionMode::Broadcast,
                    items: vec![vec![0xff; 300]],
                },
                OperatorListSnapshot {
                    name: "seen".into(),
                    mode: RedistributionMode::Union,
                    items: Vec::new(),
                },
            ],
        }
    }

    #[test]
    fn binary_round_trip() {
        let s = sample();
        let bytes = s.encode();
        assert_eq!(&bytes[..4], b"WOPS");
        assert_eq!(OperatorStateSnapshot::decode(&bytes).expect("decodes"), s);
        let empty = OperatorStateSnapshot::default();
        assert_eq!(
            OperatorStateSnapshot::decode(&empty.encode()).expect("decodes"),
            empty
        );
    }

    #[test]
    fn serde_round_trip() {
        let s = sample();
        let json = serde_json::to_string(&s).expect("serializes");
        assert!(json.contains("\"broadcast\""), "{json}");
        let back: OperatorStateSnapshot = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, s);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    OperatorStateSnapshot::decode(&bad).is_err(),
                    "flip of bit {bit} in byte {i} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn corruption_errors_are_typed() {
        let bytes = sample().encode();
        let mut bad = bytes.clone();
        bad[10] ^= 1;
        assert!(matches!(
            OperatorStateSnapshot::decode(&bad),
            Err(StateError::ChecksumMismatch { .. })
        ));
        for len in 0..bytes.len() {
            assert!(OperatorStateSnapshot::decode(&bytes[..len]).is_err());
        }
        assert!(matches!(
            OperatorStateSnapshot::decode(b"nope-nope-nope"),
            Err(StateError::Corrupt { .. })
        ));
    }

    #[test]
    fn newer_version_is_refused() {
        let mut bytes = sample().encode();
        bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
        let body = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            OperatorStateSnapshot::decode(&bytes),
            Err(StateError::UnsupportedVersion { version: 2, .. })
        ));
    }

    #[test]
    fn unsorted_or_trailing_bytes_are_corrupt() {
        let mut s = sample();
        s.states.swap(0, 1);
        assert!(matches!(
            OperatorStateSnapshot::decode(&s.encode()),
            Err(StateError::Corrupt { .. })
        ));
        let mut bytes = sample().encode();
        let body = bytes.len() - 4;
        bytes.truncate(body);
        bytes.push(0);
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            OperatorStateSnapshot::decode(&bytes),
            Err(StateError::Corrupt { .. })
        ));
    }
}
