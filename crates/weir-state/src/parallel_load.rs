//! Restoring several key groups at once, each on its own thread, in a
//! backend that hands out whole key groups
//! ([`KeyedStateBackend::detach_key_group`]).
//!
//! A restore is CPU work per entry (decode, copy, insert), and key groups
//! are independent: taken out of the backend, each can be filled on another
//! thread and put back. Restores from snapshot files (`weir-snapshot`) and
//! copies between backends (`weir-host`) both load this way.
//!
//! Several subtasks of one process may restore at once (a state host's
//! tasks start together); [`LoadThreads`] shares the cores among them, so
//! that together they run no more threads than there are cores.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use weir_types::KeyGroup;

use crate::backend::{KeyGroupLoad, KeyedStateBackend};
use crate::error::StateError;

/// More threads than this gain little: reading the input and putting key
/// groups back on the calling thread become the limit.
const MAX_LOAD_THREADS: usize = 4;

/// Threads of this process that restores use now, the restores' own
/// threads included.
static LOADING: AtomicUsize = AtomicUsize::new(0);

/// Threads one restore may use now, out of the cores there are (up to
/// four) less what other restores of this process use; at least one, its
/// own. Given back when dropped.
#[derive(Debug)]
pub struct LoadThreads {
    granted: usize,
}

/// The cores restores may use in all: those there are, up to four.
fn load_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_LOAD_THREADS))
}

impl LoadThreads {
    /// Takes what is free now.
    pub fn take() -> Self {
        let cores = load_cores();
        let mut granted = 1;
        // The closure always returns `Some`: the update cannot fail.
        let _ = LOADING.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |busy| {
            granted = cores.saturating_sub(busy).max(1);
            Some(busy + granted)
        });
        Self { granted }
    }

    /// How many threads were granted (1: load on the calling thread).
    pub fn count(&self) -> usize {
        self.granted
    }
}

impl Drop for LoadThreads {
    fn drop(&mut self) {
        LOADING.fetch_sub(self.granted, Ordering::Relaxed);
    }
}

/// Takes `key_groups` out of `backend`, fills each on one of up to `threads`
/// threads with `fill(i, load)` (`i` indexes `key_groups`), finishes it
/// there ([`KeyGroupLoad::finish`]), and puts every key group back, also
/// after an error, the first of which is returned.
///
/// Returns `Ok(false)`, having done nothing, when the backend hands out no
/// key groups (it restores through [`KeyedStateBackend::ingest`] only) or
/// when `threads` is 1 (entry by entry costs less then).
pub fn load_key_groups<E>(
    backend: &mut dyn KeyedStateBackend,
    key_groups: &[KeyGroup],
    threads: usize,
    fill: &(dyn Fn(usize, &mut dyn KeyGroupLoad) -> Result<(), E> + Sync),
) -> Result<bool, E>
where
    E: From<StateError> + Send,
{
    if threads <= 1 || key_groups.is_empty() {
        return Ok(false);
    }
    let mut loads = Vec::with_capacity(key_groups.len());
    for &key_group in key_groups {
        match backend.detach_key_group(key_group)? {
            Some(load) => loads.push(Mutex::new(load)),
            None => {
                debug_assert!(
                    loads.is_empty(),
                    "a backend detaches every key group or none"
                );
                // Whatever was taken goes back before the caller ingests
                // entry by entry.
                put_back(backend, loads)?;
                return Ok(false);
            }
        }
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failed = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(loads.len()) {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(load) = loads.get(i) else {
                        return;
                    };
                    let mut load = load.lock().unwrap_or_else(PoisonError::into_inner);
                    let filled = fill(i, load.as_mut()).and_then(|()| Ok(load.finish()?));
                    if let Err(e) = filled {
                        stop.store(true, Ordering::Relaxed);
                        failed
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .get_or_insert(e);
                    }
                }
            });
        }
    });
    let attached = put_back(backend, loads);
    if let Some(e) = failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(e);
    }
    attached?;
    Ok(true)
}

/// Attaches every key group of `loads` to `backend`; the first error after
/// all were tried.
fn put_back(
    backend: &mut dyn KeyedStateBackend,
    loads: Vec<Mutex<Box<dyn KeyGroupLoad>>>,
) -> Result<(), StateError> {
    let mut attached = Ok(());
    for load in loads {
        let load = load.into_inner().unwrap_or_else(PoisonError::into_inner);
        let result = backend.attach_key_group(load);
        if attached.is_ok() {
            attached = result;
        }
    }
    attached
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_at_once_share_the_cores() {
        let cores = load_cores();
        let first = LoadThreads::take();
        assert_eq!(first.count(), cores);
        let second = LoadThreads::take();
        assert_eq!(
            second.count(),
            1,
            "no core is free: it loads on its own thread"
        );
        drop(first);
        let third = LoadThreads::take();
        assert_eq!(third.count(), cores.saturating_sub(1).max(1));
        drop((second, third));
        assert_eq!(
            LoadThreads::take().count(),
            cores,
            "every thread was given back"
        );
    }
}
