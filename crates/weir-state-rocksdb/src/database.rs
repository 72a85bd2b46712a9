//! Opening the database and its metadata column family.
//!
//! A Weir RocksDB directory holds one column family per registered state
//! (`state-<id>`) and a metadata column family (`weir-meta`) with the format
//! version, max parallelism, key-group range, last final epoch and every
//! state's descriptor, so a reopened or restored database knows its states.
//! This module reads and writes those records; epoch logic and state access
//! live in the backend.

use std::path::Path;

use rocksdb::{ColumnFamilyDescriptor, DBWithThreadMode, IteratorMode, MultiThreaded, WriteBatch};
use weir_state::StateId;
use weir_types::{Epoch, FORMAT_VERSION, KeyGroupRange, MaxParallelism, StateDescriptor};

use crate::error::{Result, RocksDbError};
use crate::options::EngineOptions;

/// The database type: multi-threaded column families let a state be
/// registered through a shared handle while a snapshot holds the database.
pub(crate) type Db = DBWithThreadMode<MultiThreaded>;

/// The metadata column family.
pub(crate) const META_CF: &str = "weir-meta";

const FORMAT_KEY: &[u8] = b"format";
const MAX_PARALLELISM_KEY: &[u8] = b"max_parallelism";
const RANGE_KEY: &[u8] = b"key_group_range";
const LAST_FINAL_KEY: &[u8] = b"last_final_epoch";
const STATE_PREFIX: &[u8] = b"state/";

/// The column family of a state.
pub(crate) fn state_cf_name(id: StateId) -> String {
    format!("state-{}", id.0)
}

/// What the metadata column family records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Meta {
    /// The max parallelism of the state.
    pub max_parallelism: MaxParallelism,
    /// The key groups the database holds.
    pub key_group_range: KeyGroupRange,
    /// The last final epoch, if any.
    pub last_final: Option<Epoch>,
    /// The states, indexed by [`StateId`].
    pub descriptors: Vec<StateDescriptor>,
}

/// Opens (or creates) the database at `path` with every column family it has.
pub(crate) fn open(path: &Path, options: &EngineOptions) -> Result<Db> {
    let names = existing_column_families(path, options)?;
    Db::open_cf_descriptors(&options.db, path, descriptors(names, options))
        .map_err(RocksDbError::engine("open database"))
}

/// Opens an existing database at `path` for reading only.
pub(crate) fn open_read_only(path: &Path, options: &EngineOptions) -> Result<Db> {
    let names =
        Db::list_cf(&options.db, path).map_err(RocksDbError::engine("list column families"))?;
    Db::open_cf_descriptors_read_only(&options.db, path, descriptors(names, options), false)
        .map_err(RocksDbError::engine("open checkpoint read-only"))
}

fn existing_column_families(path: &Path, options: &EngineOptions) -> Result<Vec<String>> {
    if !path.join("CURRENT").exists() {
        return Ok(vec![META_CF.to_owned()]);
    }
    Db::list_cf(&options.db, path).map_err(RocksDbError::engine("list column families"))
}

