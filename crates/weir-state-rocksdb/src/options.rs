//! RocksDB options: Flink's predefined profiles plus the overrides users
//! reach for most (block cache, write buffer, compression).
//!
//! This module builds `rocksdb::Options`; it opens nothing. Every state
//! column family gets the same options, including the list-concatenating merge
//! operator: it only runs on merge operands, which only list states write, so
//! reopening a database needs no per-state options.

use std::path::PathBuf;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompactionStyle, DBCompressionType, LogLevel, MergeOperands,
};
use weir_types::{KeyGroupRange, MaxParallelism};

/// Flink's predefined option profiles (`PredefinedOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PredefinedOptions {
    /// RocksDB's defaults, without fsync and with quiet logs.
    #[default]
    Default,
    /// Level compaction with dynamic level sizes, more background threads and
    /// no limit on open files: fewer, larger reads for spinning disks.
    SpinningDiskOptimized,
    /// [`SpinningDiskOptimized`](Self::SpinningDiskOptimized) plus a 256 MiB
    /// block cache, 128 KiB blocks, bloom filters and larger write buffers
    /// and files: for spinning disks when memory is plentiful.
    SpinningDiskOptimizedHighMem,
    /// More background threads and no limit on open files, for flash.
    FlashSsdOptimized,
}

/// Block compression of SST files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// No compression.
    None,
    /// LZ4: fast, modest ratio (the default).
    #[default]
    Lz4,
    /// Zstandard: better ratio, more CPU.
    Zstd,
}

/// How to open a RocksDB keyed state backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksDbOptions {
    /// The database directory (created if missing).
    pub path: PathBuf,
    /// The max parallelism of the state; fixed for the life of the database.
    pub max_parallelism: MaxParallelism,
    /// The key groups this backend holds.
    pub key_group_range: KeyGroupRange,
    /// The base profile.
    pub profile: PredefinedOptions,
    /// Bytes of the block cache shared by all states; `None` keeps the
    /// profile's choice.
    pub block_cache_size: Option<usize>,
    /// Bytes of each state's memtable; `None` keeps the profile's choice.
    pub write_buffer_size: Option<usize>,
    /// SST compression; `None` keeps the default ([`Compression::Lz4`]).
    pub compression: Option<Compression>,
}

/// Block cache of the profiles that do not set one (RocksDB's own default is
/// a small cache per column family; one shared cache bounds memory instead).
const DEFAULT_BLOCK_CACHE: usize = 64 << 20;

impl RocksDbOptions {
    /// Options with the [`PredefinedOptions::Default`] profile and no overrides.
    pub fn new(
        path: impl Into<PathBuf>,
        max_parallelism: MaxParallelism,
        key_group_range: KeyGroupRange,
    ) -> Self {
        Self {
            path: path.into(),
            max_parallelism,
            key_group_range,
            profile: PredefinedOptions::Default,
            block_cache_size: None,
            write_buffer_size: None,
            compression: None,
        }
    }

    /// The same options with another profile.
    pub fn with_profile(mut self, profile: PredefinedOptions) -> Self {
        self.profile = profile;
        self
    }

