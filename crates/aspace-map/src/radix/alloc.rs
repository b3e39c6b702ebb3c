//! `alloc`: the first-fit gap search over the radix tree, and the per-core hints it starts from.
//!
//! # How a gap is found
//! The search walks the value slots of `within` in address order, lock-free (`RawRadix::walk`):
//! a free slot extends the current run of free pages (a folded free slot adds its whole span at
//! once: one word for up to 2^45 pages), a slot holding a record ends the run and the walk jumps
//! to the record's end (a record's slots are contiguous: one interval costs one slot read, not
//! one per page). The first run of `len` bytes is claimed: its pages are locked left to right
//! like any range (`update.rs`, `Op::lock_exact`), checked free under the lock, and published
//! with the new record; if a concurrent map took a page of it meanwhile, the locks are released
//! and the search goes on from there. Sequentially this is exact first fit; under concurrency
//! the claimed range was free at the claim and was the first fit of the state the walk saw (a
//! gap freed behind the walk is not seen), as for the skiplist.
//!
//! # Per-core hints (and why no 4 GiB jumps)
//! RadixVM's kernel did not search for gaps: each core carved fresh address space ahead of its
//! last allocation, so freed space was never reused and a long-running allocator walked off the
//! end of the address space in 4 GiB steps. Here each core (the updater's pooled reader slot,
//! `skiplist/readers.rs`) keeps a [`Hint`]: the `within` it last allocated in, and a *lower bound
//! of the first free page* of that range (every page of `[within.start, hint)` is mapped). A
//! search starts at the hint when its `within` is the hint's, so a core that allocates
//! contiguously does not re-walk what it allocated; and every free moves the hints below it back
//! (a *retreat*), so freed space is found again by the next search, of any core: first fit stays
//! exact.
//!
//! The protocol is the skiplist's arena hint (`skiplist/hint.rs`: an address packed with a
//! 12-bit version; a search advances the hint by a CAS on the word it read, a free retreats it
//! with a version bump, so an advance that raced a free fails; a search from the hint that finds
//! nothing is repeated from `within.start`, which catches a wrapped version), with one more
//! step, because a core's hint is not tied to one fixed range: a retreat must know the hint's
//! `within` to move it only when the free is inside it (a free in thread 0's arena must not send
//! thread 1 back to its arena's start). The range is two more words, written by the core before
//! its first search of a new range (an *install*: `lo`/`hi` stored, then the word set to `lo`
//! with a version bump, then a `SeqCst` fence); a free runs a `SeqCst` fence after its commit
//! and before it reads the hints. The fences make the store-buffering race impossible: either
//! the free's retreat sees the install (and bumps the version, failing the search's advance), or
//! the search sees the free. A free reads the ranges of active cores only (a bitmap written once
//! per core): an unmap costs one fence and a load of each allocating core's range, and writes
//! only the hints whose range contains the freed pages. The ranges lie packed on lines of their
//! own, apart from the hint words every search writes, so a free shares no line another core
//! writes in the steady state (each core allocating in its own arena): the conflict audit of
//! issue 20 counted 62 such lines per operation at 64 cores when each retreat read every hint
//! word's line (loom models: `radix/loom_hints.rs`).
//!
//! # Padded searches
//! `alloc_padded` claims a run of `len + 2 * pad` free pages and publishes its middle, leaving
//! the pads free; with the hint above, every claim would leave its left pad below the hint's
//! bound (a free page), so the hint would never move and each search would walk every earlier
//! claim. Padded searches therefore use hints of their own (a second [`Hints`], same protocol,
//! retreated by the same frees) with a weaker bound: *below the hint, no run of free pages is
//! [`MIN_PADDED_RUN`] pages long or more* (the shortest run any padded claim needs: a page and
//! a one-page pad on each side). A padded search advances it to the first such run it saw, or
//! to its claim's left pad if that is one (pads of three pages or more), or past its claim. A
//! free of `[s, e)` retreats the padded hints to `s - (MIN_PADDED_RUN - 1)` pages: the freed
//! pages may join a short free run just below `s`, which then starts no lower than that.
//! Runs that straddle the hint are shorter than that, so a search that starts at the hint
//! misses no fit; sequentially padded first fit stays exact, and a core allocating regions
//! padded by one page does not walk them again. Unpadded allocs never read these hints, so the
//! pads a padded search skipped cost them nothing.
//!
//! A core's hint is written only by the operation holding that core's pooled reader slot, so
//! its range is one core's at a time. The exception is the pool's overflow (more than 256
//! threads in operations at once): a temporary reader uses its home slot's hint beside the
//! slot's holder, and one may then search from a hint installed for the other's range. That
//! costs exactness only (the search may start above a free gap of its range); the claim is
//! still checked free under its locks.

