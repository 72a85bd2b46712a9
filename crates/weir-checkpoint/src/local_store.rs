//! The local file system as an object store that never follows a symbolic
//! link below its root.
//!
//! `object_store`'s `LocalFileSystem` follows links when it lists, reads,
//! writes and deletes, so one link inside a checkpoint or savepoint
//! directory would make a listing-based cleanup delete files elsewhere and
//! a reader read them. [`LocalStore`] wraps it: an operation on a path that
//! has a link in any component below the root, the last one included,
//! fails, and listings neither show links nor descend into them. The root
//! itself is canonicalized once, by whoever opens the store.
//!
//! The checks are `lstat` calls on the calling thread just before each
//! operation: they keep out links that are there, not a link swapped in by
//! someone racing the store between check and use (that would take
//! `openat` with `O_NOFOLLOW` on every component).
//!
//! Multipart uploads (full snapshots) are the store's own: each part goes
//! to the disk as soon as it is written (see `local_upload.rs`).

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use weir_snapshot::LocalFiles;

use crate::local_upload::{LocalUpload, blocking, create_parent, staging_path};

/// The name the store gives in its errors.
pub(crate) const STORE: &str = "LocalStore";

/// A [`LocalFileSystem`] rooted at a canonical directory, refusing to follow
/// symbolic links below it (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) struct LocalStore {
    inner: Arc<LocalFileSystem>,
    root: PathBuf,
}

impl LocalStore {
    /// Wraps `inner`, whose prefix is the canonical directory `root`.
    pub(crate) fn new(inner: LocalFileSystem, root: PathBuf) -> Self {
        Self {
            inner: Arc::new(inner),
            root,
        }
    }

    /// Where `location` lies on the local file system.
    pub(crate) fn directory(&self, location: &Path) -> Result<PathBuf> {
        self.inner.path_to_filesystem(location)
    }

    /// Fails if any existing component of `location` below the root is a
    /// symbolic link.
    fn check(&self, location: &Path) -> Result<()> {
        let full = self.inner.path_to_filesystem(location)?;
        let Ok(relative) = full.strip_prefix(&self.root) else {
            return Err(refused(format!(
                "{} lies outside {}",
                full.display(),
                self.root.display()
            )));
        };
        let mut at = self.root.clone();
        for part in relative.components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(refused(format!(
                        "{} is a symbolic link; weir never follows links inside checkpoint and savepoint directories",
                        at.display()
                    )));
                }
                Ok(_) => {}
                // Nothing below a missing component exists: the operation
                // itself reports (or creates) it.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// Whether `location` itself is a symbolic link.
    fn is_link(&self, location: &Path) -> Result<bool> {
        let full = self.inner.path_to_filesystem(location)?;
        Ok(std::fs::symlink_metadata(full).is_ok_and(|m| m.file_type().is_symlink()))
    }

    /// One directory's listing without links.
    async fn list_dir(&self, prefix: Option<&Path>) -> Result<ListResult> {
        if let Some(prefix) = prefix {
            self.check(prefix)?;
        }
        let mut listing = self.inner.list_with_delimiter(prefix).await?;
        let mut dirs = Vec::with_capacity(listing.common_prefixes.len());
        for dir in listing.common_prefixes {
            if !self.is_link(&dir)? {
                dirs.push(dir);
            }
        }
        let mut objects = Vec::with_capacity(listing.objects.len());
        for object in listing.objects {
            if !self.is_link(&object.location)? {
                objects.push(object);
            }
        }
        listing.common_prefixes = dirs;
        listing.objects = objects;
        Ok(listing)
    }

    /// Every object below `prefix`, directory by directory, never entering a
    /// linked directory.
    async fn walk(self, prefix: Option<Path>) -> Result<Vec<ObjectMeta>> {
        let mut objects = Vec::new();
        let mut pending = vec![prefix];
        while let Some(dir) = pending.pop() {
            let listing = self.list_dir(dir.as_ref()).await?;
            pending.extend(listing.common_prefixes.into_iter().map(Some));
            objects.extend(listing.objects);
        }
        Ok(objects)
    }
}

pub(crate) fn refused(why: String) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: why.into(),
    }
}

impl LocalFiles for LocalStore {
    fn place(&self, source: &std::path::Path, location: &Path) -> Result<()> {
        self.check(location)?;
        let target = self.inner.path_to_filesystem(location)?;
        let parent = create_parent(&target)?;
        // Named as the store names its own staging files, which listings skip.
        let staging = staging_path(&target);
        let placed = link_or_copy(source, &staging).and_then(|()| {
            std::fs::rename(&staging, &target).map_err(io_failed("rename", &staging))
        });
        // Gone after a rename, except where the target was already a link to
        // the same file (a retried upload): then rename does nothing.
        let _ = std::fs::remove_file(&staging);
        placed?;
        // The new name survives a power loss only once its directory is synced.
        sync_directory(parent)
    }

