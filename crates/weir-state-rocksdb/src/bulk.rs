//! Bulk loads (restores): rows are collected per state, sorted, written as
//! SST files with RocksDB's `SstFileWriter` and ingested whole, instead of
//! going through the memtable one `put` at a time.
//!
//! Rows gather in one arena per state; when the arenas hold
//! [`FLUSH_BYTES`] (or the load finishes) each state's rows are sorted and
//! become one file. Files of one load may overlap in key range (a key group
//! can straddle a flush); RocksDB ingests overlapping files above the older
//! ones, and a snapshot holds each row once, so no row is lost or doubled.
//! If the same row comes twice in one file, the later one wins, as two
//! `put`s would.

use std::path::{Path, PathBuf};

use rocksdb::{IngestExternalFileOptions, SstFileWriter};
use weir_state::StateId;

use crate::database::Db;
use crate::error::{Result, RocksDbError};

/// Row and value bytes held before they are written out.
const FLUSH_BYTES: usize = 64 << 20;

/// The rows of one state, back to back in one buffer.
#[derive(Debug, Default)]
struct Arena {
    bytes: Vec<u8>,
    /// Per row: where it starts in `bytes`, its key length, its value length.
    rows: Vec<(usize, u32, u32)>,
}

impl Arena {
    fn push(&mut self, row: &[u8], value: &[u8]) -> Result<()> {
        let too_long = |what| RocksDbError::BulkLoad {
            message: format!("a {what} longer than 4 GiB"),
        };
        let key_len = u32::try_from(row.len()).map_err(|_| too_long("row key"))?;
        let value_len = u32::try_from(value.len()).map_err(|_| too_long("value"))?;
        self.rows.push((self.bytes.len(), key_len, value_len));
        self.bytes.extend_from_slice(row);
        self.bytes.extend_from_slice(value);
        Ok(())
    }

    fn key(&self, &(start, key_len, _): &(usize, u32, u32)) -> &[u8] {
        &self.bytes[start..start + key_len as usize]
    }

    fn value(&self, &(start, key_len, value_len): &(usize, u32, u32)) -> &[u8] {
        let from = start + key_len as usize;
        &self.bytes[from..from + value_len as usize]
    }

    /// The rows in key order, the last of equal keys only.
    fn sorted(&mut self) -> Vec<(usize, u32, u32)> {
        let mut rows = std::mem::take(&mut self.rows);
        rows.sort_by(|a, b| self.key(a).cmp(self.key(b)));
        // Sorting is stable, so of equal keys the last pushed is last.
        let mut kept: Vec<(usize, u32, u32)> = Vec::with_capacity(rows.len());
        for row in rows {
            match kept.last_mut() {
                Some(last) if self.key(last) == self.key(&row) => *last = row,
                _ => kept.push(row),
            }
        }
        kept
    }
}

/// A bulk load in progress (see the module docs).
#[derive(Debug)]
pub(crate) struct BulkLoad {
    /// Where SST files are written before RocksDB takes them.
    dir: PathBuf,
    arenas: Vec<Arena>,
    held: usize,
    /// When to write out (`FLUSH_BYTES`; smaller in tests).
    pub(crate) flush_bytes: usize,
    files: u64,
}

impl BulkLoad {
    /// A load whose files go to `dir` (created now, removed by `finish`).
    pub fn start(dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&dir).map_err(RocksDbError::io("create", &dir))?;
        Ok(Self {
            dir,
            arenas: Vec::new(),
            held: 0,
            flush_bytes: FLUSH_BYTES,
            files: 0,
        })
    }

    /// Adds one row of `state`.
    pub fn push(&mut self, state: StateId, row: &[u8], value: &[u8]) -> Result<()> {
        let index = state.0 as usize;
        if self.arenas.len() <= index {
            self.arenas.resize_with(index + 1, Arena::default);
        }
        self.arenas[index].push(row, value)?;
        self.held += row.len() + value.len();
        Ok(())
    }

    /// Whether enough is held to write it out.
    pub fn full(&self) -> bool {
        self.held >= self.flush_bytes
    }

    /// Writes every state's rows as a sorted SST file and ingests it into
    /// the state's column family (`cf_names` by state id).
    pub fn flush(
        &mut self,
        db: &Db,
        options: &rocksdb::Options,
        cf_names: &[String],
    ) -> Result<()> {
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        for (index, arena) in self.arenas.iter_mut().enumerate() {
            if arena.rows.is_empty() {
                continue;
            }
            let rows = arena.sorted();
            self.files += 1;
            let path = self.dir.join(format!("{index}-{}.sst", self.files));
            write_sst(&path, options, arena, &rows)?;
            let cf = cf_names
                .get(index)
                .and_then(|name| db.cf_handle(name))
                .ok_or_else(|| RocksDbError::BulkLoad {
                    message: format!("state {index} has no column family"),
                })?;
            db.ingest_external_file_cf_opts(&cf, &ingest, vec![&path])
                .map_err(RocksDbError::engine("ingest a bulk-loaded file"))?;
            arena.bytes.clear();
        }
        self.held = 0;
        Ok(())
    }

    /// Writes what is left and removes the load's directory.
    pub fn finish(
        mut self,
        db: &Db,
        options: &rocksdb::Options,
        cf_names: &[String],
    ) -> Result<()> {
        self.flush(db, options, cf_names)?;
        std::fs::remove_dir_all(&self.dir).map_err(RocksDbError::io("remove", &self.dir))
    }
}

fn write_sst(
    path: &Path,
    options: &rocksdb::Options,
    arena: &Arena,
    rows: &[(usize, u32, u32)],
) -> Result<()> {
    let mut writer = SstFileWriter::create(options);
    writer
        .open(path)
        .map_err(RocksDbError::engine("create a bulk-load file"))?;
    for row in rows {
        writer
            .put(arena.key(row), arena.value(row))
            .map_err(RocksDbError::engine("write a bulk-load file"))?;
    }
    writer
        .finish()
        .map_err(RocksDbError::engine("finish a bulk-load file"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sort_by_key_and_the_last_of_equal_keys_wins() {
        let mut arena = Arena::default();
        for (row, value) in [("b", "1"), ("a", "2"), ("b", "3"), ("c", "4"), ("a", "5")] {
            arena.push(row.as_bytes(), value.as_bytes()).expect("small");
        }
        let rows = arena.sorted();
        let pairs: Vec<(&[u8], &[u8])> = rows
            .iter()
            .map(|row| (arena.key(row), arena.value(row)))
            .collect();
        assert_eq!(
            pairs,
            vec![
                (&b"a"[..], &b"5"[..]),
                (&b"b"[..], &b"3"[..]),
                (&b"c"[..], &b"4"[..])
            ]
        );
    }
}
