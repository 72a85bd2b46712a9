//! Native checkpoint files in and out of storage that is a local directory.
//!
//! Streaming a file through an object store's multipart upload reads it,
//! copies it into parts and writes a staging file; on the local file system
//! the file can instead be linked into place: no byte moves, and an SST
//! that RocksDB never rewrites is safe to share between the database and
//! the checkpoint. Across file systems the kernel copies it. Either way the
//! checksum the handle records is computed from the file, as an upload
//! would, and a restore reads the file for it again.

use std::fmt::Debug;
use std::io::Read;
use std::path::Path as LocalPath;

use object_store::path::Path;

use crate::error::{Result, SnapshotError};
use crate::handle::StateFile;

/// Bytes checksummed at a time.
const CHECKSUM_CHUNK: usize = 1 << 20;

/// Storage that is a directory of this machine's file system (implemented by
/// the checkpoint crate's local store, which refuses symbolic links below
/// its root as its other operations do).
pub trait LocalFiles: Debug + Send + Sync {
    /// Places the local file `source` at `location` of the store, replacing
    /// whatever is there, durably and atomically: a hard link, or a copy
    /// where the file systems differ. Blocking.
    fn place(&self, source: &LocalPath, location: &Path) -> object_store::Result<()>;

    /// Places the object at `location` at the local path `target`, which
    /// must not exist: a hard link if `share` (the caller never writes to
    /// the file) and the file systems allow it, else a copy. Blocking.
    fn fetch(&self, location: &Path, target: &LocalPath, share: bool) -> object_store::Result<()>;
}

/// Places `source` at `location` (`relative` in the handle); returns the
/// handle's entry for it.
pub(crate) fn place_file(
    files: &dyn LocalFiles,
    source: &LocalPath,
    location: &Path,
    relative: &str,
) -> Result<StateFile> {
    let (size, crc32) = checksum(source)?;
    files
        .place(source, location)
        .map_err(|e| SnapshotError::storage("write", location, e))?;
    Ok(StateFile {
        path: relative.to_owned(),
        size,
        crc32,
    })
}

/// Places `file` (at `location`) at `target` and checks its size there;
/// [`check_checksum`] reads it for its checksum.
pub(crate) fn fetch_file(
    files: &dyn LocalFiles,
    file: &StateFile,
    location: &Path,
    target: &LocalPath,
    share: bool,
) -> Result<()> {
    files
        .fetch(location, target, share)
        .map_err(|e| SnapshotError::storage("read", location, e))?;
    let size = std::fs::metadata(target)
        .map_err(|source| SnapshotError::LocalIo {
            operation: "stat",
            path: target.to_owned(),
            source,
        })?
        .len();
    file.check_size(size)
}

/// Checks that the local file `target` has `file`'s checksum.
pub(crate) fn check_checksum(file: &StateFile, target: &LocalPath) -> Result<()> {
    let (size, crc32) = checksum(target)?;
    file.check_size(size)?;
    file.check_crc32(crc32)
}

/// The size and CRC-32 of a local file.
fn checksum(path: &LocalPath) -> Result<(u64, u32)> {
    let io_err = |operation| {
        move |source| SnapshotError::LocalIo {
            operation,
            path: path.to_owned(),
            source,
        }
    };
    let mut file = std::fs::File::open(path).map_err(io_err("open"))?;
    let mut crc = crc32fast::Hasher::new();
    let mut buffer = vec![0; CHECKSUM_CHUNK];
    let mut size = 0;
    loop {
        let read = file.read(&mut buffer).map_err(io_err("read"))?;
        if read == 0 {
            return Ok((size, crc.finalize()));
        }
        crc.update(&buffer[..read]);
        size += read as u64;
    }
}
