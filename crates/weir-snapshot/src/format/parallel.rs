//! Encoding a snapshot's key groups on several threads.
//!
//! Each thread takes the next key group not yet taken, walks the frozen view
//! for it, encodes and compresses the block, and sends it to the calling
//! thread, which places blocks in key-group order. A thread waits before
//! taking a key group more than [`AHEAD_PER_THREAD`] per thread past the
//! oldest block not yet placed, so the blocks held in memory stay bounded
//! even when one key group is much larger than the others.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use weir_state::FrozenKeyedState;
use weir_types::KeyGroup;

use super::encoder::{BlockWriter, KeyGroupBlock};
use crate::error::Result;

/// How far, in key groups per thread, the threads may run ahead of the
/// placed blocks.
const AHEAD_PER_THREAD: usize = 2;

/// Encodes `key_groups` (ascending) on `threads` threads and hands each
/// non-empty block to `place`, in order. The first error (of a block or of
/// `place`) stops every thread and is returned.
pub(crate) fn encode(
    frozen: &dyn FrozenKeyedState,
    key_groups: &[KeyGroup],
    threads: usize,
    writer: &BlockWriter,
    place: &mut dyn FnMut(KeyGroupBlock) -> Result<()>,
) -> Result<()> {
    let window = threads * AHEAD_PER_THREAD;
    let next = AtomicUsize::new(0);
    let turns = Turns::default();
    let (blocks, ready) = mpsc::channel::<(usize, Result<Option<KeyGroupBlock>>)>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let blocks = blocks.clone();
            let mut writer = writer.clone();
            let (next, turns) = (&next, &turns);
            scope.spawn(move || {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&key_group) = key_groups.get(index) else {
                        return;
                    };
                    if !turns.wait_for(index, window) {
                        return;
                    }
                    let block = writer.encode(frozen, key_group);
                    if blocks.send((index, block)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(blocks);
        let placed = place_in_order(&ready, &turns, place);
        // Wakes the threads still waiting for their turn, so the scope ends.
        turns.stop();
        drop(ready);
        placed
    })
}

/// Receives blocks in any order and places them in index order.
fn place_in_order(
    ready: &mpsc::Receiver<(usize, Result<Option<KeyGroupBlock>>)>,
    turns: &Turns,
    place: &mut dyn FnMut(KeyGroupBlock) -> Result<()>,
) -> Result<()> {
    let mut waiting = BTreeMap::new();
    let mut wanted = 0;
    for (index, block) in ready {
        waiting.insert(index, block);
        while let Some(block) = waiting.remove(&wanted) {
            if let Some(block) = block? {
                place(block)?;
            }
            wanted += 1;
            turns.advance(wanted);
        }
    }
    Ok(())
}

/// How many blocks are placed, which threads wait on before running ahead.
#[derive(Debug, Default)]
struct Turns {
    state: Mutex<TurnState>,
    moved: Condvar,
}

#[derive(Debug, Default)]
struct TurnState {
    placed: usize,
    stopped: bool,
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until key group `index` is within `window` of the placed
    /// blocks; `false` when the work stopped instead.
    fn wait_for(&self, index: usize, window: usize) -> bool {
        let mut state = self.lock();
        while !state.stopped && index >= state.placed + window {
            state = self
                .moved
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        !state.stopped
    }

    fn advance(&self, placed: usize) {
        self.lock().placed = placed;
        self.moved.notify_all();
    }

    fn stop(&self) {
        self.lock().stopped = true;
        self.moved.notify_all();
    }
}
