//! Native checkpoints: incremental size, restore into a narrower range
//! (scale-out) and from several checkpoints (scale-in).

use std::path::{Path, PathBuf};

use weir_state::{FrozenKeyedState, KeyedStateBackend, StateError};
use weir_state_rocksdb::{RocksDbError, RocksDbKeyedStateBackend};
use weir_types::{Attempt, Epoch, KeyGroupRange};

use crate::fixture::{Key, final_epoch, list, max, options, register_all, value};

fn range(start: u32, end: u32) -> KeyGroupRange {
    KeyGroupRange::new(start, end).expect("valid")
}

/// A backend over `range` holding keys `0..n` (those in range) with value,
/// list and map entries, finalized as epoch 1.
fn filled(path: &Path, range: KeyGroupRange, n: i64) -> RocksDbKeyedStateBackend {
    let mut b = RocksDbKeyedStateBackend::open(options(path, range)).expect("open");
    let s = register_all(&mut b);
    final_epoch(&mut b, 1, |b| {
        for i in 0..n {
            let k = Key::new(i);
            if range.contains(k.key_group) {
                b.put_value(s.value, k.state_key(), &i.to_le_bytes())
                    .expect("put");
                b.append_list(s.list, k.state_key(), &list(&[b"x"]))
                    .expect("append");
                b.map_put(s.map, k.state_key(), b"u", b"m").expect("put");
            }
        }
    });
    b
}

fn entry_count(frozen: &dyn FrozenKeyedState) -> usize {
    let mut n = 0;
    for kg in frozen.key_group_range().iter() {
        frozen
            .for_each_entry(kg, &mut |_| {
                n += 1;
                Ok(())
            })
            .expect("scan");
    }
    n
}

fn keys_in(range: KeyGroupRange, n: i64) -> usize {
    (0..n)
        .filter(|&i| range.contains(Key::new(i).key_group))
        .count()
}

#[test]
fn checkpoint_lists_shared_ssts_and_private_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = filled(&dir.path().join("db"), max().full_range(), 100);
    let chk = b
        .native_checkpoint(&dir.path().join("chk-1"))
        .expect("checkpoint");
    assert!(
        chk.files
            .iter()
            .any(|f| f.shared && f.local_name.ends_with(".sst"))
    );
    assert!(
        chk.files
            .iter()
            .any(|f| !f.shared && f.local_name == "CURRENT")
    );
    assert!(
        chk.files
            .iter()
            .all(|f| f.path == chk.dir.join(&f.local_name))
    );
    assert!(chk.files.iter().filter(|f| f.shared).all(|f| f.size > 0));
    assert_eq!(chk.last_final_epoch, Some(Epoch(1)));
    assert_eq!(chk.descriptors, b.descriptors());
}

#[test]
fn checkpoint_needs_every_epoch_final() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = filled(&dir.path().join("db"), max().full_range(), 10);
    b.begin_epoch(Epoch(2), Attempt(0)).expect("begin");
    assert!(matches!(
        b.native_checkpoint(&dir.path().join("chk")),
        Err(RocksDbError::State(StateError::EpochsNotFinal { .. }))
    ));
}

/// The synchronous part only queues the checkpoint: epochs that become final
/// before anyone waits for it are not in it, and the backend reads them.
#[test]
fn a_started_checkpoint_holds_the_cut_it_was_started_at() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 200;
    let mut b = filled(&dir.path().join("db"), max().full_range(), n);
    let s = register_all(&mut b);
    let pending = b
        .start_native_checkpoint(&dir.path().join("chk"))
        .expect("start");
    for e in 2..6 {
        final_epoch(&mut b, e, |b| {
            for i in 0..n {
                b.put_value(
                    s.value,
                    Key::new(i).state_key(),
                    &(i * e as i64).to_le_bytes(),
                )
                .expect("put");
            }
        });
    }
    let chk = pending.wait().expect("checkpoint");
    assert_eq!(chk.last_final_epoch, Some(Epoch(1)));
    assert_eq!(
        value(&mut b, s.value, &Key::new(7)),
        Some(35i64.to_le_bytes().to_vec())
    );
    drop(b);
    let mut restored = RocksDbKeyedStateBackend::restore_from_native(
        std::slice::from_ref(&chk.dir),
        options(&dir.path().join("restored"), max().full_range()),
    )
    .expect("restore");
    assert_eq!(restored.last_final_epoch(), Some(Epoch(1)));
    for i in 0..n {
        assert_eq!(
            value(&mut restored, s.value, &Key::new(i)),
            Some(i.to_le_bytes().to_vec())
        );
    }
}

/// A checkpoint that cannot be created fails alone; the backend folds on.
#[test]
fn a_failed_checkpoint_leaves_the_backend_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = filled(&dir.path().join("db"), max().full_range(), 10);
    let s = register_all(&mut b);
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).expect("mkdir");
    std::fs::write(taken.join("CURRENT"), b"not a checkpoint").expect("write");
    assert!(b.native_checkpoint(&taken).is_err());
    final_epoch(&mut b, 2, |b| {
        b.put_value(s.value, Key::new(1).state_key(), b"after")
            .expect("put")
    });
    let chk = b
        .native_checkpoint(&dir.path().join("chk"))
        .expect("checkpoint");
    assert_eq!(chk.last_final_epoch, Some(Epoch(2)));
}

