//! Test-only fault injection: named points where an allocation can be made to fail at the N-th
//! next call on the calling thread, so that every caller's out-of-memory path is tested without
//! exhausting memory, and named points where the calling thread can be made to stop until the
//! test lets it go on ([`PausePoint`]), so that an interleaving that needs a stall inside a
//! protocol window is reproduced deterministically through the public calls. Per thread, so
//! tests running in parallel do not disturb each other; compiled only into this crate's unit
//! tests (no cost elsewhere).
//!
//! Not for: the maps' own hook (`aspace_map`'s `fail_allocations_after`).

use std::cell::{Cell, RefCell};
use std::thread::LocalKey;

/// One injection point: a per-thread countdown to the failing call (`0`: none armed).
pub(crate) struct FailPoint(&'static LocalKey<Cell<u64>>);

thread_local! {
    static FRAME: Cell<u64> = const { Cell::new(0) };
    static TABLE: Cell<u64> = const { Cell::new(0) };
    static REGION: Cell<u64> = const { Cell::new(0) };
}

/// `FrameCache::alloc` answers `None` as an exhausted pool does.
pub(crate) static FRAME_ALLOC: FailPoint = FailPoint(&FRAME);
/// A fresh page table cannot be allocated.
pub(crate) static TABLE_ALLOC: FailPoint = FailPoint(&TABLE);
/// `BTreeStore::reserve` fails as a store out of memory does.
pub(crate) static REGION_RESERVE: FailPoint = FailPoint(&REGION);

impl FailPoint {
    /// Arms a failure of this thread's `n`-th next call (`n >= 1`; `0` disarms).
    pub(crate) fn fail_nth(&self, n: u64) {
        self.0.with(|c| c.set(n));
    }

    /// Whether this call is the armed failure (disarming it).
    pub(crate) fn fails(&self) -> bool {
        self.0.with(|c| match c.get() {
            0 => false,
            1 => {
                c.set(0);
                true
            }
            n => {
                c.set(n - 1);
                false
            }
        })
    }
}

/// A pause point: the calling thread runs the closure armed for it (once) when it reaches the
/// point. A test arms it on the thread that will reach it with a closure that waits for the rest
/// of the test (a channel or barrier), so the thread stops exactly there.
pub(crate) struct PausePoint(&'static LocalKey<RefCell<Option<Pause>>>);

/// What a thread runs when it reaches an armed [`PausePoint`].
type Pause = Box<dyn FnOnce()>;

thread_local! {
    static STAGE1: RefCell<Option<Pause>> = const { RefCell::new(None) };
    static STAGE2: RefCell<Option<Pause>> = const { RefCell::new(None) };
    static COMMIT: RefCell<Option<Pause>> = const { RefCell::new(None) };
    static BETWEEN: RefCell<Option<Pause>> = const { RefCell::new(None) };
    static COARSE: RefCell<Option<Pause>> = const { RefCell::new(None) };
    static SHOOTER: RefCell<Option<Pause>> = const { RefCell::new(None) };
    static VMA_WRITER: RefCell<Option<Pause>> = const { RefCell::new(None) };
}

/// The lock-free fault of every design that has one (`syscalls::fault_rcu_in`), between its
/// region lookup and the leaf lock of its fill (the window in which an overlapping edit must be
/// seen through the region's mark).
pub(crate) static STAGE1_BEFORE_FILL: PausePoint = PausePoint(&STAGE1);
/// `interval`'s fault, after stage 1 gave up and before stage 2 takes its window (where it
/// would wait for an edit that holds the region).
pub(crate) static STAGE2_BEFORE_WINDOW: PausePoint = PausePoint(&STAGE2);
/// `interval`'s window commit, before its swap publishes the edit (the body's page-table work
/// is done).
pub(crate) static WINDOW_BEFORE_COMMIT: PausePoint = PausePoint(&COMMIT);
/// `faultlock`'s `mmap`, after its placement search dropped the fault lock's read side and
/// before it takes the write side (the space mutex held).
pub(crate) static FAULTLOCK_BETWEEN_GUARDS: PausePoint = PausePoint(&BETWEEN);
/// `coarse`'s fault, inside its read section with the core's member lent out (a panic armed
/// here is a panic of the fault handler: `designs/coarse.rs`, `with_member`).
pub(crate) static COARSE_FAULT_IN_SECTION: PausePoint = PausePoint(&COARSE);

/// A shooter (`Shootdown::shootdown_round`) that found a target core inside an access window,
/// just before it starts waiting for that window to end: a test learns there, without timing,
/// that a call is blocked on the core it holds in a window.
pub(crate) static SHOOTER_WAITS: PausePoint = PausePoint(&SHOOTER);
/// An editor's `VmaLock::write_lock_detach` that found per-region readers, just before it
/// starts waiting them out: a test learns there, without timing, that the edit is blocked.
pub(crate) static VMA_WRITER_WAITS: PausePoint = PausePoint(&VMA_WRITER);

impl PausePoint {
    /// Arms `pause` to run the next time this thread reaches the point.
    pub(crate) fn arm(&self, pause: impl FnOnce() + 'static) {
        self.0.with(|c| *c.borrow_mut() = Some(Box::new(pause)));
    }

    /// Runs the armed closure, if any (disarming it).
    pub(crate) fn reached(&self) {
        if let Some(pause) = self.0.with(|c| c.borrow_mut().take()) {
            pause();
        }
    }
}
