//! Key groups: the unit of state redistribution, assigned exactly as Flink does.
//!
//! A key's key group is `pmod(spark_hash(key columns), max_parallelism)`; the
//! subtask owning key group `kg` is `kg * parallelism / max_parallelism`, so each
//! subtask owns one contiguous [`KeyGroupRange`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TypesError};
use crate::ids::SubtaskIndex;
use crate::spark_hash::hash_values;
use crate::value::Value;

/// Upper bound of max parallelism, as in Flink (`1 << 15`).
const UPPER_BOUND_MAX_PARALLELISM: u32 = 1 << 15;

/// A key group, `0..max_parallelism`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(transparent)]
pub struct KeyGroup(pub u16);

impl KeyGroup {
    /// The two big-endian bytes that prefix every stored key of this group, so
    /// that a key-group range is one contiguous run of keys.
    pub fn prefix(self) -> [u8; 2] {
        self.0.to_be_bytes()
    }
}

impl fmt::Display for KeyGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The number of key groups of a state, fixed for the life of that state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct MaxParallelism(u32);

impl MaxParallelism {
    /// Validates `1..=32768`.
    pub fn new(max: u32) -> Result<Self> {
        if (1..=UPPER_BOUND_MAX_PARALLELISM).contains(&max) {
            Ok(Self(max))
        } else {
            Err(TypesError::InvalidMaxParallelism { got: max })
        }
    }

    /// The number of key groups.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Checks that `parallelism` is usable with this max parallelism.
    pub fn check_parallelism(self, parallelism: u32) -> Result<()> {
        if parallelism == 0 || parallelism > self.0 {
            return Err(TypesError::InvalidParallelism {
                got: parallelism,
                max: self.0,
            });
        }
        Ok(())
    }

    /// The key group of a Spark `hash` value: `pmod(hash, max_parallelism)`.
    pub fn key_group_of_hash(self, hash: i32) -> KeyGroup {
        let kg = i64::from(hash).rem_euclid(i64::from(self.0));
        KeyGroup(u16::try_from(kg).expect("a key group is below 32768"))
    }

    /// The subtask that owns `key_group` at `parallelism` (Flink's
    /// `computeOperatorIndexForKeyGroup`).
    pub fn subtask_of(self, key_group: KeyGroup, parallelism: u32) -> Result<SubtaskIndex> {
        self.check_parallelism(parallelism)?;
        self.check_key_group(key_group)?;
        let index = u64::from(key_group.0) * u64::from(parallelism) / u64::from(self.0);
        Ok(SubtaskIndex(
            u32::try_from(index).expect("index is below parallelism"),
        ))
    }

    /// Fails unless `key_group` is below this max parallelism.
    pub fn check_key_group(self, key_group: KeyGroup) -> Result<()> {
        if u32::from(key_group.0) < self.0 {
            Ok(())
        } else {
            Err(TypesError::InvalidKeyGroup {
                key_group: key_group.0.into(),
                max: self.0,
            })
        }
    }

    /// All key groups.
    pub fn full_range(self) -> KeyGroupRange {
        KeyGroupRange {
            start: 0,
            end: self.0,
        }
    }
}

impl TryFrom<u32> for MaxParallelism {
    type Error = TypesError;
    fn try_from(v: u32) -> Result<Self> {
        Self::new(v)
    }
}

impl From<MaxParallelism> for u32 {
    fn from(m: MaxParallelism) -> u32 {
        m.0
    }
}

