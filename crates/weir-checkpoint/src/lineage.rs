//! The timeline a job directory follows: which of its completed checkpoints
//! a restore of the "latest" state and retention consider.
//!
//! A job directory can hold checkpoints of several timelines: restoring an
//! older checkpoint (or a savepoint, or nothing) starts a new timeline, and
//! the checkpoints newer than the restored one belong to the abandoned one.
//! The [`Lineage`] names the current timeline's retained checkpoints and its
//! head, the newest state a failover or `restore="latest"` resumes from.
//! Checkpoints that are not members are never picked as latest and never
//! counted by retention.
//!
//! Pure bookkeeping, no I/O: `timeline` persists it as `_lineage` in the job
//! directory and acts on what it decides.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use weir_types::CheckpointId;

/// The version of the `_lineage` record this build writes and reads.
const LINEAGE_VERSION: u32 = 1;

/// The newest state of a lineage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineageHead {
    /// Checkpoint `id` of this job directory.
    Checkpoint(CheckpointId),
    /// A snapshot outside the job directory (a savepoint, or a checkpoint of
    /// another job), by the path the run was given.
    External(String),
}

/// Where a run's state comes from, as the lineage sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreSource {
    /// Nothing: the run starts empty.
    Empty,
    /// Completed checkpoint `id` of this job directory.
    InJobDir(CheckpointId),
    /// A snapshot elsewhere, by path.
    External(String),
}

/// The current timeline of a job directory.
///
/// Invariant: a checkpoint head is the newest member; members only grow by
/// completions of the run that owns the directory and shrink by retention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    version: u32,
    head: Option<LineageHead>,
    members: BTreeSet<CheckpointId>,
}

impl Lineage {
    /// The lineage of a job directory written before lineages were recorded:
    /// every completed checkpoint is on it, the newest is the head.
    pub fn legacy(completed: impl IntoIterator<Item = CheckpointId>) -> Self {
        let members: BTreeSet<CheckpointId> = completed.into_iter().collect();
        Self {
            version: LINEAGE_VERSION,
            head: members.last().copied().map(LineageHead::Checkpoint),
            members,
        }
    }

    /// The lineage a run continues from `source`: restoring a member keeps
    /// its older members (its ancestors) and drops the newer ones, which
    /// belong to the abandoned timeline; any other source starts over.
    pub fn fork(&self, source: &RestoreSource) -> Self {
        let (head, members) = match source {
            RestoreSource::Empty => (None, BTreeSet::new()),
            RestoreSource::External(path) => {
                (Some(LineageHead::External(path.clone())), BTreeSet::new())
            }
            RestoreSource::InJobDir(id) => {
                let members = if self.members.contains(id) {
                    self.members.range(..=*id).copied().collect()
                } else {
                    // Not on this lineage (a leftover of another timeline):
                    // its ancestors are unknown, so it starts one of its own.
                    BTreeSet::from([*id])
                };
                (Some(LineageHead::Checkpoint(*id)), members)
            }
        };
        Self {
            version: LINEAGE_VERSION,
            head,
            members,
        }
    }

    /// Checkpoint `id` of this job directory completed on this lineage. A
    /// late completion of an older checkpoint joins without moving the head.
    pub fn on_completed(&mut self, id: CheckpointId) {
        self.members.insert(id);
        let newest = self.members.last().copied().unwrap_or(id);
        self.head = Some(LineageHead::Checkpoint(newest));
    }

    /// A savepoint that stops the job completed at `path`: the job's output
    /// is published up to its cut, so it is now the state to resume from.
    pub fn on_stopped_with_savepoint(&mut self, path: String) {
        self.head = Some(LineageHead::External(path));
    }

    /// Retention subsumed `ids`; they leave the lineage.
    pub fn on_subsumed(&mut self, ids: &[CheckpointId]) {
        for id in ids {
            self.members.remove(id);
        }
    }

