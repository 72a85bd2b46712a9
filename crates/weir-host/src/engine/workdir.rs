//! Fresh directories under a work dir that disappear with their owner.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{HostError, Result};

/// Distinguishes directories created by this process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A directory this process created; removed (with its contents) on drop.
#[derive(Debug)]
pub(crate) struct OwnedDir {
    path: PathBuf,
}

impl OwnedDir {
    /// Creates `parent/<name>-<pid>-<n>`, a name no other process or earlier
    /// subtask of this one uses, so two subtasks never share a database.
    pub(crate) fn create(parent: &Path, name: &str) -> Result<Self> {
        std::fs::create_dir_all(parent).map_err(|e| {
            HostError::io(format!("creating work directory {}", parent.display()), e)
        })?;
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = parent.join(format!("{name}-{}-{n}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(Self { path }),
                // Left behind by a crashed process that had the same pid.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(HostError::io(
                        format!("creating state directory {}", path.display()),
                        e,
                    ));
                }
            }
        }
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OwnedDir {
    fn drop(&mut self) {
        // Best effort: a leftover directory wastes disk but harms nothing.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
