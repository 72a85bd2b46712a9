//! A job directory's timeline in storage: the `_lineage` record, the
//! recovery a run performs when it starts or restarts, and the state a
//! restore of the latest state resumes from.
//!
//! Recovery and every write here assume the caller holds the job
//! directory's lease (`lease`): two runs recovering one directory at once
//! would delete each other's checkpoints.
//!
//! Checkpoints of an abandoned timeline (left when a run restored an older
//! checkpoint, a savepoint or nothing) are never picked as latest and never
//! counted by retention. They stay until the current lineage completes a
//! checkpoint of its own, so a run started from the wrong place by mistake
//! destroys nothing before it has replaced it; then they are deleted.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;

use weir_types::CheckpointId;

use crate::error::{CheckpointError, Result};
use crate::layout::{self, LINEAGE_FILE};
use crate::lineage::{Lineage, LineageHead, RestoreSource};
use crate::location::{StorageLocation, StorageOptions};
use crate::metadata::CheckpointKind;
use crate::record::{self, Write};
use crate::resolved::ResolvedSnapshot;
use crate::retention::{Retention, SubsumeDecision};
use crate::storage::{CheckpointStorage, delete_paths, delete_tree, list_relative};

/// The lineage of one job directory as its current run keeps it.
#[derive(Debug)]
pub struct JobTimeline {
    storage: CheckpointStorage,
    lineage: Lineage,
    /// Completed checkpoints of other timelines, deleted once the lineage
    /// completes a checkpoint.
    abandoned: Vec<CheckpointId>,
}

impl JobTimeline {
    /// Takes over the job directory for a run that starts from `source`:
    /// continues the recorded lineage from it (see [`Lineage::fork`]),
    /// rebuilds retention over the lineage's checkpoints (so `source`, its
    /// newest, is retained), records the lineage, and deletes what no run
    /// can use: members beyond `max_retained`, checkpoint directories
    /// without a complete `_metadata`, and shared files nothing kept
    /// references. Call it under the lease with nothing in flight.
    pub async fn recover(
        storage: &CheckpointStorage,
        source: &RestoreSource,
        max_retained: NonZeroUsize,
    ) -> Result<(Self, Retention)> {
        let completed = storage.completed().await?;
        let recorded = match record::read::<Lineage>(storage.job_dir(), LINEAGE_FILE).await? {
            Some(lineage) => check_version(lineage, storage)?,
            None => Lineage::legacy(completed.iter().map(|m| m.checkpoint_id)),
        };
        let mut lineage = recorded.fork(source);
        let members: Vec<_> = completed
            .iter()
            .filter(|m| lineage.contains(m.checkpoint_id))
            .collect();
        let (retention, decision) = Retention::rebuild(max_retained, members.iter().copied());
        let abandoned: Vec<CheckpointId> = completed
            .iter()
            .map(|m| m.checkpoint_id)
            .filter(|&id| !lineage.contains(id))
            .collect();
        // Members whose `_metadata` is gone (deleted by hand) cannot be
        // restored; they leave the lineage with the subsumed ones.
        let present: BTreeSet<CheckpointId> = members.iter().map(|m| m.checkpoint_id).collect();
        let missing: Vec<CheckpointId> = lineage
            .members()
            .filter(|id| !present.contains(id))
            .collect();
        lineage.on_subsumed(&missing);
        lineage.on_subsumed(&decision.discard);
        let timeline = Self {
            storage: storage.clone(),
            lineage,
            abandoned,
        };
        // Record first: a crash during the deletions below leaves a record
        // that names only checkpoints still there.
        timeline.save().await?;

        let complete: BTreeSet<CheckpointId> = completed.iter().map(|m| m.checkpoint_id).collect();
        let incomplete = storage
            .checkpoint_dirs()
            .await?
            .into_iter()
            .filter(|id| !complete.contains(id));
        let discard = decision.discard.iter().copied().chain(incomplete).collect();
        // Shared files go by the sweep below, which also counts what the
        // abandoned checkpoints still reference.
        storage
            .apply(&SubsumeDecision {
                discard,
                shared_files: Vec::new(),
            })
            .await?;
        let kept: BTreeSet<CheckpointId> = retention
            .retained()
            .chain(timeline.abandoned.iter().copied())
            .collect();
        let referenced: BTreeSet<&str> = completed
            .iter()
            .filter(|m| kept.contains(&m.checkpoint_id))
            .flat_map(|m| m.files())
            .map(|f| f.path.as_str())
            .collect();
        let orphans: Vec<String> = list_relative(storage.job_dir(), Some(layout::SHARED_DIR))
            .await?
            .into_iter()
            .filter(|path| !referenced.contains(path.as_str()))
            .collect();
        delete_paths(storage.job_dir(), orphans.iter().map(String::as_str)).await?;
        Ok((timeline, retention))
    }

