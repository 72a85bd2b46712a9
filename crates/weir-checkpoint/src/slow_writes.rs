//! A store whose writes are deliberately slow: the local store behind the
//! `put_delay_ms` option, which tests and benchmarks use to make uploads
//! outlast epochs.
//!
//! `object_store`'s `ThrottledStore` would do, but it panics on any read
//! from a local file system (it cannot throttle a file payload), and a
//! checkpoint storage is read while it is written: leases, the latest
//! `_metadata`, restores. Here only writes wait; reads and listings pass
//! through untouched.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, UploadPart,
};

/// Wraps a store; every put, copy and rename first waits for `delay`, and
/// every part of a multipart upload completes no sooner than `delay` after
/// it was handed over.
#[derive(Debug)]
pub(crate) struct SlowWrites {
    inner: Arc<dyn ObjectStore>,
    delay: Duration,
}

impl SlowWrites {
    pub(crate) fn new(inner: Arc<dyn ObjectStore>, delay: Duration) -> Self {
        Self { inner, delay }
    }
}

impl fmt::Display for SlowWrites {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlowWrites({}, {:?})", self.inner, self.delay)
    }
}

#[async_trait]
impl ObjectStore for SlowWrites {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        tokio::time::sleep(self.delay).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(SlowUpload {
            upload,
            delay: self.delay,
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        tokio::time::sleep(self.delay).await;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        tokio::time::sleep(self.delay).await;
        self.inner.rename_opts(from, to, options).await
    }
}

#[derive(Debug)]
struct SlowUpload {
    upload: Box<dyn MultipartUpload>,
    delay: Duration,
}

#[async_trait]
impl MultipartUpload for SlowUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let delay = self.delay;
        let put = self.upload.put_part(data);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            put.await
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.upload.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.upload.abort().await
    }
}
