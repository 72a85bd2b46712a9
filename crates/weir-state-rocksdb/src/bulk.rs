//! Bulk loads (restores): rows are collected per state, sorted, written as
//! SST files with RocksDB's `SstFileWriter` and ingested whole, instead of
//! going through the memtable one `put` at a time.
//!
//! Rows gather in one arena per state. When the arenas hold
//! [`FLUSH_BYTES`] (or the load finishes) they go to a writer thread, which
//! sorts each state's rows and writes them as files, several at once when
//! there are enough rows and free cores ([`LoadThreads`]): contiguous
//! ranges of the sorted rows, which do not overlap. Meanwhile the restore
//! decodes the next rows into a second set of arenas; those of the last
//! write come back for reuse. So a restore decodes and writes files at the
//! same time, and a load holds at most twice `FLUSH_BYTES` of rows.
//!
//! Files of one load are ingested in the order their rows came. They may
//! overlap in key range (a key group can straddle a flush); RocksDB places
//! an ingested file above the older ones it overlaps, and a snapshot holds
//! each row once, so no row is lost or doubled. If the same row comes twice,
//! the later one wins, as two `put`s would.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use rocksdb::{IngestExternalFileOptions, Options, SstFileWriter};
use weir_state::{LoadThreads, StateId};

use crate::database::Db;
use crate::error::{Result, RocksDbError};

/// Row and value bytes collected before they go to the writer thread.
const FLUSH_BYTES: usize = 8 << 20;

/// Fewer rows than this per file are not worth a thread of their own.
const MIN_PART_ROWS: usize = 64 << 10;

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

    fn key(&self, row: &(usize, u32, u32)) -> &[u8] {
        key_in(&self.bytes, row)
    }

    fn value(&self, &(start, key_len, value_len): &(usize, u32, u32)) -> &[u8] {
        let from = start + key_len as usize;
        &self.bytes[from..from + value_len as usize]
    }

    /// Puts the rows in key order and keeps the last of equal keys only.
    fn sort(&mut self) {
        let Self { bytes, rows } = self;
        let key = |row: &(usize, u32, u32)| key_in(bytes, row);
        rows.sort_by(|a, b| key(a).cmp(key(b)));
        // Sorting is stable, so of equal keys the last pushed is last; it
        // takes the place of the first, which `dedup_by` keeps.
        rows.dedup_by(|later, kept| {
            let same = key(later) == key(kept);
            if same {
                *kept = *later;
            }
            same
        });
    }

    /// Forgets every row, keeping both buffers' memory for the next ones.
    fn clear(&mut self) {
        self.bytes.clear();
        self.rows.clear();
    }
}

/// The key of `row` among an arena's `bytes`.
fn key_in<'a>(bytes: &'a [u8], &(start, key_len, _): &(usize, u32, u32)) -> &'a [u8] {
    &bytes[start..start + key_len as usize]
}

/// A bulk load in progress (see the module docs).
#[derive(Debug)]
pub(crate) struct BulkLoad {
    /// Where SST files are written before RocksDB takes them.
    dir: PathBuf,
    /// Rows being collected, by state.
    arenas: Vec<Arena>,
    /// Emptied arenas back from the writer, for the rows after these.
    spare: Vec<Arena>,
    held: usize,
    /// When to write out (`FLUSH_BYTES`; smaller in tests).
    pub(crate) flush_bytes: usize,
    /// The fewest rows of a file written on a thread of its own
    /// (`MIN_PART_ROWS`; smaller in tests).
    pub(crate) min_part_rows: usize,
    flushes: u64,
    /// The last flush's rows being sorted and written.
    writing: Option<JoinHandle<Result<Written>>>,
}

/// What a writer thread hands back: the files it wrote, by state index and
/// in key order, and the emptied arenas.
#[derive(Debug)]
struct Written {
    files: Vec<(usize, Vec<PathBuf>)>,
    arenas: Vec<Arena>,
}

