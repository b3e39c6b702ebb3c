//! One range operation on the raw tree: lock the dynamic interval, make the new records,
//! publish, release, reclaim.
//!
//! # The dynamic interval
//! RadixVM locks exactly the pages an operation changes. Here an operation on `range` also
//! changes the intervals that overlap it and reach past it (their remainders get new records
//! with the interval's new bounds, `node.rs`), so it locks `W`: `range` widened to the whole
//! intervals it overlaps (SOSP'25 §3.1 calls it the *dynamic interval*; the skiplist locks the
//! same nodes). `W` is found optimistically: read lock-free the records at `range`'s first and
//! last page, lock `W` left to right, then read them again under the lock (they are stable now:
//! an interval changes only under the locks of all its pages). If `W` moved, release and lock the
//! new `W` (never lock to the left of a held slot: that could deadlock).
//!
//! Every operation holds its slots only inside [`Op`]: dropping an `Op` (normal end, an error,
//! or a panic in a value's `Clone`) releases every slot it still holds unchanged, gives back
//! its traversal references (`reclaim.rs`: a node left empty is then freed by Refcache), and
//! hands its never-published records and everything it unlinked to its slot's retire list
//! (`retire.rs`), which frees them after a grace period.

use super::node::{untag, Record};
use super::reclaim::{Counter, Garbage, Pins};
use super::retire::RetireList;
use super::tree::{Held, RawRadix};
use crate::contract::{MapError, PAGE_SIZE};
use crate::fault::{try_reserve, AllocBudget};
use aspace_rcu::Domain;

/// Buffers an operation takes from its reader slot and gives back cleared, so that a steady
/// stream of operations allocates nothing but its records and descriptor.
pub(crate) struct Scratch<V> {
    held: Vec<Held>,
    todo: Vec<Held>,
    pins: Pins,
    records: Vec<*mut Record<V>>,
    old: Vec<*const Record<V>>,
    cuts: Vec<u64>,
    garbage: Garbage<V>,
}

impl<V> Default for Scratch<V> {
    fn default() -> Self {
        Self {
            held: Vec::new(),
            todo: Vec::new(),
            pins: Pins::default(),
            records: Vec::new(),
            old: Vec::new(),
            cuts: Vec::new(),
            garbage: Garbage::default(),
        }
    }
}

// SAFETY: empty between operations (only capacity is kept); during one it is the operation's.
unsafe impl<V: Send> Send for Scratch<V> {}

/// One operation in progress (see the module doc).
pub(crate) struct Op<'t, V: Send + 'static> {
    raw: &'t RawRadix<V>,
    domain: &'t Domain,
    budget: Option<&'t AllocBudget>,
    /// The map's leave mark, called on every record the publication takes out.
    mark: Option<fn(&V)>,
    counts: Counter<'t>,
    /// Where the garbage goes when the operation ends (the slot's batch, `retire.rs`).
    retire: &'t mut RetireList<V>,
    /// Where the buffers go back to.
    scratch: &'t mut Scratch<V>,
    /// Slots held, sorted, contiguous.
    pub(crate) held: Vec<Held>,
    /// Traversal references on the nodes of the held slots (and the paths to them).
    pub(crate) pins: Pins,
    /// `refine`'s work list.
    todo: Vec<Held>,
    /// Records made, in address order; not published until `published` (freed through the
    /// retire list if the operation stops before).
    records: Vec<*mut Record<V>>,
    published: bool,
    /// The old records of the held range (`replace`).
    old: Vec<*const Record<V>>,
    /// The bounds every held slot must not straddle (`replace`).
    cuts: Vec<u64>,
    pub(crate) garbage: Garbage<V>,
}

/// What an operation published, for the map's counters and hints.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Published {
    /// Intervals added.
    pub(crate) added: usize,
    /// Intervals removed (replaced or trimmed).
    pub(crate) removed: usize,
    /// Whether some page became free.
    pub(crate) freed: bool,
}

