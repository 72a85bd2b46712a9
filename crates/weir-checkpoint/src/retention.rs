//! Which completed checkpoints to keep (the last N) and what to delete when
//! one is subsumed: its directory, and the shared files that no retained
//! checkpoint references any more (counted by the snapshot crate's
//! [`SharedFileRegistry`]).
//!
//! Pure decisions, no I/O: `CheckpointStorage::apply` deletes what a
//! [`SubsumeDecision`] names, and `JobTimeline::recover` rebuilds this
//! state from the `_metadata` files after a restart.
//! Savepoints are never retained here and never deleted by it.
//!
//! With several checkpoints in flight, a pending checkpoint may reuse a
//! shared file released here before it completes; callers that run
//! concurrent incremental checkpoints must hold such deletions back until
//! the pending checkpoints finish (the registry's documented caveat).

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;

use weir_snapshot::{SharedFileRegistry, SharedStateFile};
use weir_types::CheckpointId;

use crate::layout;
use crate::metadata::{CheckpointKind, CheckpointMetadata};

/// What to delete after a checkpoint completed (or after a restart).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubsumeDecision {
    /// Checkpoints whose directories go, oldest first.
    pub discard: Vec<CheckpointId>,
    /// Shared files no retained checkpoint references.
    pub shared_files: Vec<SharedStateFile>,
}

impl SubsumeDecision {
    /// True when nothing is to be deleted.
    pub fn is_empty(&self) -> bool {
        self.discard.is_empty() && self.shared_files.is_empty()
    }

    fn extend(&mut self, other: SubsumeDecision) {
        self.discard.extend(other.discard);
        self.shared_files.extend(other.shared_files);
    }
}

/// The retained completed checkpoints, every file they reference and the
/// reference counts of their shared files.
#[derive(Debug, Clone)]
pub struct Retention {
    max_retained: NonZeroUsize,
    /// Each retained checkpoint's files, of every kind.
    retained: BTreeMap<CheckpointId, BTreeSet<String>>,
    registry: SharedFileRegistry,
}

impl Retention {
    /// Keeps the newest `max_retained` completed checkpoints (Flink's
    /// `state.checkpoints.num-retained`, default 1).
    pub fn new(max_retained: NonZeroUsize) -> Self {
        Self {
            max_retained,
            retained: BTreeMap::new(),
            registry: SharedFileRegistry::new(),
        }
    }