    /// How the snapshot at `path` (opened as `snapshot`) relates to this job
    /// directory: one of its own completed checkpoints, or something else.
    pub async fn restore_source(
        storage: &CheckpointStorage,
        path: &str,
        snapshot: &ResolvedSnapshot,
    ) -> Result<RestoreSource> {
        let metadata = snapshot.metadata();
        if metadata.kind == CheckpointKind::Checkpoint && &metadata.job_id == storage.job_id() {
            // Ids never repeat in a job directory, so equal metadata under
            // the same id is the same checkpoint, whatever path named it.
            match storage.open(metadata.checkpoint_id).await {
                Ok(own) if own.metadata() == metadata => {
                    return Ok(RestoreSource::InJobDir(metadata.checkpoint_id));
                }
                Ok(_) => {}
                Err(err) if err.is_incomplete_checkpoint() => {}
                Err(err) => return Err(err),
            }
        }
        Ok(RestoreSource::External(path.to_owned()))
    }

    /// The current lineage.
    pub fn lineage(&self) -> &Lineage {
        &self.lineage
    }

    /// Checkpoint `id` wrote its `_metadata`: record it on the lineage. It
    /// counts as completed only once this succeeds. Returns the abandoned
    /// checkpoints to delete now that the lineage has one of its own (once).
    pub async fn on_completed(&mut self, id: CheckpointId) -> Result<Vec<CheckpointId>> {
        let before = self.lineage.clone();
        self.lineage.on_completed(id);
        if let Err(err) = self.save().await {
            self.lineage = before;
            return Err(err);
        }
        Ok(std::mem::take(&mut self.abandoned))
    }

    /// A savepoint that stops the job completed at `path`; it becomes the
    /// state a restore of the latest state resumes from.
    pub async fn on_stopped_with_savepoint(&mut self, path: &str) -> Result<()> {
        let before = self.lineage.clone();
        self.lineage.on_stopped_with_savepoint(path.to_owned());
        if let Err(err) = self.save().await {
            self.lineage = before;
            return Err(err);
        }
        Ok(())
    }

    /// Retention subsumed `ids`: record that before deleting them.
    pub async fn on_subsumed(&mut self, ids: &[CheckpointId]) -> Result<()> {
        self.lineage.on_subsumed(ids);
        self.save().await
    }

    /// Deletes every checkpoint of the job directory, its shared files and
    /// the lineage record: what cancelling a job whose checkpoints are
    /// deleted on cancellation leaves. Savepoints are never touched.
    pub async fn delete_all(&mut self) -> Result<()> {
        for id in self.storage.checkpoint_dirs().await? {
            self.storage.discard(id).await?;
        }
        delete_tree(&self.storage.job_dir().child(layout::SHARED_DIR)?).await?;
        delete_paths(self.storage.job_dir(), [LINEAGE_FILE]).await?;
        self.lineage = self.lineage.fork(&RestoreSource::Empty);
        self.abandoned.clear();
        Ok(())
    }

    async fn save(&self) -> Result<()> {
        record::write(
            self.storage.job_dir(),
            LINEAGE_FILE,
            &self.lineage,
            Write::Overwrite,
        )
        .await
        .map(drop)
    }
}

/// The path of the state a restore of the job's latest state resumes from:
/// the head of the recorded lineage, or, in a job directory written before
/// lineages were recorded, its newest completed checkpoint. `None` when the
/// job has nothing to resume. A head that no longer opens is an error, not a
/// reason to start over silently. `options` open an external head.
pub async fn latest_state(
    storage: &CheckpointStorage,
    options: &StorageOptions,
) -> Result<Option<String>> {
    let head = match record::read::<Lineage>(storage.job_dir(), LINEAGE_FILE).await? {
        Some(lineage) => check_version(lineage, storage)?.head().cloned(),
        None => storage
            .latest_completed()
            .await?
            .map(|m| LineageHead::Checkpoint(m.checkpoint_id)),
    };
    let Some(head) = head else {
        return Ok(None);
    };
    let location = match &head {
        LineageHead::Checkpoint(id) => storage.job_dir().child(&layout::checkpoint_dir(*id))?,
        LineageHead::External(path) => StorageLocation::parse(path, options)?,
    };
    ResolvedSnapshot::open(&location).await?;
    Ok(Some(match head {
        LineageHead::Checkpoint(_) => location.url().to_owned(),
        LineageHead::External(path) => path,
    }))
}

fn check_version(lineage: Lineage, storage: &CheckpointStorage) -> Result<Lineage> {
    if lineage.version() > Lineage::SUPPORTED_VERSION {
        return Err(CheckpointError::NewerVersion {
            location: format!("{}/{LINEAGE_FILE}", storage.job_dir().url()),
            found: lineage.version(),
            supported: Lineage::SUPPORTED_VERSION,
        });
    }
    Ok(lineage)
}
