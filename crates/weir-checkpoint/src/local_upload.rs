//! Multipart uploads to a local directory that put each part on the disk
//! while the next one is produced.
//!
//! `object_store`'s local uploads (with fsync on) leave every part in the
//! page cache until `complete`, which then waits for all of the file to
//! reach the disk: a snapshot is encoded first and written after. Here each
//! part is synced as soon as it is written, on a blocking thread while the
//! snapshot's encoder goes on with the next part, so `complete` waits only
//! for the last one.
//!
//! The file is written under a staging name beside its target, named as the
//! store names its own (`<name>#<digits>`: listings skip those), and renamed
//! into place by `complete`; an upload that is aborted or dropped unfinished
//! removes it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path as LocalPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use object_store::{MultipartUpload, PutPayload, PutResult, Result, UploadPart};

use crate::local_store::{STORE, io_failed, refused, sync_directory};

/// Staging files get this process's id and a count, so two uploads of one
/// name never share one; fixed widths keep them apart with digits only.
static STAGED: AtomicU64 = AtomicU64::new(0);

/// The staging path for `target`, unique in this process.
pub(crate) fn staging_path(target: &LocalPath) -> PathBuf {
    let count = STAGED.fetch_add(1, Ordering::Relaxed);
    let mut staging = target.as_os_str().to_owned();
    staging.push(format!("#{:010}{count:020}", std::process::id()));
    PathBuf::from(staging)
}

/// An upload of one file to `target`, written at `staging` until complete.
#[derive(Debug)]
pub(crate) struct LocalUpload {
    /// `None` once completed or aborted.
    file: Option<Arc<File>>,
    staging: PathBuf,
    target: PathBuf,
    /// Where the next part goes.
    offset: u64,
}

impl LocalUpload {
    /// Creates the staging file for `target`, and its directory if missing
    /// (synced up to the first directory that existed, so the file's new
    /// name survives a power loss once `complete` returns). Blocking.
    pub(crate) fn create(target: PathBuf) -> Result<Self> {
        create_parent(&target)?;
        let staging = staging_path(&target);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&staging)
            .map_err(io_failed("create", &staging))?;
        Ok(Self {
            file: Some(Arc::new(file)),
            staging,
            target,
            offset: 0,
        })
    }

    fn file(&self) -> Result<Arc<File>> {
        self.file
            .clone()
            .ok_or_else(|| object_store::Error::Generic {
                store: STORE,
                source: format!("the upload of {} is over", self.target.display()).into(),
            })
    }
}

#[async_trait]
impl MultipartUpload for LocalUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let file = self.file();
        let mut offset = self.offset;
        self.offset += data.content_length() as u64;
        let staging = self.staging.clone();
        Box::pin(async move {
            let file = file?;
            blocking(move || {
                for chunk in &data {
                    file.write_all_at(chunk, offset)
                        .map_err(io_failed("write", &staging))?;
                    offset += chunk.len() as u64;
                }
                // Parts are written in order of arrival and at most a few
                // are in flight, so this waits for about one part's bytes.
                file.sync_data().map_err(io_failed("sync", &staging))
            })
            .await
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let file = self.file()?;
        self.file = None;
        let (staging, target) = (self.staging.clone(), self.target.clone());
        blocking(move || {
            // Every part has been synced; this syncs the file's size.
            let placed = file
                .sync_all()
                .map_err(io_failed("sync", &staging))
                .and_then(|()| {
                    std::fs::rename(&staging, &target).map_err(io_failed("rename", &staging))
                });
            if placed.is_err() {
                let _ = std::fs::remove_file(&staging);
            }
            placed?;
            let parent = target.parent().unwrap_or(LocalPath::new("/"));
            sync_directory(parent)
        })
        .await?;
        Ok(PutResult {
            e_tag: None,
            version: None,
            extensions: Default::default(),
        })
    }

    async fn abort(&mut self) -> Result<()> {
        self.file = None;
        let staging = self.staging.clone();
        blocking(move || std::fs::remove_file(&staging).map_err(io_failed("remove", &staging)))
            .await
    }
}

impl Drop for LocalUpload {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // Unfinished: nobody will complete it.
            let _ = std::fs::remove_file(&self.staging);
        }
    }
}

/// Runs blocking file work off the async threads (on the calling thread
/// where there is no runtime).
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime
            .spawn_blocking(work)
            .await
            .map_err(|e| refused(format!("a file task failed: {e}")))?,
        Err(_) => work(),
    }
}

/// Creates the directory of the file `target` if missing, with its missing
/// ancestors, each synced into the directory that gains it; returns it.
pub(crate) fn create_parent(target: &LocalPath) -> Result<&LocalPath> {
    let parent = target
        .parent()
        .ok_or_else(|| refused(format!("{} has no directory", target.display())))?;
    create_durable_dirs(parent)?;
    Ok(parent)
}

/// Creates `dir` and its missing ancestors, syncing the directory that gains
/// each new entry.
fn create_durable_dirs(dir: &LocalPath) -> Result<()> {
    let missing: Vec<&LocalPath> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(io_failed("create", dir))?;
    for created in missing.iter().rev() {
        if let Some(parent) = created.parent() {
            sync_directory(parent)?;
        }
    }
    Ok(())
}