use super::tree::RawRadix;
use crate::contract::{Interval, PAGE_SIZE};
use crate::sync::{fence, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// The version bits of a hint word (the page offset bits of its address).
pub(crate) const VERSION_MASK: u64 = PAGE_SIZE - 1;

/// The range a core's hint is for (addresses): written only when the core installs a new range,
/// read by every free. Ranges are packed (four to a cache line) away from the hint words, which
/// every search of their core writes, so a free reads only lines that are written when a core
/// moves to another range, and touches the word of a hint only when its range contains the free.
#[derive(Default)]
struct HintRange {
    lo: AtomicU64,
    hi: AtomicU64,
}

/// Every core's hint and which are in use.
pub(crate) struct Hints {
    /// Core `i`'s hint word, `address | version`: every page of `[lo, address)` is mapped.
    words: Box<[CachePadded<AtomicU64>]>,
    /// Core `i`'s range.
    ranges: Box<[HintRange]>,
    /// Bit `i` of word `i / 64`: core `i` has installed a range.
    active: Box<[AtomicU64]>,
    /// Under loom, the step the hint models break on purpose (`radix/loom_hints.rs`).
    #[cfg(loom)]
    pub(crate) mutant: HintMutant,
}

/// A deliberately broken step of the hint protocol, for the loom models' mutation checks.
#[cfg(loom)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) enum HintMutant {
    /// The protocol as written.
    #[default]
    None,
    /// A retreat reads the ranges without its `SeqCst` fence first.
    NoRetreatFence,
    /// An install publishes its range after its fence (so a free may miss it while the search
    /// misses the free).
    RangeAfterFence,
}

