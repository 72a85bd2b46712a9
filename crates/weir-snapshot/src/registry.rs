//! Reference counts of shared files across checkpoints.
//!
//! Incremental checkpoints reuse SST files uploaded by earlier ones; a
//! shared file may be deleted once no retained checkpoint references it.
//! Pure bookkeeping: no I/O. The checkpoint storage deletes what
//! [`SharedFileRegistry::release`] returns, and the snapshot task asks it
//! which local files were uploaded already.
//!
//! With several checkpoints in flight at once, a pending checkpoint may reuse
//! a file that a release frees before that checkpoint completes; the storage
//! should delay deletions until every checkpoint pending at release time has
//! completed or been aborted. With one checkpoint at a time (the default)
//! this cannot happen.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use weir_types::CheckpointId;

use crate::handle::{KeyedStateHandle, SharedStateFile};

/// Shared files of completed checkpoints with their reference counts.
#[derive(Debug, Clone, Default)]
pub struct SharedFileRegistry {
    files: HashMap<String, Entry>,
    checkpoints: BTreeMap<CheckpointId, BTreeSet<String>>,
}

#[derive(Debug, Clone)]
struct Entry {
    file: SharedStateFile,
    references: u32,
}

impl SharedFileRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that completed `checkpoint` references the shared files of
    /// `handle` (full handles have none). Registering the same file twice for
    /// one checkpoint counts it once, so this is idempotent.
    pub fn register(&mut self, checkpoint: CheckpointId, handle: &KeyedStateHandle) {
        let KeyedStateHandle::Incremental(handle) = handle else {
            return;
        };
        let paths = self.checkpoints.entry(checkpoint).or_default();
        for shared in &handle.shared {
            if paths.insert(shared.file.path.clone()) {
                self.files
                    .entry(shared.file.path.clone())
                    .or_insert_with(|| Entry {
                        file: shared.clone(),
                        references: 0,
                    })
                    .references += 1;
            }
        }
    }

    /// Forgets `checkpoint` (subsumed or discarded) and returns the shared
    /// files no retained checkpoint references any more, to be deleted.
    pub fn release(&mut self, checkpoint: CheckpointId) -> Vec<SharedStateFile> {
        let mut unreferenced = Vec::new();
        for path in self.checkpoints.remove(&checkpoint).unwrap_or_default() {
            let Some(entry) = self.files.get_mut(&path) else {
                continue;
            };
            entry.references -= 1;
            if entry.references == 0
                && let Some(entry) = self.files.remove(&path)
            {
                unreferenced.push(entry.file);
            }
        }
        unreferenced
    }

    /// An uploaded file under `dir` (a subtask's shared directory) that was
    /// stored from a local file named `local_name` of `size` bytes: the
    /// same immutable SST, which need not be uploaded again.
    pub fn find_uploaded(
        &self,
        dir: &str,
        local_name: &str,
        size: u64,
    ) -> Option<&SharedStateFile> {
        self.files.values().map(|e| &e.file).find(|f| {
            f.local_name == local_name
                && f.file.size == size
                && f.file
                    .path
                    .strip_prefix(dir)
                    .and_then(|rest| rest.strip_prefix('/'))
                    .is_some_and(|name| !name.contains('/'))
        })
    }

    /// How many retained checkpoints reference the file at `path`.
    pub fn references(&self, path: &str) -> u32 {
        self.files.get(path).map_or(0, |e| e.references)
    }

    /// The checkpoints currently registered.
    pub fn checkpoints(&self) -> impl Iterator<Item = CheckpointId> + '_ {
        self.checkpoints.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use weir_types::{KeyGroupRange, MaxParallelism};

    use super::*;
    use crate::handle::{IncrementalSnapshotHandle, StateFile};

    fn shared(name: &str, chk: u64) -> SharedStateFile {
        SharedStateFile {
            local_name: name.to_owned(),
            file: StateFile {
                path: format!("shared/op/0/{chk}-{name}"),
                size: 10,
                crc32: 1,
            },
        }
    }

    fn handle(files: &[SharedStateFile]) -> KeyedStateHandle {
        KeyedStateHandle::Incremental(IncrementalSnapshotHandle {
            key_group_range: KeyGroupRange::new(0, 4).expect("valid"),
            max_parallelism: MaxParallelism::new(4).expect("valid"),
            descriptors: vec![],
            shared: files.to_vec(),
            private: vec![],
        })
    }

    #[test]
    fn files_live_while_a_checkpoint_references_them() {
        let (a, b, c) = (shared("1.sst", 1), shared("2.sst", 1), shared("3.sst", 2));
        let mut r = SharedFileRegistry::new();
        r.register(CheckpointId(1), &handle(&[a.clone(), b.clone()]));
        r.register(CheckpointId(2), &handle(&[a.clone(), c.clone()]));
        r.register(CheckpointId(2), &handle(std::slice::from_ref(&a)));
        assert_eq!(r.references(&a.file.path), 2);

        assert_eq!(r.release(CheckpointId(1)), vec![b.clone()]);
        assert_eq!(r.references(&a.file.path), 1);
        let mut freed = r.release(CheckpointId(2));
        freed.sort_by(|x, y| x.local_name.cmp(&y.local_name));
        assert_eq!(freed, vec![a, c]);
        assert!(r.release(CheckpointId(2)).is_empty());
        assert_eq!(r.checkpoints().count(), 0);
    }

    #[test]
    fn uploaded_files_are_found_by_directory_name_and_size() {
        let a = shared("1.sst", 1);
        let mut r = SharedFileRegistry::new();
        r.register(CheckpointId(1), &handle(std::slice::from_ref(&a)));
        assert_eq!(r.find_uploaded("shared/op/0", "1.sst", 10), Some(&a));
        assert_eq!(r.find_uploaded("shared/op/1", "1.sst", 10), None);
        assert_eq!(r.find_uploaded("shared/op", "1.sst", 10), None);
        assert_eq!(r.find_uploaded("shared/op/0", "1.sst", 11), None);
    }
}
