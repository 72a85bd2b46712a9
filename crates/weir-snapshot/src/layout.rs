//! The names of things in checkpoint and savepoint storage; the only place
//! that spells them (docs/state-and-checkpoints.md, "Files").
//!
//! ```text
//! <checkpoint dir>/<job id>/chk-<n>/_metadata
//! <checkpoint dir>/<job id>/chk-<n>/<uid>/<subtask>/keyed      full keyed state
//! <checkpoint dir>/<job id>/chk-<n>/<uid>/<subtask>/operator   operator state
//! <checkpoint dir>/<job id>/chk-<n>/<uid>/<subtask>/<name>     private RocksDB files
//! <checkpoint dir>/<job id>/shared/<uid>/<subtask>/<n>-<name>  shared RocksDB files
//! <checkpoint dir>/<job id>/_lineage                           the current lineage
//! <checkpoint dir>/<job id>/_lease/<n>                         lease records
//! <savepoint dir>/savepoint-<job id>-<n>/_metadata (+ the state files, at
//!                                            the same relative paths)
//! <savepoint dir>/savepoint-<job id>-<n>-<suffix>/             a savepoint a coordinator took
//! ```
//!
//! Handle paths are relative to the job directory (checkpoints) or to the
//! savepoint directory, so directories can move; [`join`] checks them
//! before they become object paths, since they come from files. A
//! checkpoint owns what lies under its own `chk-<n>/` and shares what lies
//! under `shared/`; [`belongs_to_checkpoint`] is that rule. Pure string work:
//! no I/O. (The byte layout *inside* a snapshot file is
//! [`format::layout`](crate::format::layout).)

use object_store::path::Path;
use weir_types::{CheckpointId, JobId, OperatorUid, SubtaskIndex};

use crate::error::{Result, SnapshotError};

/// The file that makes a directory a completed checkpoint or savepoint.
pub const METADATA_FILE: &str = "_metadata";

/// The directory of files shared across checkpoints, relative to the job
/// directory.
pub const SHARED_DIR: &str = "shared";

const CHECKPOINT_PREFIX: &str = "chk-";
const KEYED_FILE: &str = "keyed";
const OPERATOR_FILE: &str = "operator";

/// The directory of checkpoint `id`, relative to the job directory.
pub fn checkpoint_dir(id: CheckpointId) -> String {
    format!("{CHECKPOINT_PREFIX}{id}")
}

