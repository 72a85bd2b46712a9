//! Where checkpoints live: an object store and a root inside it, parsed from
//! a URL.
//!
//! Supported: `file:///abs/path` and plain paths (the local file system,
//! resolved once to a canonical directory below which no symbolic link is
//! ever followed), `s3://bucket/prefix` (S3 and S3-compatible servers,
//! configured by [`StorageOptions`] and the usual `AWS_*` environment
//! variables), and `memory://prefix` (a fresh in-process store, for tests).
//! This module opens stores; it does not know the checkpoint layout
//! (`layout`) or read anything.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use weir_snapshot::{LocalFiles, SnapshotStorage};

use crate::error::{CheckpointError, Result};
use crate::layout;
use crate::local_store::LocalStore;
use crate::slow_writes::SlowWrites;

/// The local-store option that delays every write by this many
/// milliseconds: a deliberately slow store for tests and benchmarks.
pub const PUT_DELAY_MS: &str = "put_delay_ms";

/// Settings for remote stores, e.g. `endpoint`, `region`,
/// `access_key_id`, `secret_access_key`, `allow_http` for S3; every key the
/// `object_store` S3 builder accepts. They override the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageOptions {
    /// Key-value settings, applied in key order.
    pub settings: BTreeMap<String, String>,
}

impl StorageOptions {
    /// The same options with `key` set to `value`.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.insert(key.into(), value.into());
        self
    }
}

/// An object store and a directory inside it.
///
/// Cloning shares the store, so clones see each other's writes (which
/// matters for `memory://`).
#[derive(Clone)]
pub struct StorageLocation {
    store: Arc<dyn ObjectStore>,
    root: Path,
    url: String,
    /// The directory itself, for a location on the local file system: where
    /// a write cut short by a crash leaves its staging file.
    local: Option<PathBuf>,
    /// The store as local files, for placing native checkpoint files
    /// without streaming them (none when writes are slowed down on purpose).
    files: Option<Arc<LocalStore>>,
}