impl fmt::Display for MaxParallelism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A contiguous, possibly empty run of key groups `start..end` (end exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyGroupRange {
    start: u32,
    end: u32,
}

impl KeyGroupRange {
    /// The range `start..end`; fails if `start > end` or `end > 32768`.
    pub fn new(start: u32, end: u32) -> Result<Self> {
        if start > end || end > UPPER_BOUND_MAX_PARALLELISM {
            return Err(TypesError::InvalidKeyGroupRange { start, end });
        }
        Ok(Self { start, end })
    }

    /// The empty range.
    pub const EMPTY: KeyGroupRange = KeyGroupRange { start: 0, end: 0 };

    /// The range owned by `subtask` at `parallelism` (Flink's
    /// `computeKeyGroupRangeForOperatorIndex`).
    pub fn for_subtask(
        max: MaxParallelism,
        parallelism: u32,
        subtask: SubtaskIndex,
    ) -> Result<Self> {
        max.check_parallelism(parallelism)?;
        if subtask.0 >= parallelism {
            return Err(TypesError::InvalidSubtask {
                index: subtask.0,
                parallelism,
            });
        }
        let (m, p, i) = (
            u64::from(max.get()),
            u64::from(parallelism),
            u64::from(subtask.0),
        );
        let start = (i * m).div_ceil(p);
        let end = ((i + 1) * m - 1) / p + 1;
        Ok(Self {
            start: u32::try_from(start).expect("start is at most max parallelism"),
            end: u32::try_from(end).expect("end is at most max parallelism"),
        })
    }

    /// First key group.
    pub fn start(self) -> u32 {
        self.start
    }

    /// One past the last key group.
    pub fn end(self) -> u32 {
        self.end
    }

    /// Number of key groups.
    pub fn len(self) -> u32 {
        self.end - self.start
    }

    /// True when the range holds no key group.
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    /// True when `kg` lies in the range.
    pub fn contains(self, kg: KeyGroup) -> bool {
        (self.start..self.end).contains(&u32::from(kg.0))
    }

    /// The key groups in both ranges (possibly empty).
    pub fn intersect(self, other: KeyGroupRange) -> KeyGroupRange {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        if start >= end {
            Self::EMPTY
        } else {
            Self { start, end }
        }
    }

    /// True when every key group of the range is below `max`.
    pub fn fits(self, max: MaxParallelism) -> bool {
        self.end <= max.get()
    }

    /// The key groups in order.
    pub fn iter(self) -> impl DoubleEndedIterator<Item = KeyGroup> + ExactSizeIterator {
        (self.start..self.end)
            .map(|kg| KeyGroup(u16::try_from(kg).expect("key groups are below 32768")))
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            f.write_str("[]")
        } else {
            write!(f, "[{}..={}]", self.start, self.end - 1)
        }
    }
}

/// The key group of a key made of one or more columns, as Spark computes it:
/// `pmod(hash(col1, col2, ...), max_parallelism)`.
pub fn key_group_of(key_columns: &[Value], max: MaxParallelism) -> KeyGroup {
    max.key_group_of_hash(hash_values(key_columns))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn flink_ranges_for_known_cases() {
        let max = MaxParallelism::new(128).expect("valid");
        let r: Vec<_> = (0..3)
            .map(|i| KeyGroupRange::for_subtask(max, 3, SubtaskIndex(i)).expect("valid"))
            .map(|r| (r.start(), r.end()))
            .collect();
        // Flink: [0,42], [43,85], [86,127] (inclusive ends).
        assert_eq!(r, vec![(0, 43), (43, 86), (86, 128)]);
    }

    #[test]
    fn invalid_arguments_are_errors() {
        assert!(MaxParallelism::new(0).is_err());
        assert!(MaxParallelism::new(32769).is_err());
        assert!(MaxParallelism::new(32768).is_ok());
        let max = MaxParallelism::new(4).expect("valid");
        assert!(KeyGroupRange::for_subtask(max, 5, SubtaskIndex(0)).is_err());
        assert!(KeyGroupRange::for_subtask(max, 0, SubtaskIndex(0)).is_err());
        assert!(KeyGroupRange::for_subtask(max, 2, SubtaskIndex(2)).is_err());
        assert!(max.subtask_of(KeyGroup(4), 2).is_err());
        assert!(KeyGroupRange::new(3, 2).is_err());
    }

    #[test]
    fn negative_hashes_use_pmod() {
        let max = MaxParallelism::new(128).expect("valid");
        assert_eq!(max.key_group_of_hash(-1), KeyGroup(127));
        assert_eq!(max.key_group_of_hash(i32::MIN), KeyGroup(0));
    }

    proptest! {
        #[test]
        fn ranges_partition_key_groups(max in 1u32..=32768, p_seed in 1u32..=32768) {
            let max = MaxParallelism::new(max).expect("valid");
            let p = 1 + (p_seed - 1) % max.get();
            let mut next = 0;
            for i in 0..p.min(64) {
                let r = KeyGroupRange::for_subtask(max, p, SubtaskIndex(i)).expect("valid");
                prop_assert_eq!(r.start(), next);
                prop_assert!(!r.is_empty());
                for kg in [r.start(), r.end() - 1] {
                    let owner = max.subtask_of(KeyGroup(kg as u16), p).expect("valid");
                    prop_assert_eq!(owner, SubtaskIndex(i));
                }
                next = r.end();
            }
            if p <= 64 {
                prop_assert_eq!(next, max.get());
            }
        }
    }
}
