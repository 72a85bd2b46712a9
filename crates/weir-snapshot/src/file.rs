//! Reading snapshot files from an object store: the footer and index first,
//! then only the blocks of the key groups asked for, in few ranged reads.

use std::ops::Range;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use weir_state::StateEntry;
use weir_types::KeyGroupRange;

use crate::error::{FormatError, Result, SnapshotError};
use crate::format::{BlockInfo, Footer, SnapshotLayout};
use crate::layout::join;

/// Blocks are fetched in runs of about this many bytes, so a restore holds
/// little more than one run in memory.
const READ_RUN_BYTES: u64 = 8 << 20;

/// An opened snapshot file: its layout, ready to read key groups.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    relative: String,
    location: Path,
    layout: SnapshotLayout,
}

impl SnapshotFile {
    /// Opens the file at `relative` under `root`, reading its footer, header
    /// and index. `size` is the size from its handle; `None` asks the store.
    pub async fn open(
        store: &dyn ObjectStore,
        root: &Path,
        relative: &str,
        size: Option<u64>,
    ) -> Result<Self> {
        let location = join(root, relative)?;
        let size = match size {
            Some(size) => size,
            None => {
                store
                    .head(&location)
                    .await
                    .map_err(|e| SnapshotError::storage("read", &location, e))?
                    .size
            }
        };
        let format_err = |source| SnapshotError::format(relative, source);
        if size < FOOTER_MIN {
            return Err(format_err(FormatError::Truncated {
                section: crate::Section::Footer,
                needed: FOOTER_MIN,
                available: size,
            }));
        }
        let footer_bytes = read(store, &location, Footer::range(size)).await?;
        let footer = Footer::decode(size, &footer_bytes).map_err(format_err)?;
        let parts = store
            .get_ranges(&location, &[footer.header_range(), footer.index_range()])
            .await
            .map_err(|e| SnapshotError::storage("read", &location, e))?;
        let [header, index] = parts.as_slice() else {
            return Err(SnapshotError::TaskFailed {
                reason: "the store answered two ranges with another count".to_owned(),
            });
        };
        let layout = SnapshotLayout::decode(&footer, header, index).map_err(format_err)?;
        Ok(Self {
            relative: relative.to_owned(),
            location,
            layout,
        })
    }

    /// The file's path relative to its root.
    pub fn path(&self) -> &str {
        &self.relative
    }

    /// The header and index.
    pub fn layout(&self) -> &SnapshotLayout {
        &self.layout
    }

    /// Reads and checks the blocks of the key groups in `range` (key groups
    /// without entries have no block) and hands each entry to `visit`, in
    /// key-group order; stops at the first error, of either.
    ///
    /// Holds about one run of stored blocks in memory plus one entry of a
    /// zstd block being decompressed (see [`SnapshotLayout::read_block`]).
    pub async fn read_entries(
        &self,
        store: &dyn ObjectStore,
        range: KeyGroupRange,
        visit: &mut (dyn FnMut(StateEntry<'_>) -> Result<()> + Send),
    ) -> Result<()> {
        self.read_runs(store, range, &mut |blocks, stored| {
            for info in blocks {
                self.read_block(info, stored, visit)?;
            }
            Ok(())
        })
        .await
    }

    /// Reads the stored blocks of the key groups in `range` in ranged reads
    /// of about [`READ_RUN_BYTES`], and hands each run's blocks, with the
    /// run's bytes, to `each`, in key-group order.
    pub(crate) async fn read_runs(
        &self,
        store: &dyn ObjectStore,
        range: KeyGroupRange,
        each: &mut (dyn FnMut(&[BlockInfo], &StoredRun) -> Result<()> + Send),
    ) -> Result<()> {
        let mut blocks = self.layout.blocks_in(range);
        while !blocks.is_empty() {
            let start = blocks[0].offset;
            let run = blocks
                .iter()
                .position(|b| b.range().end - start > READ_RUN_BYTES)
                .unwrap_or(blocks.len())
                .max(1);
            let (now, later) = blocks.split_at(run);
            blocks = later;
            let span = SnapshotLayout::span(now).expect("a run holds at least one block");
            let bytes = read(store, &self.location, span.clone()).await?;
            each(
                now,
                &StoredRun {
                    bytes,
                    start: span.start,
                },
            )?;
        }
        Ok(())
    }

    /// Checks one block of `run` and hands each of its entries to `visit`;
    /// stops at the first error, of either.
    pub(crate) fn read_block(
        &self,
        info: &BlockInfo,
        run: &StoredRun,
        visit: &mut dyn FnMut(StateEntry<'_>) -> Result<()>,
    ) -> Result<()> {
        // A short answer from the store shows up as a truncated block.
        let stored = info.stored_in(&run.bytes, run.start);
        self.layout
            .read_block(info, stored, &mut |entry| visit(entry).map_err(Stop::Visit))
            .map_err(|stop| match stop {
                Stop::Format(e) => SnapshotError::format(&self.relative, e),
                Stop::Visit(e) => e,
            })
    }
}

/// Consecutive stored blocks, as one ranged read returned them.
#[derive(Debug)]
pub(crate) struct StoredRun {
    bytes: bytes::Bytes,
    /// The file offset of the first byte.
    start: u64,
}

/// Why reading a block stopped: the bytes, or the visitor.
enum Stop {
    Format(FormatError),
    Visit(SnapshotError),
}

impl From<FormatError> for Stop {
    fn from(e: FormatError) -> Self {
        Stop::Format(e)
    }
}

/// Prelude plus footer: no valid file is shorter.
const FOOTER_MIN: u64 = crate::format::layout::PRELUDE_LEN + crate::format::FOOTER_LEN;

async fn read(store: &dyn ObjectStore, location: &Path, range: Range<u64>) -> Result<bytes::Bytes> {
    store
        .get_range(location, range)
        .await
        .map_err(|e| SnapshotError::storage("read", location, e))
}
