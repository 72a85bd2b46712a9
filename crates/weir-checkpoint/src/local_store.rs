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

/// The name the store gives in its errors.
const STORE: &str = "LocalStore";

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

fn refused(why: String) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: why.into(),
    }
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
        self.inner.put_multipart_opts(location, opts).await
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
}