/// The `_metadata` of checkpoint `id`, relative to the job directory.
pub fn checkpoint_metadata(id: CheckpointId) -> String {
    format!("{CHECKPOINT_PREFIX}{id}/{METADATA_FILE}")
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

/// The directory a subtask writes its files of checkpoint `id` into,
/// relative to the job directory.
pub fn subtask_dir(id: CheckpointId, uid: &OperatorUid, subtask: SubtaskIndex) -> String {
    format!("{CHECKPOINT_PREFIX}{id}/{uid}/{subtask}")
}

/// A subtask's full keyed-state snapshot file of checkpoint `id`.
pub fn keyed_state_file(id: CheckpointId, uid: &OperatorUid, subtask: SubtaskIndex) -> String {
    format!("{}/{KEYED_FILE}", subtask_dir(id, uid, subtask))
}

/// A subtask's operator-state file of checkpoint `id`.
pub fn operator_state_file(id: CheckpointId, uid: &OperatorUid, subtask: SubtaskIndex) -> String {
    format!("{}/{OPERATOR_FILE}", subtask_dir(id, uid, subtask))
}

/// A database file only checkpoint `id` uses (MANIFEST, CURRENT, ...),
/// stored under the local name `name`.
pub fn private_file(
    id: CheckpointId,
    uid: &OperatorUid,
    subtask: SubtaskIndex,
    name: &str,
) -> String {
    format!("{}/{name}", subtask_dir(id, uid, subtask))
}

/// Where the shared (incremental) files of one subtask live, relative to
/// the job directory.
pub fn shared_dir(uid: &OperatorUid, subtask: SubtaskIndex) -> String {
    format!("{SHARED_DIR}/{uid}/{subtask}")
}

/// A shared file first uploaded by checkpoint `id` from the local file
/// `name`; the checkpoint in the name means a name never stands for other
/// bytes, even when the database reuses a file name.
pub fn shared_file(
    id: CheckpointId,
    uid: &OperatorUid,
    subtask: SubtaskIndex,
    name: &str,
) -> String {
    format!("{}/{id}-{name}", shared_dir(uid, subtask))
}

/// Whether `relative` lies under the shared directory.
pub fn is_shared(relative: &str) -> bool {
    relative
        .strip_prefix(SHARED_DIR)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether checkpoint `id` may reference the file at `relative` (relative
/// to the job directory): its own files lie under its `chk-<id>/`, and the
/// only files it shares with other checkpoints lie under `shared/`.
pub fn belongs_to_checkpoint(relative: &str, id: CheckpointId) -> bool {
    let own = checkpoint_dir(id);
    let under_own = relative
        .strip_prefix(own.as_str())
        .is_some_and(|rest| rest.starts_with('/'));
    under_own || is_shared(relative)
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

/// The record of the job directory's current lineage, relative to the job
/// directory.
pub const LINEAGE_FILE: &str = "_lineage";

/// The directory of the job directory's lease records, relative to the job
/// directory.
pub const LEASE_DIR: &str = "_lease";

/// `root` joined with `relative`, a `/`-separated path without empty, `.`
/// or `..` segments; paths come from files, so a crafted one must not
/// reach outside the root.
pub fn join(root: &Path, relative: &str) -> Result<Path> {
    let invalid = |reason| SnapshotError::InvalidPath {
        path: relative.to_owned(),
        reason,
    };
    if relative.is_empty() || relative.starts_with('/') || relative.ends_with('/') {
        return Err(invalid("must be a non-empty relative path"));
    }
    let parsed = Path::parse(relative).map_err(|_| invalid("has an empty, '.' or '..' segment"))?;
    Ok(root.parts().chain(parsed.parts()).collect())
}

/// Checks a file name to be created inside a local directory: one plain
/// segment, so a crafted handle cannot write outside the directory.
pub fn check_file_name(name: &str) -> Result<()> {
    let ok = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
    if ok {
        Ok(())
    } else {
        Err(SnapshotError::InvalidPath {
            path: name.to_owned(),
            reason: "must be a plain file name",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid() -> OperatorUid {
        OperatorUid::new("avg").expect("valid")
    }

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
    fn file_names_of_one_subtask() {
        let (id, sub) = (CheckpointId(5), SubtaskIndex(2));
        let job = JobId::new("orders").expect("valid");
        assert_eq!(savepoint_dir(&job, id), "savepoint-orders-5");
        assert_eq!(subtask_dir(id, &uid(), sub), "chk-5/avg/2");
        assert_eq!(keyed_state_file(id, &uid(), sub), "chk-5/avg/2/keyed");
        assert_eq!(operator_state_file(id, &uid(), sub), "chk-5/avg/2/operator");
        assert_eq!(
            private_file(id, &uid(), sub, "CURRENT"),
            "chk-5/avg/2/CURRENT"
        );
        assert_eq!(shared_dir(&uid(), sub), "shared/avg/2");
        assert_eq!(
            shared_file(id, &uid(), sub, "000042.sst"),
            "shared/avg/2/5-000042.sst"
        );
    }

    #[test]
    fn a_checkpoint_owns_its_directory_and_shares_shared() {
        let id = CheckpointId(5);
        for own in ["chk-5/avg/2/keyed", "shared/avg/2/3-000042.sst"] {
            assert!(belongs_to_checkpoint(own, id), "{own}");
        }
        for foreign in [
            "chk-4/avg/2/keyed",
            "chk-50/avg/keyed",
            "sharedx/a",
            "chk-5",
        ] {
            assert!(!belongs_to_checkpoint(foreign, id), "{foreign}");
        }
        assert!(is_shared("shared/a") && !is_shared("shared") && !is_shared("chk-1/shared/a"));
    }

    #[test]
    fn joined_paths_stay_under_the_root() {
        let root = Path::from("ckpt/job-1");
        let p = join(&root, "chk-3/avg/0").expect("valid");
        assert_eq!(p.as_ref(), "ckpt/job-1/chk-3/avg/0");
        for bad in ["", "/abs", "a/../b", "a//b", "./a", "a/"] {
            assert!(join(&root, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn file_names_are_single_segments() {
        assert!(check_file_name("000042.sst").is_ok());
        for bad in ["", ".", "..", "a/b", "..\\x"] {
            assert!(check_file_name(bad).is_err(), "{bad:?}");
        }
    }
}