    fn fetch(&self, location: &Path, target: &std::path::Path, share: bool) -> Result<()> {
        self.check(location)?;
        let source = self.inner.path_to_filesystem(location)?;
        if share && std::fs::hard_link(&source, target).is_ok() {
            return Ok(());
        }
        std::fs::copy(&source, target)
            .map(drop)
            .map_err(io_failed("copy", &source))
    }
}

/// Links `source` to `target`, or copies it where a link cannot be made
/// (another file system), and syncs the file.
fn link_or_copy(source: &std::path::Path, target: &std::path::Path) -> Result<()> {
    if std::fs::hard_link(source, target).is_err() {
        std::fs::copy(source, target).map_err(io_failed("copy", source))?;
    }
    std::fs::File::open(target)
        .and_then(|file| file.sync_all())
        .map_err(io_failed("sync", target))
}

/// Syncs the directory `dir`, so the names it gained survive a power loss.
pub(crate) fn sync_directory(dir: &std::path::Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io_failed("sync", dir))
}

/// Maps an I/O error on `path` to the store's error type.
pub(crate) fn io_failed(
    operation: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> object_store::Error {
    let path = path.display().to_string();
    move |source| refused(format!("cannot {operation} {path}: {source}"))
}

impl fmt::Display for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{STORE}({})", self.root.display())
    }
}

