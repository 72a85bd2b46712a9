//! The model of `_metadata`: what a completed checkpoint or savepoint
//! records (source positions, sink handles, operator uid -> subtask -> state
//! handle, statistics).
//!
//! Pure data plus self-consistency checks; [`encoding`] turns it into bytes,
//! and `storage` decides where those bytes live.

mod encoding;

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use object_store::path::Path;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use weir_snapshot::{KeyedStateHandle, StateFile};
use weir_types::{
    CheckpointId, Epoch, FORMAT_VERSION, JobId, MaxParallelism, OperatorUid, StateDescriptor,
    SubtaskIndex, ValueType,
};

use crate::error::{CheckpointError, MetadataProblem, Result};
use crate::layout;

pub use encoding::{METADATA_MAGIC, decode_metadata, encode_metadata};

/// Checkpoint or savepoint (see the glossary in `weir-types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// System-owned, possibly incremental, deleted when subsumed.
    Checkpoint,
    /// User-owned, self-contained, never deleted automatically.
    Savepoint,
}

impl CheckpointKind {
    /// The kind's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Checkpoint => "checkpoint",
            CheckpointKind::Savepoint => "savepoint",
        }
    }
}

impl std::fmt::Display for CheckpointKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a restore needs: the content of one `_metadata` file.
///
/// State file paths are relative to the job's checkpoint directory for
/// checkpoints and to the savepoint directory for savepoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// The format the body was written in; always [`FORMAT_VERSION`] when built here.
    pub format_version: u32,
    /// The job the state belongs to.
    pub job_id: JobId,
    /// The checkpoint (or savepoint) number.
    pub checkpoint_id: CheckpointId,
    /// Checkpoint or savepoint.
    pub kind: CheckpointKind,
    /// Wall-clock time the checkpoint was triggered, in Unix milliseconds.
    pub timestamp_millis: u64,
    /// The last epoch whose effects the state includes.
    pub cut_epoch: Epoch,
    /// Operators with state, in any order; stateless operators are absent.
    pub operators: Vec<OperatorStateMeta>,
    /// Each source's position after `cut_epoch`, opaque to Weir.
    pub sources: BTreeMap<OperatorUid, serde_json::Value>,
    /// Each transactional sink's handle to its unpublished output, opaque to Weir.
    pub sinks: BTreeMap<OperatorUid, serde_json::Value>,
    /// Small state files stored inside the metadata ("jobmanager" storage),
    /// keyed by the [`StateFile::path`] that names them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inline: BTreeMap<String, InlineFile>,
    /// Statistics, for users; a restore ignores them.
    pub stats: Option<MetadataStats>,
}

/// The state of one operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorStateMeta {
    /// The user-assigned uid that keys the state across job versions.
    pub uid: OperatorUid,
    /// The number of subtasks that wrote the state.
    pub parallelism: u32,
    /// The number of key groups, fixed for the life of the state.
    pub max_parallelism: MaxParallelism,
    /// The types of the key columns; `None` for an operator without keyed state.
    pub key_types: Option<Vec<ValueType>>,
    /// The keyed states the operator declared.
    pub states: Vec<StateDescriptor>,
    /// The subtasks that stored anything, in any order.
    pub subtasks: Vec<SubtaskStateMeta>,
}

/// What one subtask stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskStateMeta {
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Its keyed state, if it had any.
    pub keyed: Option<KeyedStateHandle>,
    /// Its operator (non-keyed) state file, if it had any.
    pub operator_state: Option<StateFile>,
}

/// Checkpoint statistics kept with the metadata (Flink's completed-checkpoint
/// summary), so the history survives a coordinator restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataStats {
    /// From trigger to completion, in milliseconds.
    pub end_to_end_millis: u64,
    /// Total size of the state the checkpoint references, in bytes.
    pub state_size_bytes: u64,
    /// Bytes uploaded for this checkpoint only (less than the state size when
    /// incremental).
    pub persisted_bytes: u64,
}