    /// Rebuilds the state from the completed checkpoints found in storage
    /// (any order), returning what to delete: the checkpoints beyond the
    /// newest `max_retained` and the shared files only they referenced.
    pub fn rebuild<'a>(
        max_retained: NonZeroUsize,
        completed: impl IntoIterator<Item = &'a CheckpointMetadata>,
    ) -> (Self, SubsumeDecision) {
        let mut completed: Vec<_> = completed.into_iter().collect();
        completed.sort_by_key(|m| m.checkpoint_id);
        let mut retention = Self::new(max_retained);
        let mut decision = SubsumeDecision::default();
        for metadata in completed {
            decision.extend(retention.on_completed(metadata));
        }
        (retention, decision)
    }

    /// Records a newly completed checkpoint and returns what it subsumes.
    /// Savepoints and already-known checkpoints change nothing.
    ///
    /// Only files under `shared/` that no retained checkpoint references,
    /// in any of its handles, are released: a hand-edited or corrupt
    /// `_metadata` that lists another checkpoint's file as shared cannot
    /// make retention delete it.
    pub fn on_completed(&mut self, metadata: &CheckpointMetadata) -> SubsumeDecision {
        let id = metadata.checkpoint_id;
        if metadata.kind != CheckpointKind::Checkpoint || self.retained.contains_key(&id) {
            return SubsumeDecision::default();
        }
        let files = metadata.files().into_iter().map(|f| f.path.clone());
        self.retained.insert(id, files.collect());
        // Register before releasing, so a file the new checkpoint shares
        // with a subsumed one keeps a reference throughout.
        for op in &metadata.operators {
            for handle in op.subtasks.iter().filter_map(|s| s.keyed.as_ref()) {
                self.registry.register(id, handle);
            }
        }
        let mut decision = SubsumeDecision::default();
        while self.retained.len() > self.max_retained.get() {
            let Some((oldest, _)) = self.retained.pop_first() else {
                break;
            };
            let released = self.registry.release(oldest).into_iter();
            let unused: Vec<_> = released
                .filter(|f| layout::is_shared(&f.file.path) && !self.references(&f.file.path))
                .collect();
            decision.shared_files.extend(unused);
            decision.discard.push(oldest);
        }
        decision
    }

    /// Whether a retained checkpoint references the file at `path`.
    fn references(&self, path: &str) -> bool {
        self.retained.values().any(|files| files.contains(path))
    }

    /// The retained checkpoints, oldest first.
    pub fn retained(&self) -> impl Iterator<Item = CheckpointId> + '_ {
        self.retained.keys().copied()
    }

    /// The newest retained checkpoint.
    pub fn latest(&self) -> Option<CheckpointId> {
        self.retained.last_key_value().map(|(&id, _)| id)
    }

    /// The shared-file reference counts, which incremental snapshot tasks
    /// consult to skip files uploaded already.
    pub fn registry(&self) -> &SharedFileRegistry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use weir_snapshot::{IncrementalSnapshotHandle, KeyedStateHandle, StateFile};
    use weir_types::{KeyGroupRange, MaxParallelism};

    use super::*;
    use crate::metadata::tests::sample;

    fn shared(name: &str) -> SharedStateFile {
        SharedStateFile {
            local_name: name.to_owned(),
            file: StateFile {
                path: format!("shared/avg/0/{name}"),
                size: 1,
                crc32: 0,
            },
        }
    }

    /// Checkpoint `id` whose only subtask is incremental over `files`.
    fn incremental(id: u64, files: &[&str]) -> CheckpointMetadata {
        let mut meta = sample(id, 1);
        meta.operators[0].subtasks[0].keyed =
            Some(KeyedStateHandle::Incremental(IncrementalSnapshotHandle {
                key_group_range: KeyGroupRange::new(0, 128).expect("valid"),
                max_parallelism: MaxParallelism::new(128).expect("valid"),
                descriptors: meta.operators[0].states.clone(),
                shared: files.iter().map(|f| shared(f)).collect(),
                private: vec![],
            }));
        meta
    }

    fn two() -> NonZeroUsize {
        NonZeroUsize::new(2).expect("non-zero")
    }

    #[test]
    fn keeps_the_newest_and_frees_files_only_subsumed_ones_used() {
        let mut r = Retention::new(two());
        assert!(r.on_completed(&incremental(1, &["a", "b"])).is_empty());
        assert!(r.on_completed(&incremental(2, &["a", "c"])).is_empty());
        let d = r.on_completed(&incremental(3, &["a", "d"]));
        assert_eq!(d.discard, [CheckpointId(1)]);
        assert_eq!(d.shared_files, [shared("b")]);
        let d = r.on_completed(&incremental(4, &["d"]));
        assert_eq!(d.discard, [CheckpointId(2)]);
        assert_eq!(d.shared_files, [shared("c")]);
        assert_eq!(
            r.retained().collect::<Vec<_>>(),
            [CheckpointId(3), CheckpointId(4)]
        );
        assert_eq!(r.registry().references("shared/avg/0/a"), 1);
    }

    #[test]
    fn a_retained_checkpoints_file_is_never_released_as_shared() {
        // A hand-edited (or corrupt) older checkpoint lists the newer one's
        // own file, and a path outside shared/, among its shared files.
        let mut r = Retention::new(NonZeroUsize::MIN);
        let mut older = incremental(1, &["a"]);
        let Some(KeyedStateHandle::Incremental(h)) = &mut older.operators[0].subtasks[0].keyed
        else {
            unreachable!("incremental")
        };
        let mut foreign = shared("x");
        foreign.file.path = "chk-2/avg/0/keyed".to_owned();
        let mut elsewhere = shared("y");
        elsewhere.file.path = "somewhere/else".to_owned();
        h.shared.extend([foreign, elsewhere]);
        assert!(r.on_completed(&older).is_empty());
        let newer = crate::metadata::tests::sample(2, 1);
        let d = r.on_completed(&newer);
        assert_eq!(d.discard, [CheckpointId(1)]);
        assert_eq!(
            d.shared_files,
            [shared("a")],
            "only shared/ files nothing retained uses"
        );
    }

    #[test]
    fn savepoints_and_repeats_change_nothing() {
        let mut r = Retention::new(NonZeroUsize::MIN);
        let first = incremental(1, &["a"]);
        assert!(r.on_completed(&first).is_empty());
        assert!(r.on_completed(&first).is_empty());
        let mut savepoint = incremental(2, &["b"]);
        savepoint.kind = CheckpointKind::Savepoint;
        assert!(r.on_completed(&savepoint).is_empty());
        assert_eq!(r.latest(), Some(CheckpointId(1)));
    }

    #[test]
    fn rebuild_matches_live_bookkeeping() {
        let metas: Vec<_> = [(3, &["a", "d"][..]), (1, &["a", "b"]), (2, &["a", "c"])]
            .into_iter()
            .map(|(id, files)| incremental(id, files))
            .collect();
        let (r, d) = Retention::rebuild(two(), &metas);
        assert_eq!(d.discard, [CheckpointId(1)]);
        assert_eq!(d.shared_files, [shared("b")]);
        assert_eq!(
            r.retained().collect::<Vec<_>>(),
            [CheckpointId(2), CheckpointId(3)]
        );
        assert_eq!(r.registry().references("shared/avg/0/a"), 2);
    }
}