impl<'t, V: Send + 'static> Op<'t, V> {
    pub(crate) fn new(
        raw: &'t RawRadix<V>,
        domain: &'t Domain,
        budget: Option<&'t AllocBudget>,
        mark: Option<fn(&V)>,
        counts: Counter<'t>,
        retire: &'t mut RetireList<V>,
        scratch: &'t mut Scratch<V>,
    ) -> Self {
        Self {
            raw,
            domain,
            budget,
            mark,
            counts,
            retire,
            held: std::mem::take(&mut scratch.held),
            todo: std::mem::take(&mut scratch.todo),
            pins: std::mem::take(&mut scratch.pins),
            records: std::mem::take(&mut scratch.records),
            published: false,
            old: std::mem::take(&mut scratch.old),
            cuts: std::mem::take(&mut scratch.cuts),
            garbage: std::mem::take(&mut scratch.garbage),
            scratch,
        }
    }

    /// Releases every held slot unchanged.
    pub(crate) fn release_all(&mut self) {
        for h in self.held.drain(..) {
            // SAFETY: held by this operation.
            unsafe { h.release() };
        }
    }

    /// The record of the held slot covering `page` (0 if free).
    fn word_at(&self, page: u64) -> usize {
        let i = self.held.partition_point(|h| h.end() <= page);
        untag(self.held[i].word)
    }

    /// Locks the dynamic interval of `[lo, hi)` pages (see the module doc) and returns it.
    /// On error the caller drops the `Op`, which releases what is held.
    ///
    /// # Safety
    /// Inside a read section; this operation holds nothing yet.
    pub(crate) unsafe fn lock_dynamic(&mut self, lo: u64, hi: u64) -> Result<(u64, u64), MapError> {
        debug_assert!(self.held.is_empty());
        let bounds = |r: Option<&Record<V>>| r.map(|r| r.pages());
        // The first guess, lock-free.
        // SAFETY: inside a read section.
        let (mut wl, mut wh) = unsafe {
            (
                bounds(self.raw.find(lo)).map_or(lo, |b| b.0.min(lo)),
                bounds(self.raw.find(hi - 1)).map_or(hi, |b| b.1.max(hi)),
            )
        };
        loop {
            // SAFETY: forwarded; nothing held.
            unsafe {
                self.raw.lock_range(
                    wl,
                    wh,
                    &mut self.held,
                    &self.counts,
                    &mut self.pins,
                    self.budget,
                )
            }?;
            // SAFETY: the slots are ours.
            unsafe {
                self.raw.refine(
                    &mut self.held,
                    &mut self.todo,
                    wl,
                    wh,
                    &[wl, wh],
                    self.budget,
                    &self.counts,
                    &mut self.pins,
                )
            }?;
            let rec = |w: usize| {
                // SAFETY: a held slot's record is stable and alive.
                (w != 0).then(|| unsafe { (*(w as *const Record<V>)).pages() })
            };
            let nl = rec(self.word_at(lo)).map_or(lo, |b| b.0.min(lo));
            let nh = rec(self.word_at(hi - 1)).map_or(hi, |b| b.1.max(hi));
            if (nl, nh) == (wl, wh) {
                return Ok((wl, wh));
            }
            self.release_all();
            (wl, wh) = (nl, nh);
        }
    }

    /// Replaces the contents of the held dynamic interval `w` of `[lo, hi)` pages: the parts of
    /// `w` outside `[lo, hi)` keep their intervals' values (cloned into remainder records; each
    /// such part is one interval's remainder, or free), and
    /// `[lo, hi)` gets exactly `new` (sorted, disjoint, inside it; page bounds). Publishes and
    /// releases everything held. Call it once per operation.
    ///
    /// # Safety
    /// Inside a read section; `w` is held by this operation (from [`lock_dynamic`] or a held
    /// lock).
    pub(crate) unsafe fn replace(
        &mut self,
        w: (u64, u64),
        lo: u64,
        hi: u64,
        new: impl IntoIterator<Item = (u64, u64, V)>,
    ) -> Result<Published, MapError>
    where
        V: Clone,
    {
        debug_assert!(self.records.is_empty() && self.old.is_empty());
        let (wl, wh) = w;
        // The old records, in order (each is a contiguous run of held slots).
        for h in &self.held {
            let r = untag(h.word) as *const Record<V>;
            if !r.is_null() && self.old.last() != Some(&r) {
                try_reserve(&mut self.old, 1, self.budget)?;
                self.old.push(r);
            }
        }
        // The new records: the remainders (clones: the caller's code, may panic; we hold
        // slots, which `Drop` releases) and the new intervals, in address order.
        // (A part of `w` outside `[lo, hi)` may also be free: an alloc's pads.)
        let right = if wh > hi && self.word_at(hi) != 0 {
            let w = self.word_at(hi);
            // SAFETY: a held record, alive and stable.
            Some((hi, wh, unsafe { (*(w as *const Record<V>)).value.clone() }))
        } else {
            None
        };
        let left = if wl < lo && self.word_at(wl) != 0 {
            let w = self.word_at(wl);
            // SAFETY: as above.
            Some((wl, lo, unsafe { (*(w as *const Record<V>)).value.clone() }))
        } else {
            None
        };
        self.cuts.clear();
        try_reserve(&mut self.cuts, 2, self.budget)?;
        self.cuts.extend([wl, wh]);
        for (s, e, v) in left.into_iter().chain(new).chain(right) {
            try_reserve(&mut self.cuts, 2, self.budget)?;
            try_reserve(&mut self.records, 1, self.budget)?;
            self.cuts.extend([s, e]);
            let r = Record::try_alloc(s * PAGE_SIZE, e * PAGE_SIZE, v, self.budget)?;
            self.records.push(r);
        }
        // SAFETY: the slots are ours.
        unsafe {
            self.raw.refine(
                &mut self.held,
                &mut self.todo,
                wl,
                wh,
                &self.cuts,
                self.budget,
                &self.counts,
                &mut self.pins,
            )
        }?;
        let records = &self.records;
        let new_word = |h: &Held| {
            let i = records.partition_point(|&r| {
                // SAFETY: our unpublished records are alive.
                (unsafe { (*r).end }) <= h.start * PAGE_SIZE
            });
            match records.get(i) {
                // SAFETY: as above.
                Some(&r) if unsafe { (*r).start } <= h.start * PAGE_SIZE => r as usize,
                _ => 0,
            }
        };
        // SAFETY: the slots are ours; the records are initialised and unpublished.
        let desc = unsafe {
            // A `*mut` list read as `*const` (same layout).
            let new: &[*const Record<V>] =
                std::slice::from_raw_parts(records.as_ptr().cast(), records.len());
            self.raw.publish(
                &self.held,
                &new_word,
                &self.old,
                new,
                self.budget,
                self.mark,
                &self.counts,
                &self.pins,
            )
        }?;
        // Published: the held slots are released with their new words.
        let freed = self
            .held
            .drain(..)
            .any(|h| new_word(&h) == 0 && untag(h.word) != 0);
        let published = Published {
            added: records.len(),
            removed: self.old.len(),
            freed,
        };
        self.published = true;
        self.garbage
            .records
            .extend(self.old.drain(..).map(|r| r as *mut Record<V>));
        self.garbage.descs.extend(desc);
        Ok(published)
    }

    /// Whether every held slot is free.
    pub(crate) fn all_free(&self) -> bool {
        self.held.iter().all(|h| untag(h.word) == 0)
    }

    /// Locks `[lo, hi)` pages exactly (an alloc's claim: expected free; no widening).
    ///
    /// # Safety
    /// Inside a read section; nothing held.
    pub(crate) unsafe fn lock_exact(&mut self, lo: u64, hi: u64) -> Result<(), MapError> {
        // SAFETY: forwarded.
        unsafe {
            self.raw.lock_range(
                lo,
                hi,
                &mut self.held,
                &self.counts,
                &mut self.pins,
                self.budget,
            )
        }?;
        // SAFETY: the slots are ours.
        unsafe {
            self.raw.refine(
                &mut self.held,
                &mut self.todo,
                lo,
                hi,
                &[lo, hi],
                self.budget,
                &self.counts,
                &mut self.pins,
            )
        }
    }

    /// Takes the held slots and their pins out (a held lock keeps them across read sections).
    pub(crate) fn take_held(&mut self) -> (Vec<Held>, Pins) {
        (
            std::mem::take(&mut self.held),
            std::mem::take(&mut self.pins),
        )
    }
}

impl<V: Send + 'static> Drop for Op<'_, V> {
    fn drop(&mut self) {
        self.release_all();
        self.counts.unpin_all(&mut self.pins);
        if self.published {
            self.records.clear();
        } else {
            // Never published (an error or a panic before the commit): freed after a grace
            // period like the rest, their values dropped by the slot's `collect`.
            self.garbage.records.append(&mut self.records);
        }
        self.old.clear();
        self.retire.retire(&mut self.garbage, self.domain);
        // The buffers go back, empty, with their capacity.
        let s = &mut *self.scratch;
        s.held = std::mem::take(&mut self.held);
        s.todo = std::mem::take(&mut self.todo);
        s.pins = std::mem::take(&mut self.pins);
        s.records = std::mem::take(&mut self.records);
        s.old = std::mem::take(&mut self.old);
        s.cuts = std::mem::take(&mut self.cuts);
        s.garbage = std::mem::take(&mut self.garbage);
    }
}