impl BulkLoad {
    /// A load whose files go to `dir` (created now, removed by `finish`).
    pub fn start(dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&dir).map_err(RocksDbError::io("create", &dir))?;
        Ok(Self {
            dir,
            arenas: Vec::new(),
            spare: Vec::new(),
            held: 0,
            flush_bytes: FLUSH_BYTES,
            min_part_rows: MIN_PART_ROWS,
            flushes: 0,
            writing: None,
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

    /// Ingests the files of the previous flush (waiting for them), then
    /// hands the rows held now to a writer thread; the next `flush` or
    /// `finish` ingests their files. `cf_names` by state id.
    pub fn flush(&mut self, db: &Db, options: &Options, cf_names: &[String]) -> Result<()> {
        self.ingest_written(db, cf_names)?;
        if self.held == 0 {
            return Ok(());
        }
        self.flushes += 1;
        let arenas = std::mem::replace(&mut self.arenas, std::mem::take(&mut self.spare));
        let (dir, flush, min_part_rows) = (self.dir.clone(), self.flushes, self.min_part_rows);
        let options = options.clone();
        let writer = std::thread::Builder::new()
            .name("weir-bulk-load".to_owned())
            .spawn(move || write_files(arenas, &dir, flush, &options, min_part_rows))
            .map_err(RocksDbError::io("start a writer thread for", &self.dir))?;
        self.writing = Some(writer);
        self.held = 0;
        Ok(())
    }

    /// Waits for the writer thread, if one runs, and ingests its files into
    /// the states' column families.
    fn ingest_written(&mut self, db: &Db, cf_names: &[String]) -> Result<()> {
        let Some(writer) = self.writing.take() else {
            return Ok(());
        };
        let written = writer.join().map_err(|_| RocksDbError::BulkLoad {
            message: "the thread writing bulk-load files panicked".to_owned(),
        })??;
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        for (index, paths) in &written.files {
            let cf = cf_names
                .get(*index)
                .and_then(|name| db.cf_handle(name))
                .ok_or_else(|| RocksDbError::BulkLoad {
                    message: format!("state {index} has no column family"),
                })?;
            db.ingest_external_file_cf_opts(&cf, &ingest, paths.iter().collect())
                .map_err(RocksDbError::engine("ingest bulk-loaded files"))?;
        }
        self.spare = written.arenas;
        Ok(())
    }

    /// Writes and ingests what is left and removes the load's directory.
    pub fn finish(mut self, db: &Db, options: &Options, cf_names: &[String]) -> Result<()> {
        self.flush(db, options, cf_names)?;
        self.ingest_written(db, cf_names)?;
        std::fs::remove_dir_all(&self.dir).map_err(RocksDbError::io("remove", &self.dir))
    }
}

impl Drop for BulkLoad {
    /// A load given up on (a failed restore) still waits for its writer, so
    /// no thread writes into a directory its owner is about to remove.
    fn drop(&mut self) {
        if let Some(writer) = self.writing.take() {
            let _ = writer.join();
        }
    }
}

/// Sorts each state's rows and writes them as files in `dir`: one file per
/// contiguous range of the sorted rows, written at once on as many threads
/// as [`LoadThreads`] grants, each range at least `min_part_rows` long.
fn write_files(
    mut arenas: Vec<Arena>,
    dir: &Path,
    flush: u64,
    options: &Options,
    min_part_rows: usize,
) -> Result<Written> {
    let threads = LoadThreads::take();
    let mut files = Vec::new();
    for (index, arena) in arenas.iter_mut().enumerate() {
        if arena.rows.is_empty() {
            continue;
        }
        arena.sort();
        let sorted = &*arena;
        let rows = &sorted.rows;
        let parts = (rows.len() / min_part_rows.max(1)).clamp(1, threads.count());
        let ranges: Vec<&[(usize, u32, u32)]> = rows.chunks(rows.len().div_ceil(parts)).collect();
        let paths: Vec<PathBuf> = (0..ranges.len())
            .map(|part| dir.join(format!("{index}-{flush}-{part}.sst")))
            .collect();
        std::thread::scope(|scope| {
            let mut parts = ranges.iter().zip(&paths);
            let (first_rows, first_path) = parts
                .next()
                .expect("invariant: a state with rows has a range");
            let others: Vec<_> = parts
                .map(|(rows, path)| scope.spawn(move || write_sst(path, options, sorted, rows)))
                .collect();
            let first = write_sst(first_path, options, sorted, first_rows);
            others.into_iter().fold(first, |done, other| {
                let written = other.join().unwrap_or_else(|_| {
                    Err(RocksDbError::BulkLoad {
                        message: "a thread writing a bulk-load file panicked".to_owned(),
                    })
                });
                done.and(written)
            })
        })?;
        arena.clear();
        files.push((index, paths));
    }
    Ok(Written { files, arenas })
}

fn write_sst(
    path: &Path,
    options: &Options,
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
        arena.sort();
        let pairs: Vec<(&[u8], &[u8])> = arena
            .rows
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
