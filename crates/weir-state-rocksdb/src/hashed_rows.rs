//! One epoch's writes to a value or list state: rows found by hash, sorted
//! only when they are asked for in order.
//!
//! Reads and writes of those states name one row at a time; rows are asked
//! for in order only once the epoch is frozen: by snapshots, a key group at a
//! time, and by the fold into RocksDB (which writes sorted batches several
//! times faster: a batch in first-write order spreads every memtable, and
//! so every L0 file, over the whole key space, which made the load of
//! `checkpoint_bench`'s incremental benchmark at 10^6 keys 2.4 s instead of
//! 0.8 and the full upload's scan after it 240 ms instead of 105). In a
//! `BTreeMap` of 50,000 rows a lookup took about 480 ns and an insert about
//! 650 ns (a dozen row comparisons down the tree, most of them cache
//! misses); through a hash index about 50 and 150-250 ns. A state host
//! reads the rows a task fetches through every unfolded epoch and writes
//! the ones it changed, so that was about half of its connection thread in
//! a RocksDB per-record job. Map states keep a `BTreeMap`: their reads and
//! clears work on row prefixes.

use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::OnceLock;

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use weir_state::SmallBytes;

use crate::overlay::Write;

/// The hash seed: fixed, so runs are reproducible.
const HASH_SEED: u64 = 0x5745_4952_524f_5753;

fn hash(row: &[u8]) -> u64 {
    FixedState::with_seed(HASH_SEED).hash_one(row)
}

/// The last write of an epoch to each row, by row.
#[derive(Debug, Clone, Default)]
pub(crate) struct HashedRows {
    /// In the order each row was first written.
    rows: Vec<(SmallBytes, Write)>,
    /// Indexes into `rows`, by the hash of the row.
    index: HashTable<u32>,
    /// Indexes into `rows` in row order, made on the first range read after
    /// the last write.
    sorted: OnceLock<Box<[u32]>>,
}

impl HashedRows {
    fn find(&self, row: &[u8]) -> Option<usize> {
        let rows = &self.rows;
        self.index
            .find(hash(row), |&i| rows[i as usize].0[..] == *row)
            .map(|&i| i as usize)
    }

    /// The write to `row`, if any.
    pub fn get(&self, row: &[u8]) -> Option<&Write> {
        self.find(row).map(|i| &self.rows[i].1)
    }

    /// The write to `row`, if any, to change in place.
    pub fn get_mut(&mut self, row: &[u8]) -> Option<&mut Write> {
        let i = self.find(row)?;
        Some(&mut self.rows[i].1)
    }

    /// Makes `write` the write to `row`.
    pub fn insert(&mut self, row: &[u8], write: Write) {
        self.sorted.take();
        let (rows, next) = (&self.rows, self.rows.len());
        let hash = hash(row);
        let entry = self.index.entry(
            hash,
            |&i| rows[i as usize].0[..] == *row,
            |&i| self::hash(&rows[i as usize].0),
        );
        match entry {
            Entry::Occupied(found) => {
                let i = *found.get() as usize;
                self.rows[i].1 = write;
            }
            Entry::Vacant(slot) => {
                slot.insert(
                    u32::try_from(next).expect("an epoch writes under 2^32 rows of one state"),
                );
                self.rows.push((SmallBytes::from_slice(row), write));
            }
        }
    }