    /// Builds the database-wide and per-column-family RocksDB options.
    pub(crate) fn build(&self) -> EngineOptions {
        let spinning = matches!(
            self.profile,
            PredefinedOptions::SpinningDiskOptimized
                | PredefinedOptions::SpinningDiskOptimizedHighMem
        );
        let high_mem = self.profile == PredefinedOptions::SpinningDiskOptimizedHighMem;

        let mut db = rocksdb::Options::default();
        db.create_if_missing(true);
        db.create_missing_column_families(true);
        db.set_use_fsync(false);
        db.set_log_level(LogLevel::Header);
        db.set_stats_dump_period_sec(0);
        db.set_keep_log_file_num(4);
        if self.profile != PredefinedOptions::Default {
            db.increase_parallelism(4);
            db.set_max_open_files(-1);
        }

        let mut table = BlockBasedOptions::default();
        let cache_size = self.block_cache_size.unwrap_or(if high_mem {
            256 << 20
        } else {
            DEFAULT_BLOCK_CACHE
        });
        table.set_block_cache(&Cache::new_lru_cache(cache_size));
        if high_mem {
            table.set_block_size(128 << 10);
            table.set_bloom_filter(10.0, false);
        }

        let mut state = rocksdb::Options::default();
        state.set_block_based_table_factory(&table);
        state.set_compression_type(match self.compression.unwrap_or_default() {
            Compression::None => DBCompressionType::None,
            Compression::Lz4 => DBCompressionType::Lz4,
            Compression::Zstd => DBCompressionType::Zstd,
        });
        if spinning {
            state.set_compaction_style(DBCompactionStyle::Level);
            state.set_level_compaction_dynamic_level_bytes(true);
        }
        if high_mem {
            state.set_target_file_size_base(256 << 20);
            state.set_max_bytes_for_level_base(1 << 30);
            state.set_write_buffer_size(64 << 20);
            state.set_min_write_buffer_number_to_merge(3);
            state.set_max_write_buffer_number(4);
        }
        if let Some(size) = self.write_buffer_size {
            state.set_write_buffer_size(size);
        }
        state.set_merge_operator_associative("weir-list-concat", concat_lists);
        let state = state
            .get_options_from_string(format!("{SCAN_FLUSH_TRIGGERS};{BOTTOMMOST_REWRITE_DELAY}"))
            .expect("RocksDB knows the scan flush triggers and the bottommost rewrite delay");

        EngineOptions {
            db,
            state,
            meta: rocksdb::Options::default(),
        }
    }
}

/// When a state's memtable holds many versions of its rows, a full
/// snapshot's scan steps over (or reseeks past) every older one: after 20
/// epochs rewrote the same keys into one memtable, a third of the scan went
/// to reseeking its skip list. RocksDB marks a memtable for flush (done on
/// the next write, which keeps only the versions a live snapshot can read)
/// once one step of an iterator skipped 1,000 hidden entries, or its steps
/// between two seeks skipped at least 1,000, two per step on average. A
/// state written once per key (loaded in one epoch) is never flushed for a
/// scan. The crate has no setters for these, so RocksDB parses them.
const SCAN_FLUSH_TRIGGERS: &str =
    "memtable_op_scan_flush_trigger=1000;memtable_avg_op_scan_flush_trigger=2";

/// RocksDB rewrites a file of the last level, to drop versions only a
/// released snapshot could read and to zero its sequence numbers, as soon as
/// that snapshot goes. The backend holds a snapshot while it folds epochs, so
/// without a delay checkpointed files were rewritten soon after (a restored
/// database's within its first epoch) and the next incremental checkpoint
/// uploaded them again (seen in the Spark tests: the first checkpoint after
/// a restore often sent every byte). An hour keeps a file's
/// name, and what incremental checkpoints reuse, that long; the space the
/// rewrite frees (a fifth of a file in those tests) waits for it.
const BOTTOMMOST_REWRITE_DELAY: &str = "bottommost_file_compaction_delay=3600";

/// Built RocksDB options.
#[derive(Clone)]
pub(crate) struct EngineOptions {
    /// Database-wide options (also used for the `default` column family).
    pub db: rocksdb::Options,
    /// Options of every state column family.
    pub state: rocksdb::Options,
    /// Options of the metadata column family.
    pub meta: rocksdb::Options,
}

/// The merge operator of list states: list payloads concatenate (see
/// [`weir_state::push_list_item`]), so appending never reads.
fn concat_lists(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    let len = existing.map_or(0, <[u8]>::len) + operands.iter().map(<[u8]>::len).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(existing.unwrap_or_default());
    for operand in operands.iter() {
        out.extend_from_slice(operand);
    }
    Some(out)
}
