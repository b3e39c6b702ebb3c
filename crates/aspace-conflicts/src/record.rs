//! The per-thread recorder: which cache lines the current operation read and wrote, and where.
//!
//! A thread *records* between [`begin_op`] and [`end_op`]: every access reported by the shim
//! ([`access`]) lands in a thread-local [`OpAccesses`], keyed by cache line (`addr & !63`), with
//! whether any access wrote it and the first access site (and first write site). Accesses made
//! inside an [`rcu_scope`] (grace-period waits, the reclaimer, the reader registry) go to a
//! separate bucket, [`OpAccesses::rcu`], so RCU machinery is reported apart from the operation's
//! own sharing.
//!
//! Threads that are not inside an operation while [`set_background`] is on (the RCU reclaimer
//! thread, mostly) append to one global *background* log stamped with the current round
//! ([`set_round`]); the analysis counts those accesses as RCU machinery.
//!
//! The global flags are `Relaxed`: the runner changes them between barriers, which order them
//! for the operating threads; a background thread may stamp an access with the round before or
//! after the one it happened in (it is not synchronised with the barriers), which the analysis's
//! same-or-next-round window mostly absorbs: background figures are approximate by one round.
//!
//! Invariants: the fast path when nothing records is one thread-local `bool` load and one relaxed
//! load of a global flag, no allocation; the recorder itself uses only std types, never the
//! shim, so it cannot recurse.
//!
//! Not for: nested operations (a `begin_op` inside an operation starts afresh).

use crate::LINE;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Where an access was made (the caller of the atomic operation or lock method).
pub type Site = &'static Location<'static>;

/// One line's accesses within one operation.
#[derive(Clone, Copy, Debug)]
pub struct LineAccess {
    /// Whether any access to the line wrote it (store, RMW, CAS, lock acquire).
    pub write: bool,
    /// The first access's site.
    pub site: Site,
    /// The first write's site, if any.
    pub write_site: Option<Site>,
}

impl LineAccess {
    /// The site that best names the line: the first write's, else the first access's.
    pub fn label(&self) -> Site {
        self.write_site.unwrap_or(self.site)
    }
}

/// The lines one operation accessed.
#[derive(Clone, Debug, Default)]
pub struct OpAccesses {
    /// Lines accessed by the operation itself, keyed by line address.
    pub lines: HashMap<usize, LineAccess>,
    /// Lines accessed inside an [`rcu_scope`] during the operation.
    pub rcu: HashMap<usize, LineAccess>,
}

impl OpAccesses {
    fn clear(&mut self) {
        self.lines.clear();
        self.rcu.clear();
    }
}

/// One access made outside any operation while background recording was on.
#[derive(Clone, Copy, Debug)]
pub struct BgAccess {
    /// The round current when it was made.
    pub round: u64,
    /// A per-thread id (distinct from every core number the runner uses).
    pub thread: u64,
    /// The cache line.
    pub line: usize,
    /// Whether it wrote.
    pub write: bool,
    /// Where.
    pub site: Site,
}

thread_local! {
    static RECORDING: Cell<bool> = const { Cell::new(false) };
    static RCU_DEPTH: Cell<u32> = const { Cell::new(0) };
    static LOG: RefCell<OpAccesses> = RefCell::new(OpAccesses::default());
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
}

static BACKGROUND: AtomicBool = AtomicBool::new(false);
static ROUND: AtomicU64 = AtomicU64::new(0);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
static BG_LOG: Mutex<Vec<BgAccess>> = Mutex::new(Vec::new());

fn insert(map: &mut HashMap<usize, LineAccess>, line: usize, write: bool, site: Site) {
    let e = map.entry(line).or_insert(LineAccess {
        write: false,
        site,
        write_site: None,
    });
    if write {
        e.write = true;
        e.write_site.get_or_insert(site);
    }
}

/// Records an access of the word at `addr` by the current thread (the shim calls this).
#[inline]
pub fn access(addr: usize, write: bool, site: Site) {
    if RECORDING.with(Cell::get) {
        let line = addr & !(LINE - 1);
        let rcu = RCU_DEPTH.with(Cell::get) > 0;
        LOG.with(|l| {
            let mut l = l.borrow_mut();
            let map = if rcu { &mut l.rcu } else { &mut l.lines };
            insert(map, line, write, site);
        });
    } else if BACKGROUND.load(Ordering::Relaxed) {
        background(addr, write, site);
    }
}

#[cold]
fn background(addr: usize, write: bool, site: Site) {
    let thread = THREAD_ID.with(|id| {
        if id.get() == 0 {
            id.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        }
        id.get()
    });
    let a = BgAccess {
        round: ROUND.load(Ordering::Relaxed),
        thread,
        line: addr & !(LINE - 1),
        write,
        site,
    };
    BG_LOG.lock().unwrap_or_else(|e| e.into_inner()).push(a);
}

/// Starts recording an operation on this thread (forgetting anything recorded before).
pub fn begin_op() {
    LOG.with(|l| l.borrow_mut().clear());
    RECORDING.with(|r| r.set(true));
}

/// Stops recording and returns what the operation accessed.
pub fn end_op() -> OpAccesses {
    RECORDING.with(|r| r.set(false));
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// Whether this thread is recording an operation.
pub fn is_recording() -> bool {
    RECORDING.with(Cell::get)
}

/// Marks the accesses of this thread as RCU machinery until the guard drops (nests).
#[must_use = "the scope ends when the guard drops"]
pub fn rcu_scope() -> RcuScope {
    RCU_DEPTH.with(|d| d.set(d.get() + 1));
    RcuScope { _private: () }
}

/// The guard of [`rcu_scope`].
#[derive(Debug)]
pub struct RcuScope {
    _private: (),
}

impl Drop for RcuScope {
    fn drop(&mut self) {
        RCU_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// Sets the round that background accesses are stamped with (the runner's leader, between
/// rounds).
pub fn set_round(round: u64) {
    ROUND.store(round, Ordering::Relaxed);
}

/// Turns background recording on (clearing the log) or off.
pub fn set_background(on: bool) {
    if on {
        BG_LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
    BACKGROUND.store(on, Ordering::Relaxed);
}

/// Takes the background log recorded so far.
pub fn take_background() -> Vec<BgAccess> {
    std::mem::take(&mut *BG_LOG.lock().unwrap_or_else(|e| e.into_inner()))
}