    /// The state a restore of the latest state resumes from; `None` when the
    /// lineage started empty and has completed nothing yet.
    pub fn head(&self) -> Option<&LineageHead> {
        self.head.as_ref()
    }

    /// Whether checkpoint `id` of the job directory is on this lineage.
    pub fn contains(&self, id: CheckpointId) -> bool {
        self.members.contains(&id)
    }

    /// The member checkpoints, oldest first.
    pub fn members(&self) -> impl Iterator<Item = CheckpointId> + '_ {
        self.members.iter().copied()
    }

    /// The record's version, checked by the reader.
    pub(crate) fn version(&self) -> u32 {
        self.version
    }

    /// The newest version this build reads.
    pub(crate) const SUPPORTED_VERSION: u32 = LINEAGE_VERSION;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(lineage: &Lineage) -> Vec<u64> {
        lineage.members().map(|id| id.0).collect()
    }

    fn chk(id: u64) -> Option<LineageHead> {
        Some(LineageHead::Checkpoint(CheckpointId(id)))
    }

    #[test]
    fn restoring_an_older_member_abandons_the_newer_ones() {
        let lineage = Lineage::legacy([4, 5, 6, 2, 3].map(CheckpointId));
        assert_eq!(lineage.head(), chk(6).as_ref());
        let forked = lineage.fork(&RestoreSource::InJobDir(CheckpointId(4)));
        assert_eq!(ids(&forked), [2, 3, 4]);
        assert_eq!(forked.head(), chk(4).as_ref());
        assert!(!forked.contains(CheckpointId(5)));
        // Continuing from the head changes nothing.
        assert_eq!(
            lineage.fork(&RestoreSource::InJobDir(CheckpointId(6))),
            lineage
        );
    }

    #[test]
    fn a_new_checkpoint_after_a_rollback_becomes_the_head() {
        let mut lineage = Lineage::legacy([4, 5, 6].map(CheckpointId))
            .fork(&RestoreSource::InJobDir(CheckpointId(4)));
        lineage.on_completed(CheckpointId(7));
        assert_eq!(lineage.head(), chk(7).as_ref());
        assert_eq!(ids(&lineage), [4, 7]);
        // A late completion of an older one joins without moving the head.
        lineage.on_completed(CheckpointId(5));
        assert_eq!(lineage.head(), chk(7).as_ref());
        lineage.on_subsumed(&[CheckpointId(4), CheckpointId(5)]);
        assert_eq!(ids(&lineage), [7]);
    }

    #[test]
    fn other_sources_start_a_lineage_of_their_own() {
        let lineage = Lineage::legacy([1, 2].map(CheckpointId));
        let empty = lineage.fork(&RestoreSource::Empty);
        assert_eq!((empty.head(), ids(&empty)), (None, vec![]));
        let external = lineage.fork(&RestoreSource::External("s3://b/sp".into()));
        assert_eq!(
            external.head(),
            Some(&LineageHead::External("s3://b/sp".into()))
        );
        assert!(ids(&external).is_empty());
        let stray = lineage.fork(&RestoreSource::InJobDir(CheckpointId(9)));
        assert_eq!(ids(&stray), [9]);
    }

    #[test]
    fn a_stop_savepoint_becomes_the_head_and_the_record_round_trips() {
        let mut lineage = Lineage::legacy([3].map(CheckpointId));
        lineage.on_stopped_with_savepoint("/sp/savepoint-j-4-ab".into());
        assert_eq!(
            lineage.head(),
            Some(&LineageHead::External("/sp/savepoint-j-4-ab".into()))
        );
        let json = serde_json::to_string(&lineage).expect("encodes");
        assert_eq!(
            json,
            r#"{"version":1,"head":{"external":"/sp/savepoint-j-4-ab"},"members":[3]}"#
        );
        let back: Lineage = serde_json::from_str(&json).expect("decodes");
        assert_eq!(back, lineage);
    }
}