    /// How many rows were written.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// The writes to rows in `[start, end)`, in row order.
    pub fn between<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a Write)> + 'a {
        let sorted = self.sorted();
        self.at(&sorted[self.range(sorted, start, end)])
    }

    /// Every write, in row order.
    pub fn in_order(&self) -> impl Iterator<Item = (&[u8], &Write)> {
        self.at(self.sorted())
    }

    /// The writes at `positions` (indexes into `rows`), in that order.
    fn at<'a>(&'a self, positions: &'a [u32]) -> impl Iterator<Item = (&'a [u8], &'a Write)> + 'a {
        positions.iter().map(|&i| {
            let (row, write) = &self.rows[i as usize];
            (&row[..], write)
        })
    }

    /// The positions in `sorted` of the rows in `[start, end)`.
    fn range(&self, sorted: &[u32], start: &[u8], end: &[u8]) -> Range<usize> {
        let row = |i: &u32| &self.rows[*i as usize].0[..];
        let first = sorted.partition_point(|i| row(i) < start);
        let last = first + sorted[first..].partition_point(|i| row(i) < end);
        first..last
    }

    fn sorted(&self) -> &[u32] {
        self.sorted.get_or_init(|| {
            // Most rows differ in their first eight bytes (key group, then
            // key), so most comparisons are of two integers, not of two
            // rows found through their indexes.
            let mut order: Vec<(u64, u32)> = (0..self.rows.len())
                .map(|i| (leading(&self.rows[i].0), i as u32))
                .collect();
            order.sort_unstable_by(|a, b| {
                a.0.cmp(&b.0)
                    .then_with(|| self.rows[a.1 as usize].0.cmp(&self.rows[b.1 as usize].0))
            });
            order.into_iter().map(|(_, i)| i).collect()
        })
    }
}

/// The first eight bytes of `row` (zero-padded) as an integer that orders
/// like them.
fn leading(row: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = row.len().min(8);
    bytes[..n].copy_from_slice(&row[..n]);
    u64::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(value: &[u8]) -> Write {
        Write::Put(SmallBytes::from_slice(value))
    }

    #[test]
    fn a_later_write_replaces_an_earlier_one_in_place() {
        let mut rows = HashedRows::default();
        rows.insert(b"b", put(b"1"));
        rows.insert(b"a", put(b"2"));
        rows.insert(b"b", Write::Delete);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.get(b"b"), Some(&Write::Delete));
        assert_eq!(rows.get(b"a"), Some(&put(b"2")));
        assert_eq!(rows.get(b"c"), None);
        let order: Vec<&[u8]> = rows.in_order().map(|(row, _)| row).collect();
        assert_eq!(order, [&b"a"[..], b"b"], "row order");
    }

    #[test]
    fn ranges_come_in_row_order_and_see_later_writes() {
        let mut rows = HashedRows::default();
        // Rows sharing their first eight bytes, and shorter ones, so both
        // parts of the sort's comparison are used.
        let written: [&[u8]; 6] = [
            b"kg000001z",
            b"kg000001a",
            b"b",
            b"kg000002",
            b"kg00000",
            b"a",
        ];
        for row in written {
            rows.insert(row, put(row));
        }
        let between = |rows: &HashedRows, start: &[u8], end: &[u8]| -> Vec<Vec<u8>> {
            rows.between(start, end)
                .map(|(row, _)| row.to_vec())
                .collect()
        };
        assert_eq!(
            between(&rows, b"kg000001", b"kg000002"),
            [b"kg000001a".to_vec(), b"kg000001z".to_vec()]
        );
        assert_eq!(between(&rows, b"", b"kg"), [b"a".to_vec(), b"b".to_vec()]);
        assert!(between(&rows, b"x", b"y").is_empty());
        rows.insert(b"kg0000015", put(b"new"));
        assert_eq!(
            between(&rows, b"kg000001", b"kg000002"),
            [
                b"kg0000015".to_vec(),
                b"kg000001a".to_vec(),
                b"kg000001z".to_vec()
            ],
            "a write after a range read is in the next one"
        );
        let all = between(&rows, b"", b"\xff");
        let mut expected = all.clone();
        expected.sort();
        assert_eq!(all, expected);
        assert_eq!(all.len(), 7);
    }

    #[test]
    fn rows_survive_the_index_growing() {
        let mut rows = HashedRows::default();
        for i in 0u32..10_000 {
            rows.insert(&i.to_be_bytes(), put(&i.to_le_bytes()));
        }
        for i in (0u32..10_000).step_by(7) {
            assert_eq!(rows.get(&i.to_be_bytes()), Some(&put(&i.to_le_bytes())));
        }
        let sorted: Vec<Vec<u8>> = rows
            .between(b"", b"\xff\xff\xff\xff\xff")
            .map(|(r, _)| r.to_vec())
            .collect();
        assert_eq!(sorted.len(), 10_000);
        assert!(sorted.windows(2).all(|w| w[0] < w[1]));
    }
}
