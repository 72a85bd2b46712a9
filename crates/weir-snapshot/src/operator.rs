//! Operator (non-keyed) state files: one subtask's
//! [`OperatorStateSnapshot`] in its checksummed binary encoding, stored as
//! one object.
//!
//! Operator state is small (source positions, buffers), so it is written
//! with a single put rather than streamed; redistribution on rescale is
//! `weir_state::redistribute`'s business, not this module's.

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use weir_state::OperatorStateSnapshot;

use crate::error::{Result, SnapshotError};
use crate::handle::StateFile;
use crate::layout::join;

/// Writes `snapshot` to `relative` under `root` and returns its handle.
pub async fn write_operator_state(
    snapshot: &OperatorStateSnapshot,
    store: &dyn ObjectStore,
    root: &Path,
    relative: &str,
) -> Result<StateFile> {
    let location = join(root, relative)?;
    let bytes = snapshot.encode();
    let file = StateFile {
        path: relative.to_owned(),
        size: bytes.len() as u64,
        crc32: crc32fast::hash(&bytes),
    };
    store
        .put(&location, PutPayload::from(bytes))
        .await
        .map_err(|e| SnapshotError::storage("write", &location, e))?;
    Ok(file)
}

/// Reads the operator state file of `file` (relative to `root`), checking
/// its size and checksum against the handle.
pub async fn read_operator_state(
    file: &StateFile,
    store: &dyn ObjectStore,
    root: &Path,
) -> Result<OperatorStateSnapshot> {
    let location = join(root, &file.path)?;
    let bytes = store
        .get(&location)
        .await
        .map_err(|e| SnapshotError::storage("read", &location, e))?
        .bytes()
        .await
        .map_err(|e| SnapshotError::storage("read", &location, e))?;
    file.check_size(bytes.len() as u64)?;
    file.check_crc32(crc32fast::hash(&bytes))?;
    OperatorStateSnapshot::decode(&bytes).map_err(|source| SnapshotError::OperatorState {
        path: file.path.clone(),
        source,
    })
}
