//! Local checkpoint storage in the benchmark's directory: completing a
//! checkpoint so `LocalOperator::restore` can read it, dropping written files
//! from the page cache so restores read the disk, and directory sizes.

use std::num::NonZeroU64;
use std::path::Path;

use weir_checkpoint::{
    CheckpointKind, CheckpointMetadata, CheckpointStorage, OperatorStateMeta, StorageLocation,
    StorageOptions, SubtaskStateMeta,
};
use weir_types::{CheckpointId, Epoch, JobId, MaxParallelism, OperatorUid};

use crate::error::{Result, io};
use crate::workload;

/// File-system checkpoint storage for job `job` under `dir`.
pub fn checkpoints(dir: &Path, job: &str) -> Result<CheckpointStorage> {
    let location = StorageLocation::parse(&dir.to_string_lossy(), &StorageOptions::default())?;
    Ok(CheckpointStorage::filesystem(&location, JobId::new(job)?)?)
}

/// Publishes `_metadata` of checkpoint `id` holding one operator's subtasks;
/// returns the checkpoint directory's URL (what a restore is given).
pub async fn complete(
    storage: &CheckpointStorage,
    id: CheckpointId,
    uid: &OperatorUid,
    max_parallelism: MaxParallelism,
    cut_epoch: Epoch,
    subtasks: Vec<SubtaskStateMeta>,
) -> Result<String> {
    let mut metadata = CheckpointMetadata::new(
        storage.job_id().clone(),
        id,
        CheckpointKind::Checkpoint,
        cut_epoch,
    );
    metadata.operators.push(OperatorStateMeta {
        uid: uid.clone(),
        parallelism: u32::try_from(subtasks.len()).unwrap_or(u32::MAX),
        max_parallelism,
        key_types: Some(workload::key_types()),
        states: vec![workload::descriptor()?],
        subtasks,
    });
    storage.complete(&metadata).await?;
    let dir = storage
        .job_dir()
        .child(&weir_checkpoint::layout::checkpoint_dir(id))?;
    Ok(dir.url().to_owned())
}

/// Writes every file under `dir` to disk and drops it from the page cache,
/// so the next read of it comes from the disk (what `benchmarks/diskbw.py`
/// does for its read measurement). Clean pages are dropped without root.
pub fn evict(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(io("list", dir))? {
        let path = entry.map_err(io("list", dir))?.path();
        if path.is_dir() {
            evict(&path)?;
        } else {
            let file = std::fs::File::open(&path).map_err(io("open", &path))?;
            file.sync_all().map_err(io("sync", &path))?;
            rustix::fs::fadvise(&file, 0, None::<NonZeroU64>, rustix::fs::Advice::DontNeed)
                .map_err(|e| std::io::Error::from_raw_os_error(e.raw_os_error()))
                .map_err(io("fadvise", &path))?;
        }
    }
    Ok(())
}

/// Total bytes of the files under `dir`.
pub fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(io("list", dir))? {
        let entry = entry.map_err(io("list", dir))?;
        let path = entry.path();
        let meta = entry.metadata().map_err(io("stat", &path))?;
        total += if meta.is_dir() {
            dir_bytes(&path)?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