/// The bytes of a state file kept inside `_metadata` (base64 in the body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineFile(pub Bytes);

impl Serialize for InlineFile {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for InlineFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD
            .decode(text)
            .map(|b| InlineFile(Bytes::from(b)))
            .map_err(serde::de::Error::custom)
    }
}

impl CheckpointMetadata {
    /// Metadata without operators, sources, sinks or statistics.
    pub fn new(
        job_id: JobId,
        checkpoint_id: CheckpointId,
        kind: CheckpointKind,
        cut_epoch: Epoch,
    ) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            job_id,
            checkpoint_id,
            kind,
            timestamp_millis: 0,
            cut_epoch,
            operators: Vec::new(),
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            inline: BTreeMap::new(),
            stats: None,
        }
    }

    /// The state of operator `uid`, if it has any.
    pub fn operator(&self, uid: &OperatorUid) -> Option<&OperatorStateMeta> {
        self.operators.iter().find(|o| &o.uid == uid)
    }

    /// Every state file the metadata references, each once, in a stable order.
    pub fn files(&self) -> Vec<&StateFile> {
        let mut seen = BTreeSet::new();
        let mut files = Vec::new();
        for op in &self.operators {
            for sub in &op.subtasks {
                let keyed = sub.keyed.iter().flat_map(KeyedStateHandle::files);
                for file in keyed.chain(sub.operator_state.as_ref()) {
                    if seen.insert(file.path.as_str()) {
                        files.push(file);
                    }
                }
            }
        }
        files
    }

    /// Total bytes of inline state files.
    pub fn inline_bytes(&self) -> u64 {
        self.inline.values().map(|f| f.0.len() as u64).sum()
    }

    /// Checks that the metadata agrees with itself: unique uids, subtasks
    /// below the parallelism, key groups below the max parallelism, valid
    /// descriptors, and state file paths that stay inside their directory
    /// (see [`Self::check_paths`]). The reader runs this on every decoded
    /// file, so every command that opens a snapshot refuses the same ones.
    pub fn validate(&self) -> Result<()> {
        self.check_paths()?;
        let problem = |problem| CheckpointError::InconsistentMetadata {
            checkpoint: self.checkpoint_id,
            problem,
        };
        let mut uids = BTreeSet::new();
        for op in &self.operators {
            if !uids.insert(&op.uid) {
                return Err(problem(MetadataProblem::DuplicateOperator {
                    uid: op.uid.clone(),
                }));
            }
            op.max_parallelism.check_parallelism(op.parallelism)?;
            let mut names = BTreeSet::new();
            for state in &op.states {
                state.clone().validated()?;
                if !names.insert(state.name.as_str()) {
                    return Err(problem(MetadataProblem::DuplicateState {
                        uid: op.uid.clone(),
                        name: state.name.clone(),
                    }));
                }
            }
            let mut subtasks = BTreeSet::new();
            for sub in &op.subtasks {
                if sub.subtask.0 >= op.parallelism || !subtasks.insert(sub.subtask) {
                    return Err(problem(MetadataProblem::BadSubtask {
                        uid: op.uid.clone(),
                        subtask: sub.subtask,
                        parallelism: op.parallelism,
                    }));
                }
                let Some(keyed) = &sub.keyed else { continue };
                if op.key_types.is_none() {
                    return Err(problem(MetadataProblem::MissingKeyTypes {
                        uid: op.uid.clone(),
                    }));
                }
                let range = keyed.key_group_range();
                if !range.fits(op.max_parallelism) {
                    return Err(problem(MetadataProblem::KeyGroupsOutOfRange {
                        uid: op.uid.clone(),
                        subtask: sub.subtask,
                        range,
                        max_parallelism: op.max_parallelism.get(),
                    }));
                }
            }
        }
        Ok(())
    }
}