fn descriptors(names: Vec<String>, options: &EngineOptions) -> Vec<ColumnFamilyDescriptor> {
    names
        .into_iter()
        .filter(|name| name != rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
        .map(|name| {
            let opts = if name == META_CF {
                &options.meta
            } else {
                &options.state
            };
            ColumnFamilyDescriptor::new(name, opts.clone())
        })
        .collect()
}

/// Reads the metadata; `None` for a database Weir never initialized.
pub(crate) fn read_meta(db: &Db, path: &Path) -> Result<Option<Meta>> {
    let cf = db
        .cf_handle(META_CF)
        .ok_or_else(|| corrupt(path, "metadata column family"))?;
    let get = |key: &[u8]| {
        db.get_cf(&cf, key)
            .map_err(RocksDbError::engine("read metadata"))
    };
    let Some(format) = get(FORMAT_KEY)? else {
        return Ok(None);
    };
    let found = u32::from_be_bytes(fixed(&format).ok_or_else(|| corrupt(path, "format version"))?);
    if found > FORMAT_VERSION {
        return Err(RocksDbError::UnsupportedFormat {
            path: path.to_owned(),
            found,
            supported: FORMAT_VERSION,
        });
    }
    let max_parallelism = get(MAX_PARALLELISM_KEY)?
        .and_then(|v| fixed(&v))
        .and_then(|v| MaxParallelism::new(u32::from_be_bytes(v)).ok())
        .ok_or_else(|| corrupt(path, "max parallelism"))?;
    let key_group_range = get(RANGE_KEY)?
        .and_then(|v| fixed::<8>(&v))
        .and_then(|v| {
            let (start, end) = v.split_at(4);
            KeyGroupRange::new(
                u32::from_be_bytes(fixed(start)?),
                u32::from_be_bytes(fixed(end)?),
            )
            .ok()
        })
        .ok_or_else(|| corrupt(path, "key-group range"))?;
    let last_final = match get(LAST_FINAL_KEY)? {
        Some(v) => Some(Epoch(u64::from_be_bytes(
            fixed(&v).ok_or_else(|| corrupt(path, "last final epoch"))?,
        ))),
        None => None,
    };
    let mut descriptors = Vec::new();
    let mode = IteratorMode::From(STATE_PREFIX, rocksdb::Direction::Forward);
    for item in db.iterator_cf(&cf, mode) {
        let (key, value) = item.map_err(RocksDbError::engine("read metadata"))?;
        let Some(id) = key.strip_prefix(STATE_PREFIX) else {
            break;
        };
        let id = fixed(id).map(u32::from_be_bytes);
        if id != Some(u32::try_from(descriptors.len()).expect("invariant: fewer than 2^32 states"))
        {
            return Err(corrupt(path, "state ids"));
        }
        let descriptor = serde_json::from_slice::<StateDescriptor>(&value)
            .ok()
            .and_then(|d| d.validated().ok())
            .ok_or_else(|| corrupt(path, "state descriptor"))?;
        descriptors.push(descriptor);
    }
    Ok(Some(Meta {
        max_parallelism,
        key_group_range,
        last_final,
        descriptors,
    }))
}

/// Adds the fixed records (format, max parallelism, key-group range) to `batch`.
pub(crate) fn put_header(
    db: &Db,
    batch: &mut WriteBatch,
    max: MaxParallelism,
    range: KeyGroupRange,
) {
    let cf = meta_cf(db);
    batch.put_cf(&cf, FORMAT_KEY, FORMAT_VERSION.to_be_bytes());
    batch.put_cf(&cf, MAX_PARALLELISM_KEY, max.get().to_be_bytes());
    let mut bytes = range.start().to_be_bytes().to_vec();
    bytes.extend_from_slice(&range.end().to_be_bytes());
    batch.put_cf(&cf, RANGE_KEY, bytes);
}

/// Adds the last final epoch to `batch`.
pub(crate) fn put_last_final(db: &Db, batch: &mut WriteBatch, epoch: Epoch) {
    batch.put_cf(&meta_cf(db), LAST_FINAL_KEY, epoch.0.to_be_bytes());
}

/// Adds a state's descriptor to `batch`.
pub(crate) fn put_descriptor(
    db: &Db,
    batch: &mut WriteBatch,
    id: StateId,
    descriptor: &StateDescriptor,
) {
    let mut key = STATE_PREFIX.to_vec();
    key.extend_from_slice(&id.0.to_be_bytes());
    let json = serde_json::to_vec(descriptor).expect("invariant: descriptors serialize to json");
    batch.put_cf(&meta_cf(db), key, json);
}

fn meta_cf(db: &Db) -> std::sync::Arc<rocksdb::BoundColumnFamily<'_>> {
    db.cf_handle(META_CF)
        .expect("invariant: open() creates the metadata column family")
}

fn fixed<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
    bytes.try_into().ok()
}

fn corrupt(path: &Path, what: &'static str) -> RocksDbError {
    RocksDbError::CorruptMetadata {
        path: path.to_owned(),
        what,
    }
}