impl fmt::Debug for StorageLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageLocation")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for StorageLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl StorageLocation {
    /// Opens the store a URL names; a local directory is created if missing.
    pub fn parse(url: &str, options: &StorageOptions) -> Result<Self> {
        let invalid = |reason| CheckpointError::InvalidUrl {
            url: url.to_owned(),
            reason,
        };
        let (scheme, rest) = match url.split_once("://") {
            Some((scheme, rest)) => (scheme, rest),
            None => ("file", url),
        };
        match scheme {
            "file" => {
                if url.contains("://") && !rest.starts_with('/') {
                    return Err(invalid("file URLs must be absolute: file:///path"));
                }
                let location = Self::local(rest, url)?;
                location.with_local_options(options)
            }
            "s3" | "s3a" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(invalid("an s3 URL needs a bucket: s3://bucket/prefix"));
                }
                let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
                for (key, value) in &options.settings {
                    let key: AmazonS3ConfigKey =
                        key.parse()
                            .map_err(|_| CheckpointError::UnknownStorageOption {
                                url: url.to_owned(),
                                key: key.clone(),
                            })?;
                    builder = builder.with_config(key, value);
                }
                let store = builder
                    .build()
                    .map_err(|source| CheckpointError::OpenStore {
                        url: url.to_owned(),
                        source,
                    })?;
                Ok(Self::new(Arc::new(store), Self::prefix(prefix, url)?, url))
            }
            "memory" => Ok(Self::new(
                Arc::new(InMemory::new()),
                Self::prefix(rest, url)?,
                url,
            )),
            _ => Err(invalid("use file://, s3://, memory:// or a plain path")),
        }
    }

    /// Applies the options a local store understands: only
    /// [`PUT_DELAY_MS`], which slows every write down to simulate a slow
    /// remote store (for tests and benchmarks of asynchronous checkpoints).
    fn with_local_options(self, options: &StorageOptions) -> Result<Self> {
        let mut delay = None;
        for (key, value) in &options.settings {
            if key != PUT_DELAY_MS {
                return Err(CheckpointError::UnknownStorageOption {
                    url: self.url.clone(),
                    key: key.clone(),
                });
            }
            let millis: u64 = value.parse().map_err(|_| CheckpointError::InvalidUrl {
                url: self.url.clone(),
                reason: "put_delay_ms must be a whole number of milliseconds",
            })?;
            delay = Some(Duration::from_millis(millis));
        }
        let Some(delay) = delay else {
            return Ok(self);
        };
        let slow = SlowWrites::new(Arc::clone(&self.store), delay);
        // Placing files directly would skip the delay: a slowed store
        // streams everything.
        Ok(Self {
            local: self.local,
            ..Self::new(Arc::new(slow), self.root, self.url)
        })
    }

    /// A location over an existing store, e.g. one in-memory store shared by
    /// several locations in a test.
    pub fn new(store: Arc<dyn ObjectStore>, root: Path, url: impl Into<String>) -> Self {
        Self {
            store,
            root,
            url: url.into(),
            local: None,
            files: None,
        }
    }

    /// The object store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The root directory inside the store.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The URL the location was opened from (or a child of it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory `relative` below this one, in the same store.
    pub fn child(&self, relative: &str) -> Result<Self> {
        Ok(Self {
            store: Arc::clone(&self.store),
            root: layout::join(&self.root, relative)?,
            url: format!("{}/{relative}", self.url.trim_end_matches('/')),
            local: self.local.as_ref().map(|dir| dir.join(relative)),
            files: self.files.clone(),
        })
    }

    /// Directory `root` of the same store, opened as `url`. Unlike
    /// [`StorageLocation::new`] over this location's store, it keeps the
    /// store's local files, so restores from it link native checkpoint files
    /// instead of streaming copies of them.
    pub(crate) fn at(&self, root: Path, url: impl Into<String>) -> Self {
        Self {
            local: self
                .files
                .as_ref()
                .and_then(|files| files.directory(&root).ok()),
            files: self.files.clone(),
            ..Self::new(Arc::clone(&self.store), root, url)
        }
    }

    /// The directory on the local file system, for a local location.
    pub(crate) fn local_dir(&self) -> Option<&std::path::Path> {
        self.local.as_deref()
    }

    /// The same directory as the snapshot crate's storage type, for writing
    /// and restoring state files whose paths are relative to it.
    pub fn snapshot_storage(&self) -> SnapshotStorage {
        SnapshotStorage {
            store: Arc::clone(&self.store),
            root: self.root.clone(),
            local: self.files.clone().map(|files| files as Arc<dyn LocalFiles>),
        }
    }

    fn local(path: &str, url: &str) -> Result<Self> {
        let io_error = |source| CheckpointError::LocalDirectory {
            path: path.to_owned(),
            source,
        };
        let given = std::path::Path::new(path);
        let opens_snapshot = given.is_file() || given.join(layout::METADATA_FILE).is_file();
        if !opens_snapshot {
            std::fs::create_dir_all(given).map_err(io_error)?;
        }
        let given = std::fs::canonicalize(given).map_err(io_error)?;
        // Opening an existing `_metadata` (or its directory) roots the store
        // two levels up, at the job directory of a checkpoint
        // (`<job>/chk-<n>/_metadata`) or the parent of a savepoint, so the
        // files a checkpoint's paths name stay reachable. Anything else is a
        // directory to write into and becomes the store's root.
        let levels_up = match (opens_snapshot, given.is_file()) {
            (false, _) => 0,
            (true, true) => 2,
            (true, false) => 1,
        };
        let store_dir = given.ancestors().nth(levels_up).unwrap_or(&given);
        let relative = given
            .strip_prefix(store_dir)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        // Automatic cleanup removes directories emptied by deletes (up to the
        // store root), so a subsumed `chk-<n>/` disappears entirely; fsync
        // makes a completed `_metadata` survive a power loss, as it would on
        // an object store. The wrapper never follows a link below the
        // (canonical) store directory.
        let store = LocalFileSystem::new_with_prefix(store_dir)
            .map_err(|source| CheckpointError::OpenStore {
                url: url.to_owned(),
                source,
            })?
            .with_automatic_cleanup(true)
            .with_fsync(true);
        let files = Arc::new(LocalStore::new(store, store_dir.to_path_buf()));
        Ok(Self {
            local: Some(given.clone()),
            files: Some(Arc::clone(&files)),
            ..Self::new(files, Self::prefix(&relative, url)?, url)
        })
    }

    fn prefix(prefix: &str, url: &str) -> Result<Path> {
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            return Ok(Path::default());
        }
        Path::parse(prefix).map_err(|_| CheckpointError::InvalidUrl {
            url: url.to_owned(),
            reason: "its path has an empty, '.' or '..' segment",
        })
    }
}