impl Hints {
    pub(crate) fn new(cores: usize) -> Self {
        Self {
            words: (0..cores)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            ranges: (0..cores).map(|_| HintRange::default()).collect(),
            active: (0..cores.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            #[cfg(loom)]
            mutant: HintMutant::None,
        }
    }

    /// The hint word core `core` starts a search of `within` from (installing `within` first
    /// if it is not the hint's range): `(word, address)`.
    pub(crate) fn read(&self, core: usize, within: Interval) -> (u64, u64) {
        let (word, range) = (&self.words[core], &self.ranges[core]);
        // Relaxed: only this core writes its range (it holds the pooled slot).
        if range.lo.load(Ordering::Relaxed) != within.start
            || range.hi.load(Ordering::Relaxed) != within.end
        {
            let (i, bit) = (core / 64, 1u64 << (core % 64));
            if self.active[i].load(Ordering::Relaxed) & bit == 0 {
                // SeqCst with the fence below: a free that does not see the bit sees nothing of
                // this core's hint, and its commit is then visible to our search.
                self.active[i].fetch_or(bit, Ordering::SeqCst);
            }
            #[cfg(loom)]
            let late = self.mutant == HintMutant::RangeAfterFence;
            #[cfg(not(loom))]
            let late = false;
            if !late {
                // Relaxed: the fence below orders these stores before our search (see the
                // module doc); a retreat that reads them reads them after its own fence.
                range.lo.store(within.start, Ordering::Relaxed);
                range.hi.store(within.end, Ordering::Relaxed);
            }
            // The word starts over at the range's start, with a version bump: an advance that
            // read the word before the install fails.
            let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                Some(within.start | (w.wrapping_add(1) & VERSION_MASK))
            });
            // See the module doc: either a free's retreat sees this install, or our search sees
            // the free.
            fence(Ordering::SeqCst);
            if late {
                range.lo.store(within.start, Ordering::Relaxed);
                range.hi.store(within.end, Ordering::Relaxed);
            }
        }
        // Acquire: pairs with a retreat's Release: a search from a retreated hint sees the free.
        let w = word.load(Ordering::Acquire);
        (w, w & !VERSION_MASK)
    }

    /// Moves core `core`'s hint forward to `to` if it is still `seen`.
    pub(crate) fn advance(&self, core: usize, seen: u64, to: u64) {
        let new = to | (seen & VERSION_MASK);
        // Relaxed: the version CAS is the argument (a free since `seen` bumped it).
        let _ = self.words[core].compare_exchange(seen, new, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// After a free of `[s, e)` (addresses) was committed: moves back every hint whose range
    /// contains part of it, to the start of the freed part of the range, with a version bump.
    /// Reads the packed ranges of the active cores and writes only the hints it moves.
    pub(crate) fn retreat(&self, s: u64, e: u64) {
        #[cfg(loom)]
        let fenced = self.mutant != HintMutant::NoRetreatFence;
        #[cfg(not(loom))]
        let fenced = true;
        if fenced {
            // See the module doc (pairs with the install's fence).
            fence(Ordering::SeqCst);
        }
        for (i, bits) in self.active.iter().enumerate() {
            let mut bits = bits.load(Ordering::Relaxed);
            while bits != 0 {
                let core = i * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let range = &self.ranges[core];
                // Relaxed: after the fence above, a range that the install stored before its
                // own fence is read, or the install's search sees the free (module doc). A range
                // read half old, half new is one of the two: an overlap seen in error only
                // moves the hint back (never above what it was, never below the range: searches
                // clamp it), a miss is the second case.
                let (lo, hi) = (
                    range.lo.load(Ordering::Relaxed),
                    range.hi.load(Ordering::Relaxed),
                );
                if e <= lo || hi <= s {
                    continue;
                }
                let word = &self.words[core];
                let mut w = word.load(Ordering::Relaxed);
                loop {
                    let to = (w & !VERSION_MASK).min(s.max(lo));
                    let new = to | (w.wrapping_add(1) & VERSION_MASK);
                    // Release: publishes the free (committed before this) to searches that
                    // read the hint.
                    match word.compare_exchange(w, new, Ordering::Release, Ordering::Relaxed) {
                        Ok(_) => break,
                        Err(cur) => w = cur,
                    }
                }
            }
        }
    }

    /// Core `core`'s hint address (for the models).
    #[cfg(all(test, loom))]
    pub(crate) fn address(&self, core: usize) -> u64 {
        self.words[core].load(Ordering::SeqCst) & !VERSION_MASK
    }
}

/// The shortest run of free pages a padded claim needs (one page and a one-page pad on each
/// side): the padded hints' threshold (see the module doc).
pub(crate) const MIN_PADDED_RUN: u64 = 3;

/// What one walk of the gap search found.
pub(crate) struct Found {
    /// First page of the first fit, if any.
    pub(crate) fit: Option<u64>,
    /// First free page seen (a lower bound of the first free page from the walk's start).
    pub(crate) first_free: Option<u64>,
    /// Start of the first run of at least [`MIN_PADDED_RUN`] free pages seen (clipped to the
    /// walk's start).
    pub(crate) first_long: Option<u64>,
}

/// Walks `[from, hi)` pages for the first run of `len` free pages (see the module doc).
///
/// # Safety
/// Inside a read section of the map's domain.
pub(crate) unsafe fn first_fit<V>(raw: &RawRadix<V>, from: u64, hi: u64, len: u64) -> Found {
    let mut run: Option<u64> = None;
    let mut found = Found {
        fit: None,
        first_free: None,
        first_long: None,
    };
    // SAFETY: forwarded.
    unsafe {
        raw.walk(from, hi, &mut |s, e, rec| match rec {
            None => {
                let start = *run.get_or_insert(s.max(from));
                found.first_free.get_or_insert(start);
                if e.min(hi) - start >= MIN_PADDED_RUN {
                    found.first_long.get_or_insert(start);
                }
                if e.min(hi) - start >= len {
                    found.fit = Some(start);
                    return u64::MAX;
                }
                e
            }
            Some(r) => {
                run = None;
                r.pages().1
            }
        })
    };
    found
}
