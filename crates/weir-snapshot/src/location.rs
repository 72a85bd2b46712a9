//! Object paths: handles store paths relative to a root (the checkpoint or
//! savepoint directory); this module joins them safely and spells the one
//! directory this crate names itself, `shared/`.
//!
//! The layout of checkpoint directories (`chk-<n>/...`) belongs to the
//! checkpoint storage crate, which passes the relative paths in.

use object_store::path::Path;
use weir_types::{OperatorUid, SubtaskIndex};

use crate::error::{Result, SnapshotError};

/// Where shared (incremental) files of one subtask live, relative to the
/// job's checkpoint directory.
pub fn shared_dir(uid: &OperatorUid, subtask: SubtaskIndex) -> String {
    format!("shared/{uid}/{subtask}")
}

/// `root` joined with `relative`, a `/`-separated path without empty, `.`
/// or `..` segments (handles come from files, so they are checked).
pub(crate) fn resolve(root: &Path, relative: &str) -> Result<Path> {
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
pub(crate) fn check_file_name(name: &str) -> Result<()> {
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

    #[test]
    fn relative_paths_stay_under_the_root() {
        let root = Path::from("ckpt/job-1");
        let p = resolve(&root, "chk-3/avg/0").expect("valid");
        assert_eq!(p.as_ref(), "ckpt/job-1/chk-3/avg/0");
        for bad in ["", "/abs", "a/../b", "a//b", "./a", "a/"] {
            assert!(resolve(&root, bad).is_err(), "{bad:?}");
        }
        let uid = OperatorUid::new("avg").expect("valid");
        assert_eq!(shared_dir(&uid, SubtaskIndex(2)), "shared/avg/2");
    }

    #[test]
    fn file_names_are_single_segments() {
        assert!(check_file_name("000042.sst").is_ok());
        for bad in ["", ".", "..", "a/b", "..\\x"] {
            assert!(check_file_name(bad).is_err(), "{bad:?}");
        }
    }
}
