//! Small JSON records in a job directory (the lineage and the lease): read
//! whole, written whole in one put, so a reader sees the old or the new
//! record, never a mix.

use object_store::{PutMode, PutOptions, PutPayload};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{CheckpointError, Result};
use crate::layout;
use crate::location::StorageLocation;
use crate::resolved::get;

/// How a record is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// Replace whatever is there.
    Overwrite,
    /// Only if nothing is there; `Ok(false)` when something is.
    Create,
}

/// The record at `relative` under `dir`, or `None` if there is none.
pub(crate) async fn read<T: DeserializeOwned>(
    dir: &StorageLocation,
    relative: &str,
) -> Result<Option<T>> {
    let path = layout::join(dir.root(), relative)?;
    let name = format!("{}/{relative}", dir.url().trim_end_matches('/'));
    let Some(bytes) = get(dir.store().as_ref(), &path, &name).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| CheckpointError::MalformedRecord { path: name, source })
}

/// Writes `record` at `relative` under `dir`; returns whether it was written
/// (always, for [`Write::Overwrite`]).
pub(crate) async fn write<T: Serialize>(
    dir: &StorageLocation,
    relative: &str,
    record: &T,
    mode: Write,
) -> Result<bool> {
    let path = layout::join(dir.root(), relative)?;
    let name = format!("{}/{relative}", dir.url().trim_end_matches('/'));
    let bytes = serde_json::to_vec(record).map_err(|source| CheckpointError::MalformedRecord {
        path: name.clone(),
        source,
    })?;
    let options = PutOptions {
        mode: match mode {
            Write::Overwrite => PutMode::Overwrite,
            Write::Create => PutMode::Create,
        },
        ..PutOptions::default()
    };
    match dir
        .store()
        .put_opts(&path, PutPayload::from(bytes), options)
        .await
    {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. }) if mode == Write::Create => Ok(false),
        Err(source) => Err(CheckpointError::Store {
            operation: "put",
            path: name,
            source,
        }),
    }
}
