//! Measuring what code allocates, so tests can assert that a reader's memory
//! stays bounded whatever its input claims.
//!
//! A test binary installs [`CountingAllocator`] as its global allocator;
//! [`peak_allocated`] then reports the most bytes live at once while a
//! closure ran, counted on the calling thread only, so tests running in
//! parallel threads do not disturb each other. Work the closure hands to
//! other threads (a multi-threaded runtime, `spawn_blocking`) is not
//! counted: measure code that runs on the calling thread.
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: weir_testing::CountingAllocator = weir_testing::CountingAllocator;
//!
//! fn main() {
//!     let (buffer, peak) = weir_testing::peak_allocated(|| vec![1u8; 1 << 20]);
//!     assert!(peak >= 1 << 20);
//!     drop(buffer);
//!     let (_, peak) = weir_testing::peak_allocated(|| 2 + 2);
//!     assert_eq!(peak, 0);
//! }
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // Const-initialized cells without destructors: safe to touch from the
    // allocator, which runs before and during thread-local setup.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

/// The system allocator, counting the bytes each thread has live.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

fn record(delta: i64) {
    // During thread teardown the cells may be gone; the count no longer matters.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn size(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the bookkeeping only touches thread-local cells
// and never allocates.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            record(size(layout.size()));
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            record(size(layout.size()));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`.
        unsafe { System.dealloc(ptr, layout) };
        record(-size(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller
        // guarantees `new_size` is valid for it.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            record(size(new_size) - size(layout.size()));
        }
        new
    }
}

/// Runs `f` and returns its result with the most bytes that were live at
/// once on this thread while it ran, beyond what was live before. Zero
/// unless the binary's global allocator is a [`CountingAllocator`].
pub fn peak_allocated<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(before));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, u64::try_from(peak - before).unwrap_or(0))
}
