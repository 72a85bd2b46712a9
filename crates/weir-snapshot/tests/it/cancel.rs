//! Canceling or dropping a snapshot leaves no object behind.

use std::sync::Mutex;
use std::sync::mpsc;

use weir_snapshot::format::Compression;
use weir_snapshot::{FullSnapshotOptions, SnapshotError, spawn_full_snapshot};
use weir_state::{FrozenKeyedState, KeyedStateBackend, StateEntry};
use weir_types::{KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor};

use crate::common::*;

/// A real frozen view that pauses at one key group until the test lets it
/// go, so cancellation happens mid-upload without guessing at timings.
struct Gated {
    inner: Box<dyn FrozenKeyedState>,
    at: KeyGroup,
    reached: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl FrozenKeyedState for Gated {
    fn descriptors(&self) -> &[StateDescriptor] {
        self.inner.descriptors()
    }
    fn key_group_range(&self) -> KeyGroupRange {
        self.inner.key_group_range()
    }
    fn max_parallelism(&self) -> MaxParallelism {
        self.inner.max_parallelism()
    }
    fn for_each_entry(
        &self,
        key_group: KeyGroup,
        visit: &mut dyn FnMut(StateEntry<'_>) -> weir_state::Result<()>,
    ) -> weir_state::Result<()> {
        if key_group == self.at {
            let _ = self.reached.lock().expect("not poisoned").send(());
            let _ = self.release.lock().expect("not poisoned").recv();
        }
        self.inner.for_each_entry(key_group, visit)
    }
}

fn gated() -> (
    Box<dyn FrozenKeyedState>,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
) {
    let mut b = filled_backend(1, 0);
    let (reached_tx, reached_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let frozen = Gated {
        inner: b.snapshot_sync().expect("all epochs final"),
        at: KeyGroup(MAX as u16 / 2),
        reached: Mutex::new(reached_tx),
        release: Mutex::new(release_rx),
    };
    (Box::new(frozen), reached_rx, release_tx)
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("readable dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

fn options() -> FullSnapshotOptions {
    FullSnapshotOptions {
        compression: Compression::None,
        key_types: None,
        part_size: 64,
        encode_threads: 2,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_upload_removes_partial_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&dir);
    let (frozen, reached, release) = gated();
    let runtime = tokio::runtime::Handle::current();
    let future = spawn_full_snapshot(&runtime, frozen, &storage, "chk-1/op/0", options());
    tokio::task::spawn_blocking(move || reached.recv())
        .await
        .expect("joined")
        .expect("the encoder reached the gate");
    future.cancel();
    release.send(()).expect("encoder waits");
    let err = future.await.expect_err("canceled");
    assert!(matches!(err, SnapshotError::Cancelled), "{err}");
    assert_eq!(files_under(dir.path()), Vec::<std::path::PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_after_upload_removes_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&dir);
    let mut b = filled_backend(1, 0);
    let frozen = b.snapshot_sync().expect("all epochs final");
    let runtime = tokio::runtime::Handle::current();
    let future = spawn_full_snapshot(&runtime, frozen, &storage, "chk-1/op/0", options());
    // Cancel whenever the task is: before, during or after the upload, the
    // result is the same.
    future.cancel();
    assert!(matches!(future.await, Err(SnapshotError::Cancelled)));
    assert_eq!(files_under(dir.path()), Vec::<std::path::PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_unfinished_snapshot_removes_its_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&dir);
    let (frozen, reached, release) = gated();
    let runtime = tokio::runtime::Handle::current();
    let future = spawn_full_snapshot(&runtime, frozen, &storage, "chk-1/op/0", options());
    tokio::task::spawn_blocking(move || reached.recv())
        .await
        .expect("joined")
        .expect("the encoder reached the gate");
    drop(future);
    release.send(()).expect("encoder waits");
    // Cleanup runs in the background after a drop: wait for it, boundedly.
    for _ in 0..1000 {
        if files_under(dir.path()).is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("files left behind: {:?}", files_under(dir.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_future_resolves_at_once() {
    let outcome = weir_snapshot::SnapshotOutcome {
        handle: 7u32,
        metrics: weir_snapshot::SnapshotMetrics::default(),
    };
    let done = weir_snapshot::SnapshotFuture::completed(outcome.clone());
    assert_eq!(done.await.expect("completed"), outcome);
    let canceled = weir_snapshot::SnapshotFuture::completed(outcome);
    canceled.cancel();
    assert!(matches!(canceled.await, Err(SnapshotError::Cancelled)));
}

/// A sink that fails part way stops the encoding threads and the error comes
/// back; nothing waits for key groups that will never be placed.
#[test]
fn a_failing_sink_stops_every_encoding_thread() {
    let mut backend = filled_backend(1, 0);
    backend.finalize_up_to(weir_types::Epoch(1)).expect("final");
    let frozen = backend.snapshot_sync().expect("all epochs final");
    let header = weir_snapshot::format::SnapshotHeader {
        max_parallelism: max(),
        key_group_range: frozen.key_group_range(),
        descriptors: frozen.descriptors().to_vec(),
        key_types: None,
        compression: Compression::Zstd,
    };
    for threads in [1, 2, 4] {
        let mut chunks = 0;
        let result =
            weir_snapshot::format::encode_frozen(&*frozen, header.clone(), threads, &mut |_| {
                chunks += 1;
                if chunks == 3 {
                    Err(SnapshotError::Cancelled)
                } else {
                    Ok(())
                }
            });
        assert!(
            matches!(result, Err(SnapshotError::Cancelled)),
            "{threads} threads"
        );
        assert_eq!(chunks, 3, "{threads} threads: no chunk after the failure");
    }
}