impl CheckpointMetadata {
    /// Checks every path the metadata names: each state file (and inline
    /// file) is a relative path without empty, `.` or `..` segments, so it
    /// stays inside the directory paths are relative to; each database
    /// file's local name is a plain file name; and a checkpoint names only
    /// its own files (under its `chk-<n>/`) and shared ones (under
    /// `shared/`), so deleting another checkpoint never deletes its files.
    fn check_paths(&self) -> Result<()> {
        let problem = |problem| CheckpointError::InconsistentMetadata {
            checkpoint: self.checkpoint_id,
            problem,
        };
        let inline = self.inline.keys().map(String::as_str);
        for path in self
            .files()
            .into_iter()
            .map(|f| f.path.as_str())
            .chain(inline)
        {
            if layout::join(&Path::default(), path).is_err() {
                return Err(problem(MetadataProblem::StatePathOutside {
                    path: path.to_owned(),
                }));
            }
            if self.kind == CheckpointKind::Checkpoint
                && !layout::belongs_to_checkpoint(path, self.checkpoint_id)
            {
                return Err(problem(MetadataProblem::ForeignStateFile {
                    path: path.to_owned(),
                }));
            }
        }
        let database_files = self
            .operators
            .iter()
            .flat_map(|o| &o.subtasks)
            .filter_map(|s| match &s.keyed {
                Some(KeyedStateHandle::Incremental(h)) => Some(h.shared.iter().chain(&h.private)),
                _ => None,
            })
            .flatten();
        for file in database_files {
            if layout::check_file_name(&file.local_name).is_err() {
                return Err(problem(MetadataProblem::InvalidLocalName {
                    name: file.local_name.clone(),
                }));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use weir_snapshot::FullSnapshotHandle;
    use weir_types::{KeyGroupRange, StateKind};

    use super::*;

    /// A checkpoint of one keyed operator `avg` at `parallelism` whose
    /// subtask `i` stores `chk-<id>/avg/<i>/keyed`.
    pub(crate) fn sample(id: u64, parallelism: u32) -> CheckpointMetadata {
        let max = MaxParallelism::new(128).expect("valid");
        let uid = OperatorUid::new("avg").expect("valid");
        let mut meta = CheckpointMetadata::new(
            JobId::new("job").expect("valid"),
            CheckpointId(id),
            CheckpointKind::Checkpoint,
            Epoch(id * 10),
        );
        let subtasks = (0..parallelism)
            .map(|i| SubtaskStateMeta {
                subtask: SubtaskIndex(i),
                keyed: Some(KeyedStateHandle::Full(FullSnapshotHandle {
                    key_group_range: KeyGroupRange::for_subtask(max, parallelism, SubtaskIndex(i))
                        .expect("valid"),
                    file: StateFile {
                        path: format!("chk-{id}/avg/{i}/keyed"),
                        size: 3,
                        crc32: 7,
                    },
                    entries: 1,
                })),
                operator_state: None,
            })
            .collect();
        meta.operators.push(OperatorStateMeta {
            uid: uid.clone(),
            parallelism,
            max_parallelism: max,
            key_types: Some(vec![ValueType::Int64]),
            states: vec![
                StateDescriptor::new("sum", StateKind::Value, ValueType::Int64).expect("valid"),
            ],
            subtasks,
        });
        meta.sources
            .insert(uid, serde_json::json!({"offset": id * 100}));
        meta
    }

    #[test]
    fn sample_is_consistent_and_lists_its_files() {
        let meta = sample(3, 2);
        meta.validate().expect("consistent");
        let paths: Vec<_> = meta.files().iter().map(|f| f.path.clone()).collect();
        assert_eq!(paths, ["chk-3/avg/0/keyed", "chk-3/avg/1/keyed"]);
    }

    #[test]
    fn subtask_beyond_parallelism_is_inconsistent() {
        let mut meta = sample(1, 2);
        meta.operators[0].parallelism = 1;
        let err = meta.validate().expect_err("subtask 1 at parallelism 1");
        assert!(matches!(
            err,
            CheckpointError::InconsistentMetadata {
                problem: MetadataProblem::BadSubtask {
                    subtask: SubtaskIndex(1),
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn duplicate_operator_is_inconsistent() {
        let mut meta = sample(1, 1);
        meta.operators.push(meta.operators[0].clone());
        assert!(matches!(
            meta.validate(),
            Err(CheckpointError::InconsistentMetadata {
                problem: MetadataProblem::DuplicateOperator { .. },
                ..
            })
        ));
    }

    #[test]
    fn keyed_state_needs_key_types() {
        let mut meta = sample(1, 1);
        meta.operators[0].key_types = None;
        assert!(matches!(
            meta.validate(),
            Err(CheckpointError::InconsistentMetadata {
                problem: MetadataProblem::MissingKeyTypes { .. },
                ..
            })
        ));
    }

    fn keyed_path(meta: &mut CheckpointMetadata) -> &mut String {
        let Some(KeyedStateHandle::Full(h)) = &mut meta.operators[0].subtasks[0].keyed else {
            unreachable!("sample has full handles");
        };
        &mut h.file.path
    }

    #[test]
    fn paths_must_stay_inside_and_checkpoints_name_only_their_own_files() {
        let problem = |meta: &CheckpointMetadata| match meta.validate() {
            Err(CheckpointError::InconsistentMetadata { problem, .. }) => Some(problem),
            Ok(()) => None,
            Err(other) => panic!("{other}"),
        };
        for (path, checkpoint_only) in [
            ("../elsewhere/keyed", false),
            ("chk-3/avg/../../x", false),
            ("/abs/keyed", false),
            ("chk-2/avg/0/keyed", true),
            ("other/keyed", true),
        ] {
            let mut meta = sample(3, 1);
            *keyed_path(&mut meta) = path.to_owned();
            assert!(problem(&meta).is_some(), "{path}");
            meta.kind = CheckpointKind::Savepoint;
            assert_eq!(problem(&meta).is_none(), checkpoint_only, "{path}");
        }
        let mut meta = sample(3, 1);
        *keyed_path(&mut meta) = "shared/avg/0/2-000001.sst".to_owned();
        assert_eq!(
            problem(&meta),
            None,
            "shared files belong to every checkpoint"
        );
        meta.inline
            .insert("../x".to_owned(), InlineFile(Bytes::from_static(b"x")));
        assert!(matches!(
            problem(&meta),
            Some(MetadataProblem::StatePathOutside { .. })
        ));
    }

    #[test]
    fn database_files_need_plain_local_names() {
        let mut meta = sample(3, 1);
        let sub = &mut meta.operators[0].subtasks[0];
        let file = StateFile {
            path: "chk-3/avg/0/CURRENT".to_owned(),
            size: 1,
            crc32: 0,
        };
        sub.keyed = Some(KeyedStateHandle::Incremental(
            weir_snapshot::IncrementalSnapshotHandle {
                key_group_range: KeyGroupRange::new(0, 128).expect("valid"),
                max_parallelism: MaxParallelism::new(128).expect("valid"),
                descriptors: vec![],
                shared: vec![],
                private: vec![weir_snapshot::SharedStateFile {
                    local_name: "../CURRENT".to_owned(),
                    file,
                }],
            },
        ));
        assert!(matches!(
            meta.validate(),
            Err(CheckpointError::InconsistentMetadata {
                problem: MetadataProblem::InvalidLocalName { .. },
                ..
            })
        ));
    }

    #[test]
    fn key_groups_beyond_max_parallelism_are_inconsistent() {
        let mut meta = sample(1, 1);
        meta.operators[0].max_parallelism = MaxParallelism::new(64).expect("valid");
        assert!(matches!(
            meta.validate(),
            Err(CheckpointError::InconsistentMetadata {
                problem: MetadataProblem::KeyGroupsOutOfRange { .. },
                ..
            })
        ));
    }
}