#[test]
fn restore_into_a_narrower_range_keeps_only_its_key_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 500;
    let mut b = filled(&dir.path().join("db"), max().full_range(), n);
    let chk = b
        .native_checkpoint(&dir.path().join("chk"))
        .expect("checkpoint");
    drop(b);
    let narrow = range(5, 11);
    let mut restored = RocksDbKeyedStateBackend::restore_from_native(
        std::slice::from_ref(&chk.dir),
        options(&dir.path().join("restored"), narrow),
    )
    .expect("restore");
    assert_eq!(restored.key_group_range(), narrow);
    assert_eq!(restored.last_final_epoch(), Some(Epoch(1)));
    let s = register_all(&mut restored);
    let frozen = restored.snapshot_sync().expect("snapshot");
    assert_eq!(entry_count(frozen.as_ref()), 3 * keys_in(narrow, n));
    for i in 0..n {
        let k = Key::new(i);
        if narrow.contains(k.key_group) {
            assert_eq!(
                value(&mut restored, s.value, &k),
                Some(i.to_le_bytes().to_vec())
            );
            assert_eq!(
                restored
                    .get_list(s.list, k.state_key())
                    .expect("get")
                    .as_deref(),
                Some(&list(&[b"x"])[..])
            );
        }
    }
    // The restored backend keeps working and the checkpoint is untouched.
    let inside = (0..n)
        .map(Key::new)
        .find(|k| narrow.contains(k.key_group))
        .expect("some key in range");
    final_epoch(&mut restored, 2, |b| {
        b.put_value(s.value, inside.state_key(), b"new")
            .expect("put")
    });
    assert_eq!(
        value(&mut restored, s.value, &inside).as_deref(),
        Some(&b"new"[..])
    );
    let mut again = RocksDbKeyedStateBackend::restore_from_native(
        std::slice::from_ref(&chk.dir),
        options(&dir.path().join("again"), max().full_range()),
    )
    .expect("restore again");
    let frozen = again.snapshot_sync().expect("snapshot");
    assert_eq!(entry_count(frozen.as_ref()), 3 * n as usize);
}

#[test]
fn restore_from_several_checkpoints_merges_their_ranges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 400;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (i, r) in [range(0, 6), range(6, 11), range(11, 16)]
        .into_iter()
        .enumerate()
    {
        let mut b = filled(&dir.path().join(format!("db-{i}")), r, n);
        dirs.push(
            b.native_checkpoint(&dir.path().join(format!("chk-{i}")))
                .expect("checkpoint")
                .dir,
        );
    }
    let target = range(3, 16);
    let mut restored = RocksDbKeyedStateBackend::restore_from_native(
        &dirs,
        options(&dir.path().join("restored"), target),
    )
    .expect("restore");
    let s = register_all(&mut restored);
    let frozen = restored.snapshot_sync().expect("snapshot");
    assert_eq!(entry_count(frozen.as_ref()), 3 * keys_in(target, n));
    for i in 0..n {
        let k = Key::new(i);
        if target.contains(k.key_group) {
            assert_eq!(
                value(&mut restored, s.value, &k),
                Some(i.to_le_bytes().to_vec())
            );
            assert_eq!(
                restored
                    .map_get(s.map, k.state_key(), b"u")
                    .expect("get")
                    .as_deref(),
                Some(&b"m"[..])
            );
        }
    }
}

#[test]
fn restore_refuses_a_non_empty_target_and_no_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = filled(&dir.path().join("db"), max().full_range(), 10);
    let chk = b
        .native_checkpoint(&dir.path().join("chk"))
        .expect("checkpoint");
    assert!(matches!(
        RocksDbKeyedStateBackend::restore_from_native(
            std::slice::from_ref(&chk.dir),
            options(&dir.path().join("db"), max().full_range())
        ),
        Err(RocksDbError::TargetNotEmpty { .. })
    ));
    assert!(matches!(
        RocksDbKeyedStateBackend::restore_from_native(
            &[],
            options(&dir.path().join("x"), max().full_range())
        ),
        Err(RocksDbError::NoSources)
    ));
}

#[test]
fn incremental_checkpoint_after_changing_one_percent_is_small() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n: i64 = 100_000;
    let mut b = filled(&dir.path().join("db"), max().full_range(), n);
    // The load's flushes may start a compaction (level-0 files merged into
    // the next level); it must not land between the checkpoints.
    b.wait_for_compactions().expect("compactions end");
    let first = b
        .native_checkpoint(&dir.path().join("chk-1"))
        .expect("checkpoint");
    let s = register_all(&mut b);
    final_epoch(&mut b, 2, |b| {
        for i in (0..n).step_by(100) {
            b.put_value(s.value, Key::new(i).state_key(), &(-i).to_le_bytes())
                .expect("put");
        }
    });
    let second = b
        .native_checkpoint(&dir.path().join("chk-2"))
        .expect("checkpoint");
    let new_sst: u64 = second.new_shared_files(&first).map(|f| f.size).sum();
    let full = second.total_bytes();
    let incremental = second.incremental_bytes(&first);
    println!("full {full} bytes, incremental {incremental} bytes, new sst {new_sst} bytes");
    assert!(new_sst > 0);
    // Only the flushed 1% is new; everything else is shared with chk-1.
    assert!(new_sst * 100 < full * 3, "new sst {new_sst} vs full {full}");
    assert!(
        incremental * 100 < full * 5,
        "incremental {incremental} vs full {full}"
    );
}
