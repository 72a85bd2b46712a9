//! The names of things in checkpoint storage (ARCHITECTURE section 4); the
//! only place that spells them.
//!
//! ```text
//! <checkpoint dir>/<job id>/chk-<n>/_metadata
//! <checkpoint dir>/<job id>/chk-<n>/<uid>/<subtask>/...
//! <checkpoint dir>/<job id>/shared/...
//! <checkpoint dir>/<job id>/_lineage           the current lineage (see `lineage`)
//! <checkpoint dir>/<job id>/_lease/<n>          lease records (see `lease`)
//! <savepoint dir>/savepoint-<job id>-<n>/_metadata (+ the state files)
//! <savepoint dir>/savepoint-<job id>-<n>-<suffix>/ (a savepoint a coordinator took)
//! ```
//!
//! Pure string work: no I/O. Handle paths are relative to the job directory
//! (checkpoints) or the savepoint directory, and [`join`] checks them before
//! they become object paths.

use object_store::path::Path;
use weir_types::{CheckpointId, JobId, OperatorUid, SubtaskIndex};

use crate::error::{CheckpointError, Result};

/// The file that makes a directory a completed checkpoint or savepoint.
pub const METADATA_FILE: &str = "_metadata";

/// The directory of files shared across checkpoints, relative to the job
/// directory; `weir_snapshot::shared_dir` puts each subtask's files below it.
pub const SHARED_DIR: &str = "shared";

/// The record of the job directory's current lineage, relative to the job
/// directory.
pub const LINEAGE_FILE: &str = "_lineage";

/// The directory of the job directory's lease records, relative to the job
/// directory.
pub const LEASE_DIR: &str = "_lease";

const CHECKPOINT_PREFIX: &str = "chk-";

/// The directory of checkpoint `id`, relative to the job directory.
pub fn checkpoint_dir(id: CheckpointId) -> String {
    format!("{CHECKPOINT_PREFIX}{id}")
}

/// The `_metadata` of checkpoint `id`, relative to the job directory.
pub fn checkpoint_metadata(id: CheckpointId) -> String {
    format!("{CHECKPOINT_PREFIX}{id}/{METADATA_FILE}")
}

/// The directory a subtask writes its files of checkpoint `id` into,
/// relative to the job directory.
pub fn subtask_dir(id: CheckpointId, uid: &OperatorUid, subtask: SubtaskIndex) -> String {
    format!("{CHECKPOINT_PREFIX}{id}/{uid}/{subtask}")
}

/// The checkpoint a directory name like `chk-12` names, if it is one.
pub fn parse_checkpoint_dir(name: &str) -> Option<CheckpointId> {
    let digits = name.strip_prefix(CHECKPOINT_PREFIX)?;
    // `chk-012` would alias `chk-12`; only canonical spellings count.
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    digits.parse().ok().map(CheckpointId)
}

/// The directory name of savepoint `id` of `job`, inside the savepoint directory.
pub fn savepoint_dir(job: &JobId, id: CheckpointId) -> String {
    format!("savepoint-{job}-{id}")
}

/// The directory name of savepoint `id` of `job` taken by a coordinator:
/// `suffix` (random) makes it a name no earlier savepoint had, so writing
/// the savepoint never touches another one's files.
pub fn fresh_savepoint_dir(job: &JobId, id: CheckpointId, suffix: &str) -> String {
    format!("savepoint-{job}-{id}-{suffix}")
}

/// `root` joined with `relative`, a `/`-separated path without empty, `.`
/// or `..` segments; paths come from `_metadata` files, so a crafted one
/// must not reach outside the root.
pub fn join(root: &Path, relative: &str) -> Result<Path> {
    let invalid = |reason| CheckpointError::InvalidStatePath {
        path: relative.to_owned(),
        reason,
    };
    if relative.is_empty() || relative.starts_with('/') || relative.ends_with('/') {
        return Err(invalid("it must be a non-empty relative path"));
    }
    let parsed =
        Path::parse(relative).map_err(|_| invalid("it has an empty, '.' or '..' segment"))?;
    Ok(root.parts().chain(parsed.parts()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_names_round_trip() {
        let id = CheckpointId(12);
        assert_eq!(checkpoint_metadata(id), "chk-12/_metadata");
        assert_eq!(parse_checkpoint_dir(&checkpoint_dir(id)), Some(id));
        for other in ["chk-", "chk-012", "chk-1a", "shared", "savepoint-j-1"] {
            assert_eq!(parse_checkpoint_dir(other), None, "{other}");
        }
    }

    #[test]
    fn joined_paths_stay_under_the_root() {
        let root = Path::from("ckpt/job");
        let p = join(&root, "chk-3/avg/0").expect("valid");
        assert_eq!(p.as_ref(), "ckpt/job/chk-3/avg/0");
        for bad in ["", "/abs", "a/../b", "a//b", "./a", "a/"] {
            assert!(join(&root, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn savepoint_and_subtask_names() {
        let job = JobId::new("orders").expect("valid");
        let uid = OperatorUid::new("avg").expect("valid");
        assert_eq!(savepoint_dir(&job, CheckpointId(5)), "savepoint-orders-5");
        assert_eq!(
            fresh_savepoint_dir(&job, CheckpointId(5), "9f0c"),
            "savepoint-orders-5-9f0c"
        );
        assert_eq!(
            subtask_dir(CheckpointId(5), &uid, SubtaskIndex(2)),
            "chk-5/avg/2"
        );
    }
}
