//! Native (incremental) checkpoints: RocksDB's own checkpoint of the base, a
//! directory of hard-linked SST files plus the small files that describe them.
//!
//! SST files are immutable and their names are never reused by one database,
//! so a file already uploaded for an earlier checkpoint of the same backend
//! need not be uploaded again: only files new since then make a checkpoint's
//! incremental size. Uploading, reference counting and cleanup belong to
//! `weir-snapshot`; this module only creates and lists the local directory.

use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

use weir_state::KeyedStateBackend;
use weir_types::{Epoch, KeyGroupRange, MaxParallelism, StateDescriptor};

use crate::backend::RocksDbKeyedStateBackend;
use crate::error::{Result, RocksDbError};

/// One file of a native checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeFile {
    /// The file name inside the database directory (e.g. `000042.sst`); a
    /// restore must recreate it under this name.
    pub local_name: String,
    /// Where the file is now.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Whether the file is an immutable SST that later checkpoints of the same
    /// database may share; the others (MANIFEST, CURRENT, OPTIONS, ...) belong
    /// to this checkpoint only.
    pub shared: bool,
}

/// A native checkpoint taken by [`RocksDbKeyedStateBackend::native_checkpoint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeCheckpoint {
    /// The checkpoint directory; it can be opened as a database.
    pub dir: PathBuf,
    /// The max parallelism of the state.
    pub max_parallelism: MaxParallelism,
    /// The key groups the database held.
    pub key_group_range: KeyGroupRange,
    /// The states, indexed by state id (column family `state-<id>`).
    pub descriptors: Vec<StateDescriptor>,
    /// The last final epoch the checkpoint contains.
    pub last_final_epoch: Option<Epoch>,
    /// Every file, sorted by name.
    pub files: Vec<NativeFile>,
}

impl NativeCheckpoint {
    /// Total bytes of all files (what a full upload would send).
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The shared SST files that `previous`, an earlier checkpoint of the
    /// same database, does not have: what an incremental upload sends beside
    /// the private files.
    pub fn new_shared_files<'a>(
        &'a self,
        previous: &'a NativeCheckpoint,
    ) -> impl Iterator<Item = &'a NativeFile> + 'a {
        self.files.iter().filter(|f| {
            f.shared
                && !previous
                    .files
                    .iter()
                    .any(|p| p.shared && p.local_name == f.local_name)
        })
    }

    /// Bytes an incremental upload after `previous` sends: new shared files
    /// plus every private file.
    pub fn incremental_bytes(&self, previous: &NativeCheckpoint) -> u64 {
        let private: u64 = self
            .files
            .iter()
            .filter(|f| !f.shared)
            .map(|f| f.size)
            .sum();
        private + self.new_shared_files(previous).map(|f| f.size).sum::<u64>()
    }
}

/// A native checkpoint the backend's fold thread has been asked for
/// ([`RocksDbKeyedStateBackend::start_native_checkpoint`]).
#[derive(Debug)]
#[must_use = "the checkpoint directory appears whether or not anyone waits for it"]
pub struct PendingNativeCheckpoint {
    outcome: Receiver<Result<()>>,
    checkpoint: NativeCheckpoint,
}

impl PendingNativeCheckpoint {
    /// Blocks until the checkpoint exists, then lists its files.
    pub fn wait(self) -> Result<NativeCheckpoint> {
        let created = self.outcome.recv().map_err(|_| RocksDbError::FoldFailed {
            message: "the fold thread stopped before it created the checkpoint".to_owned(),
        })?;
        created?;
        Ok(NativeCheckpoint {
            files: list_files(&self.checkpoint.dir)?,
            ..self.checkpoint
        })
    }
}

impl RocksDbKeyedStateBackend {
    /// Creates a native checkpoint of the final epochs in `dir`, which must
    /// not exist (its parent must). Every epoch must be final, as for
    /// `snapshot_sync`. RocksDB flushes the memtables first, then hard-links
    /// the SST files when `dir` is on the same file system (copies
    /// otherwise).
    pub fn native_checkpoint(&mut self, dir: &Path) -> Result<NativeCheckpoint> {
        self.start_native_checkpoint(dir)?.wait()
    }

    /// Starts [`native_checkpoint`](Self::native_checkpoint) without waiting
    /// for it: the fold thread creates it once the final epochs are in the
    /// database and before it writes any epoch finalized later, so the
    /// checkpoint holds exactly today's final cut while this backend serves
    /// later epochs. This is the synchronous part of an incremental
    /// checkpoint; it only queues work.
    pub fn start_native_checkpoint(&mut self, dir: &Path) -> Result<PendingNativeCheckpoint> {
        self.check_snapshot_ready()?;
        let outcome = self.folder_mut().checkpoint(dir.to_owned())?;
        Ok(PendingNativeCheckpoint {
            outcome,
            checkpoint: NativeCheckpoint {
                dir: dir.to_owned(),
                max_parallelism: self.max_parallelism(),
                key_group_range: self.key_group_range(),
                descriptors: self.descriptors().to_vec(),
                last_final_epoch: self.last_final_epoch(),
                files: Vec::new(),
            },
        })
    }
}

/// The files of a checkpoint directory, sorted by name.
pub(crate) fn list_files(dir: &Path) -> Result<Vec<NativeFile>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(RocksDbError::io("list", dir))? {
        let entry = entry.map_err(RocksDbError::io("list", dir))?;
        let path = entry.path();
        let metadata = entry.metadata().map_err(RocksDbError::io("stat", &path))?;
        if !metadata.is_file() {
            continue;
        }
        let local_name = entry.file_name().to_string_lossy().into_owned();
        files.push(NativeFile {
            shared: local_name.ends_with(".sst"),
            local_name,
            path,
            size: metadata.len(),
        });
    }
    files.sort_by(|a, b| a.local_name.cmp(&b.local_name));
    Ok(files)
}
