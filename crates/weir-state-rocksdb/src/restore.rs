//! Restore from native checkpoints, for any key-group range (rescaling).
//!
//! The downloaded checkpoint whose key groups overlap the target range most
//! becomes the new database: its files are hard-linked (SSTs, immutable) or
//! copied (the rest) into the target directory, and the key groups outside the
//! target range are dropped with range deletes (cheap; compaction reclaims the
//! space later). The entries of the target range held by every other
//! checkpoint (scale-in) are then copied in, state by state, matched by name.
//! Restoring from canonical snapshot files is `ingest`'s job instead.

use std::path::{Path, PathBuf};

use rocksdb::{ReadOptions, WriteBatch};
use weir_state::{KeyedStateBackend, StateId};
use weir_types::{KeyGroupRange, MaxParallelism};

use crate::backend::RocksDbKeyedStateBackend;
use crate::database::{self, Db, Meta, state_cf_name};
use crate::error::{Result, RocksDbError};
use crate::key::key_group_bound;
use crate::options::RocksDbOptions;

/// Bytes of copied entries per write batch when merging other checkpoints in.
const COPY_BATCH_BYTES: usize = 4 << 20;

/// Sorts after every row key: key groups stay below `0x8000`.
const AFTER_ALL_ROWS: &[u8] = &[0xff, 0xff, 0xff];

/// One downloaded checkpoint, open read-only.
struct Source<'a> {
    dir: &'a Path,
    db: Db,
    meta: Meta,
}

impl RocksDbKeyedStateBackend {
    /// Restores the key groups of `options.key_group_range` from native
    /// checkpoints downloaded into `dirs` (left unchanged), creating the
    /// database at `options.path`, which must be missing or empty. Every
    /// checkpoint must have `options.max_parallelism`; states of the same
    /// name must have equal descriptors. The restored backend's last final
    /// epoch is that of the checkpoint it was built from.
    pub fn restore_from_native(dirs: &[PathBuf], options: RocksDbOptions) -> Result<Self> {
        check_empty_target(&options.path)?;
        let engine = options.build();
        let target = options.key_group_range;
        // One checkpoint (no rescale-in) becomes the database as it is: it is
        // not opened twice just to be chosen.
        let (primary_dir, sources) = match dirs {
            [only] => (only.as_path(), Vec::new()),
            _ => {
                let mut sources = Vec::with_capacity(dirs.len());
                for dir in dirs {
                    let db = database::open_read_only(dir, &engine)?;
                    let meta = checked_meta(&db, dir, options.max_parallelism)?;
                    sources.push(Source {
                        dir: dir.as_path(),
                        db,
                        meta,
                    });
                }
                let primary = sources
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, s)| s.meta.key_group_range.intersect(target).len())
                    .map(|(index, _)| index)
                    .ok_or(RocksDbError::NoSources)?;
                // Close the read-only handle before the files are linked elsewhere.
                let primary = sources.swap_remove(primary);
                (primary.dir, sources)
            }
        };
        link_or_copy_dir(primary_dir, &options.path)?;

        let db = database::open(&options.path, &engine)?;
        let mut meta = checked_meta(&db, &options.path, options.max_parallelism)?;
        let mut batch = WriteBatch::default();
        for index in 0..meta.descriptors.len() {
            let id = StateId(u32::try_from(index).expect("invariant: fewer than 2^32 states"));
            let cf =
                db.cf_handle(&state_cf_name(id))
                    .ok_or_else(|| RocksDbError::CorruptMetadata {
                        path: options.path.clone(),
                        what: "column family of a registered state",
                    })?;
            batch.delete_range_cf(&cf, &[][..], key_group_bound(target.start()).as_slice());
            batch.delete_range_cf(
                &cf,
                key_group_bound(target.end()).as_slice(),
                AFTER_ALL_ROWS,
            );
        }
        database::put_header(&db, &mut batch, options.max_parallelism, target);
        db.write(batch)
            .map_err(RocksDbError::engine("drop key groups outside the range"))?;
        meta.key_group_range = target;

        let mut backend = Self::from_db(db, options.path, engine, meta)?;
        for source in &sources {
            backend.copy_range_from(source)?;
        }
        Ok(backend)
    }

    /// Copies the entries of this backend's key groups that `source` holds.
    fn copy_range_from(&mut self, source: &Source<'_>) -> Result<()> {
        let range: KeyGroupRange = source
            .meta
            .key_group_range
            .intersect(self.key_group_range());
        for (index, descriptor) in source.meta.descriptors.iter().enumerate() {
            let target = self.register_state(descriptor)?;
            if range.is_empty() {
                continue;
            }
            let source_id =
                StateId(u32::try_from(index).expect("invariant: fewer than 2^32 states"));
            let source_cf = source
                .db
                .cf_handle(&state_cf_name(source_id))
                .ok_or_else(|| RocksDbError::CorruptMetadata {
                    path: source.dir.to_owned(),
                    what: "column family of a registered state",
                })?;
            let mut read_options = ReadOptions::default();
            read_options.fill_cache(false);
            read_options.set_iterate_lower_bound(key_group_bound(range.start()));
            read_options.set_iterate_upper_bound(key_group_bound(range.end()));
            let mut rows = source.db.raw_iterator_cf_opt(&source_cf, read_options);
            rows.seek_to_first();
            let mut batch = WriteBatch::default();
            while let (Some(row), Some(value)) = (rows.key(), rows.value()) {
                batch.put_cf(&self.cf(target)?, row, value);
                if batch.size_in_bytes() >= COPY_BATCH_BYTES {
                    self.write_base(std::mem::take(&mut batch))?;
                }
                rows.next();
            }
            rows.status()
                .map_err(RocksDbError::engine("read checkpoint"))?;
            self.write_base(batch)?;
        }
        Ok(())
    }
}

/// The metadata of a checkpoint's database, which must have `max_parallelism`.
fn checked_meta(db: &Db, dir: &Path, max_parallelism: MaxParallelism) -> Result<Meta> {
    let meta = database::read_meta(db, dir)?.ok_or_else(|| RocksDbError::CorruptMetadata {
        path: dir.to_owned(),
        what: "weir metadata",
    })?;
    if meta.max_parallelism != max_parallelism {
        return Err(RocksDbError::MaxParallelismMismatch {
            path: dir.to_owned(),
            stored: meta.max_parallelism,
            requested: max_parallelism,
        });
    }
    Ok(meta)
}

fn check_empty_target(path: &Path) -> Result<()> {
    match std::fs::read_dir(path) {
        Ok(mut entries) => match entries.next() {
            Some(_) => Err(RocksDbError::TargetNotEmpty {
                path: path.to_owned(),
            }),
            None => Ok(()),
        },
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(RocksDbError::io("list", path)(err)),
    }
}

/// Hard-links SST files (immutable, so sharing their inodes is safe) and
/// copies the rest, which RocksDB may rewrite.
fn link_or_copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(RocksDbError::io("create", to))?;
    for entry in std::fs::read_dir(from).map_err(RocksDbError::io("list", from))? {
        let entry = entry.map_err(RocksDbError::io("list", from))?;
        let source = entry.path();
        if !entry
            .file_type()
            .map_err(RocksDbError::io("stat", &source))?
            .is_file()
        {
            continue;
        }
        let dest = to.join(entry.file_name());
        let linked = source.extension().is_some_and(|ext| ext == "sst")
            && std::fs::hard_link(&source, &dest).is_ok();
        if !linked {
            std::fs::copy(&source, &dest).map_err(RocksDbError::io("copy", &source))?;
        }
    }
    Ok(())
}
