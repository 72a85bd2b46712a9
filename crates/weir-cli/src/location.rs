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