#[cfg(test)]
mod tests {
    use object_store::ObjectStoreExt;

    use super::*;

    #[tokio::test]
    async fn a_local_store_can_be_slowed_down_and_refuses_unknown_options() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().to_string_lossy().into_owned();
        let slow =
            StorageLocation::parse(&url, &StorageOptions::default().with(PUT_DELAY_MS, "150"))
                .expect("slow store");
        // How slow it is belongs to benchmarks (and the Spark asynchrony test);
        // here: writes through the slowed store still land, and reads of a
        // store that is being written (leases, `_metadata`) work.
        slow.store()
            .put(
                &Path::from("a"),
                object_store::PutPayload::from_static(b"x"),
            )
            .await
            .expect("put");
        assert!(dir.path().join("a").is_file());
        let read = slow.store().get(&Path::from("a")).await.expect("get");
        assert_eq!(read.bytes().await.expect("bytes").as_ref(), b"x");
        let typo = StorageLocation::parse(&url, &StorageOptions::default().with("put_dely", "1"));
        assert!(matches!(
            typo,
            Err(CheckpointError::UnknownStorageOption { .. })
        ));
        let bad = StorageLocation::parse(&url, &StorageOptions::default().with(PUT_DELAY_MS, "x"));
        assert!(matches!(bad, Err(CheckpointError::InvalidUrl { .. })));
    }

    #[test]
    fn urls_pick_the_store_and_root() {
        let memory =
            StorageLocation::parse("memory://ckpt/a", &StorageOptions::default()).expect("memory");
        assert_eq!(memory.root().as_ref(), "ckpt/a");
        assert_eq!(
            memory.child("job").expect("valid").root().as_ref(),
            "ckpt/a/job"
        );

        let dir = tempfile::tempdir().expect("tempdir");
        let plain = dir.path().join("plain");
        let local = StorageLocation::parse(&plain.to_string_lossy(), &StorageOptions::default())
            .expect("plain path");
        assert!(plain.is_dir());
        assert_eq!(local.root().as_ref(), "");
        let url = format!("file://{}", dir.path().join("url").display());
        StorageLocation::parse(&url, &StorageOptions::default()).expect("file url");
        assert!(dir.path().join("url").is_dir());

        let s3 = StorageLocation::parse(
            "s3://bucket/ckpt/",
            &StorageOptions::default().with("region", "us-east-1"),
        )
        .expect("s3");
        assert_eq!(s3.root().as_ref(), "ckpt");
    }

    #[test]
    fn bad_urls_are_explained() {
        let opts = StorageOptions::default();
        for url in [
            "ftp://x/y",
            "file://relative/x",
            "s3:///prefix",
            "memory://a/../b",
        ] {
            assert!(
                matches!(
                    StorageLocation::parse(url, &opts),
                    Err(CheckpointError::InvalidUrl { .. })
                ),
                "{url}"
            );
        }
        let typo = StorageOptions::default().with("endpiont", "http://x");
        assert!(matches!(
            StorageLocation::parse("s3://b/p", &typo),
            Err(CheckpointError::UnknownStorageOption { .. })
        ));
    }
}