#[async_trait]
impl ObjectStore for LocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.check(location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.check(location)?;
        if !opts.attributes.is_empty() {
            return Err(object_store::Error::NotImplemented {
                operation: "`put_multipart_opts` with `opts.attributes` specified".into(),
                implementer: self.to_string(),
            });
        }
        let target = self.inner.path_to_filesystem(location)?;
        let upload = blocking(move || LocalUpload::create(target)).await?;
        Ok(Box::new(upload))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.check(location)?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.check(location)?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        let checked = locations
            .map(move |location| location.and_then(|l| this.check(&l).map(|()| l)))
            .boxed();
        self.inner.delete_stream(checked)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let walk = self.clone().walk(prefix.cloned());
        futures::stream::once(walk)
            .map_ok(|objects| futures::stream::iter(objects.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let offset = offset.clone();
        self.list(prefix)
            .try_filter(move |meta| futures::future::ready(meta.location > offset))
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.list_dir(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.check(from)?;
        self.check(to)?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.check(from)?;
        self.check(to)?;
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::symlink;

    use object_store::ObjectStoreExt;

    use super::*;

    /// A store over a temporary directory holding `a/file` and a link
    /// `a/link` to a directory outside it that holds `outside`.
    fn store() -> (tempfile::TempDir, tempfile::TempDir, LocalStore) {
        let root = tempfile::tempdir().expect("tempdir");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("a")).expect("mkdir");
        std::fs::write(root.path().join("a/file"), b"in").expect("write");
        std::fs::write(elsewhere.path().join("outside"), b"out").expect("write");
        symlink(elsewhere.path(), root.path().join("a/link")).expect("symlink");
        symlink(root.path().join("a/file"), root.path().join("a/file-link")).expect("symlink");
        let canonical = std::fs::canonicalize(root.path()).expect("canonical");
        let inner = LocalFileSystem::new_with_prefix(&canonical).expect("store");
        (root, elsewhere, LocalStore::new(inner, canonical))
    }

    #[tokio::test]
    async fn links_are_neither_listed_nor_followed() {
        let (root, elsewhere, store) = store();
        let listed: Vec<_> = store.list(None).try_collect().await.expect("lists");
        let names: Vec<_> = listed.iter().map(|m| m.location.to_string()).collect();
        assert_eq!(names, ["a/file"]);
        let shallow = store
            .list_with_delimiter(Some(&Path::from("a")))
            .await
            .expect("lists");
        assert!(shallow.common_prefixes.is_empty());
        assert_eq!(shallow.objects.len(), 1);
        assert!(
            store
                .list(Some(&Path::from("a/link")))
                .next()
                .await
                .expect("one")
                .is_err()
        );

        for through in ["a/link/outside", "a/file-link"] {
            let path = Path::from(through);
            assert!(store.get(&path).await.is_err(), "{through}");
            assert!(store.delete(&path).await.is_err(), "{through}");
            assert!(
                store
                    .put(&path, PutPayload::from_static(b"x"))
                    .await
                    .is_err()
            );
        }
        let err = store
            .head(&Path::from("a/link/outside"))
            .await
            .expect_err("refused");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(elsewhere.path().join("outside").is_file());
        assert_eq!(
            std::fs::read(root.path().join("a/file")).expect("read"),
            b"in"
        );
    }

    #[tokio::test]
    async fn plain_files_work_as_in_the_wrapped_store() {
        let (root, _elsewhere, store) = store();
        let path = Path::from("b/c/new");
        store
            .put(&path, PutPayload::from_static(b"new"))
            .await
            .expect("put creates directories");
        let bytes = store
            .get(&path)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        assert_eq!(bytes.as_ref(), b"new");
        store.delete(&path).await.expect("delete");
        assert!(matches!(
            store.get(&path).await,
            Err(object_store::Error::NotFound { .. })
        ));
        assert!(root.path().join("a/file").is_file());
    }

    #[tokio::test]
    async fn multipart_uploads_appear_whole_when_complete_and_leave_nothing_when_aborted() {
        let (root, _elsewhere, store) = store();
        let names = |dir: &str| -> Vec<String> {
            let mut names: Vec<_> = std::fs::read_dir(root.path().join(dir))
                .map(|entries| {
                    entries
                        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        };
        let path = Path::from("chk-1/op/new");
        let mut upload = store.put_multipart(&path).await.expect("started");
        upload
            .put_part(PutPayload::from_static(b"first "))
            .await
            .expect("part");
        upload
            .put_part(PutPayload::from_iter([
                Bytes::from_static(b"second "),
                Bytes::from_static(b"part"),
            ]))
            .await
            .expect("part");
        assert_eq!(names("chk-1/op").len(), 1, "only the staging file");
        let listed: Vec<_> = store.list(None).try_collect().await.expect("lists");
        assert_eq!(
            listed.len(),
            1,
            "listings skip the staging file: {listed:?}"
        );
        upload.complete().await.expect("completed");
        assert_eq!(names("chk-1/op"), ["new"]);
        let bytes = store.get(&path).await.expect("get").bytes().await;
        assert_eq!(bytes.expect("bytes").as_ref(), b"first second part");

        let mut aborted = store.put_multipart(&path).await.expect("started");
        aborted
            .put_part(PutPayload::from_static(b"never"))
            .await
            .expect("part");
        aborted.abort().await.expect("aborted");
        let dropped = store.put_multipart(&Path::from("chk-1/op/dropped")).await;
        drop(dropped.expect("started"));
        assert_eq!(names("chk-1/op"), ["new"], "the completed file only");
        let bytes = store.get(&path).await.expect("get").bytes().await;
        assert_eq!(bytes.expect("bytes").as_ref(), b"first second part");
    }

    #[test]
    fn files_are_placed_by_link_and_fetched_by_link_or_copy() {
        use std::os::unix::fs::MetadataExt;

        let (root, elsewhere, store) = store();
        let source = elsewhere.path().join("000007.sst");
        std::fs::write(&source, b"sst bytes").expect("write");
        let inode = |path: &std::path::Path| std::fs::metadata(path).expect("stat").ino();

        let location = Path::from("shared/op/0/1-000007.sst");
        store.place(&source, &location).expect("placed");
        let placed = root.path().join("shared/op/0/1-000007.sst");
        assert_eq!(std::fs::read(&placed).expect("read"), b"sst bytes");
        assert_eq!(inode(&placed), inode(&source), "linked, not copied");
        // Placing again replaces the file and leaves no staging file behind.
        store.place(&source, &location).expect("placed again");
        let names: Vec<_> = std::fs::read_dir(root.path().join("shared/op/0"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["1-000007.sst"]);

        let restored = elsewhere.path().join("restored");
        std::fs::create_dir(&restored).expect("mkdir");
        store
            .fetch(&location, &restored.join("000007.sst"), true)
            .expect("fetched");
        assert_eq!(inode(&restored.join("000007.sst")), inode(&placed));
        store
            .fetch(&location, &restored.join("MANIFEST"), false)
            .expect("fetched");
        assert_ne!(inode(&restored.join("MANIFEST")), inode(&placed), "copied");
        assert_eq!(
            std::fs::read(restored.join("MANIFEST")).expect("read"),
            b"sst bytes"
        );
    }

    #[test]
    fn placing_and_fetching_never_follow_links() {
        let (_root, elsewhere, store) = store();
        let source = elsewhere.path().join("file");
        std::fs::write(&source, b"x").expect("write");
        assert!(store.place(&source, &Path::from("a/link/placed")).is_err());
        assert!(!elsewhere.path().join("placed").exists());
        let target = elsewhere.path().join("fetched");
        assert!(
            store
                .fetch(&Path::from("a/file-link"), &target, true)
                .is_err()
        );
        assert!(!target.exists());
    }
}
