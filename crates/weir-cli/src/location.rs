//! From a PATH argument to the storage location of a checkpoint, savepoint
//! or checkpoint directory.
//!
//! Local paths are checked and canonicalized first: the storage crate
//! creates missing local directories (right for writers, wrong for an
//! inspection tool), and a directory is opened as a child of its parent so
//! that a checkpoint's handle paths resolve against its job directory.

use anyhow::{Context, Result, bail};
use weir_checkpoint::layout::METADATA_FILE;
use weir_checkpoint::{StorageLocation, StorageOptions};

/// A directory and, where it has one, its parent and its name in it.
pub struct Located {
    /// The directory itself.
    pub dir: StorageLocation,
    /// The parent directory and the directory's name in it.
    pub parent: Option<(StorageLocation, String)>,
}

/// Opens the directory `path` names (a `_metadata` file stands for its
/// directory). A local path must exist.
pub fn locate(path: &str) -> Result<Located> {
    let options = StorageOptions::default();
    let local = match path.split_once("://") {
        Some(("file", rest)) => Some(rest),
        Some(_) => None,
        None => Some(path),
    };
    let url = match local {
        Some(local) => local_dir(path, local)?,
        None => {
            let dir = path.trim_end_matches('/');
            dir.strip_suffix(METADATA_FILE)
                .and_then(|d| d.strip_suffix('/'))
                .unwrap_or(dir)
                .to_owned()
        }
    };
    // Split `scheme://bucket/a/b` into `scheme://bucket/a` and `b`; a bare
    // bucket or the root of a file system has no parent to open it from.
    let after_scheme = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let split = after_scheme
        .trim_start_matches('/')
        .contains('/')
        .then(|| url.rsplit_once('/'))
        .flatten();
    match split {
        Some((parent_url, name)) if !name.is_empty() => {
            let parent = StorageLocation::parse(parent_url, &options)
                .with_context(|| format!("cannot open {path}"))?;
            let dir = parent
                .child(name)
                .with_context(|| format!("cannot open {path}"))?;
            Ok(Located {
                dir,
                parent: Some((parent, name.to_owned())),
            })
        }
        _ => Ok(Located {
            dir: StorageLocation::parse(&url, &options)
                .with_context(|| format!("cannot open {path}"))?,
            parent: None,
        }),
    }
}

/// The canonical local directory `path` (spelled `local` without a scheme)
/// names, refusing missing paths and files other than `_metadata`.
fn local_dir(path: &str, local: &str) -> Result<String> {
    let given = std::path::Path::new(local);
    if !given.exists() {
        bail!("{path} does not exist");
    }
    let canonical =
        std::fs::canonicalize(given).with_context(|| format!("cannot resolve {path}"))?;
    let dir = if canonical.is_file() {
        if canonical.file_name().is_some_and(|n| n == METADATA_FILE) {
            canonical
                .parent()
                .map(std::path::Path::to_path_buf)
                .with_context(|| format!("{path} has no parent directory"))?
        } else {
            bail!(
                "{path} is a file, not a checkpoint or savepoint directory or its {METADATA_FILE}"
            );
        }
    } else {
        canonical
    };
    dir.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{path} is not valid UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_open_as_a_child_of_their_parent() {
        let located = locate("memory://ckpt/orders/chk-3/_metadata").expect("memory url");
        assert_eq!(located.dir.root().as_ref(), "ckpt/orders/chk-3");
        let (parent, name) = located.parent.expect("has a parent");
        assert_eq!(
            (parent.root().as_ref(), name.as_str()),
            ("ckpt/orders", "chk-3")
        );
        // Only a whole final `_metadata` segment names the file.
        let located = locate("memory://ckpt/x_metadata/").expect("memory url");
        assert_eq!(located.dir.root().as_ref(), "ckpt/x_metadata");
        assert!(locate("memory://top").expect("memory url").parent.is_none());
    }

    #[test]
    fn local_paths_must_exist_and_be_directories() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing");
        let err = locate(&missing.to_string_lossy()).err().expect("missing");
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(!missing.exists());
        let file = dir.path().join("notes");
        std::fs::write(&file, b"x").expect("write");
        let err = locate(&file.to_string_lossy()).err().expect("a file");
        assert!(err.to_string().contains("is a file"), "{err}");
        let url = format!("file://{}", dir.path().display());
        let located = locate(&url).expect("file url");
        assert_eq!(
            located.parent.map(|(_, name)| name),
            dir.path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        );
    }
}
