//! Refcache: scalable, lazy reference counts with per-core delta caches, epochs, review queues,
//! dirty zeroes and weak references (RadixVM, EuroSys'13 §3.1, Fig. 1-2; §4).
//!
//! # The algorithm (paper §3.1, Fig. 2)
//! Every object has a *global* count (its [`ObjState::refcnt`], under the object's lock) and
//! every core a fixed-size, direct-mapped *delta cache* keyed by the object's address. `inc` and
//! `dec` ([`Core::get`], [`Core::put`]) change only the calling core's cached delta; a collision
//! evicts the entry's delta to its object's global count (`evict`). The *true* count is the
//! global count plus every cached delta; it is known only when it is zero for good:
//! - **Epochs.** Time is divided into epochs. During each epoch every core flushes (evicts)
//!   its whole cache once; the last core to flush for an epoch ends it. An epoch that has ended
//!   therefore contains, for every core, a moment when that core had no cached delta.
//! - **Review.** The first eviction that sets an object's global count to zero queues the object
//!   on the evicting core's *review queue*, tagged with an epoch `e`, and marks it *dying*. The
//!   core re-examines it once epoch `e + 1` has ended (the global epoch is `>= e + 2`). If the
//!   global count is still zero and no eviction touched it meanwhile, the true count is zero and
//!   the object is freed. If the count went to zero *again* while queued (an eviction set it to
//!   zero while the object was on a queue: a **dirty zero**, paper Fig. 1 epoch 4-6) the object
//!   is re-queued for two more epochs; if it is non-zero the object leaves the queue.
//! - **Weak references** ([`Weak`], paper "Weak references"): a pointer with a *dying* bit and a
//!   back-reference from the object. Queueing an object sets the bit; [`Core::tryget`] clears it
//!   (atomically with reading the pointer) and increments, *reviving* an object whose count is
//!   zero but which is not freed yet. Review frees only by a CAS from ⟨obj, dying⟩ to ⟨null⟩; if
//!   a `tryget` cleared the bit first, the CAS fails and the object is re-queued. Whoever clears
//!   the bit first wins; a `tryget` after the free reads null and fails.
//!
//! # The epoch barrier (paper §4) and idle cores
//! A global epoch `E`, a per-slot epoch (the last epoch the slot's cache was flushed for) and a
//! count of the *active* slots that have not flushed for `E` yet, all under one small lock taken
//! once per slot per epoch. A slot's cache is flushed under the slot's own lock, so *anyone* can
//! flush it: its owner ([`Core::flush`], or every [`RefcacheConfig::maintain_every`] operations
//! once [`RefcacheConfig::epoch_period`] has passed since its last flush, the paper's 10 ms), or
//! a *helper*. Idle and detached cores cannot stall epochs:
//! - a slot with no [`Core`] handle is not active and is not waited for; a handle that drops
//!   flushes its cache, hands its review queue to the shared orphan queue and leaves;
//! - a slot that becomes active counts as flushed for the current epoch (its cache is empty);
//! - a core whose epoch has not advanced for [`RefcacheConfig::help_after`] flushes (and
//!   reviews) every lagging active slot whose lock is free, on that slot's behalf, and
//!   [`Core::synchronize`] does so waiting for the locks, driving a whole epoch.
//!
//! # Why the frees are safe (the correctness argument the loom models follow)
//! Write `r` for the object-locked step that queues an object (or re-queues it) and `v` for the
//! review that frees it.
//! 1. **Tags.** An object queued under slot `s`'s lock is tagged `local_s + 1`, where `local_s`
//!    is the last epoch `s` counted a flush for. Epoch `local_s + 1` cannot end without `s`
//!    counting a flush (or leaving), and that next step is sequenced after `r` under `s`'s lock,
//!    so `r` happens-before the start of epoch `tag + 1`. (The paper tags with the global epoch,
//!    which relies on x86's ordering; a global epoch read after `r` may be stale in Rust's
//!    memory model.) Queued without a slot (a [`Ref`] dropped without a core) it is tagged with
//!    `E` read under the epoch lock, after `r`.
//! 2. **Flushes between.** A flush counted for epoch `tag + 1` read `E = tag + 1` (`Acquire`,
//!    pairing with the `Release` store of the advance), so it happens after `r`; `v` read
//!    `E >= tag + 2`, so it happens after every such flush. Every core's cache was empty at some
//!    point between `r` and `v`, and every eviction in between locked the object after `r`.
//! 3. **Zero for a whole epoch.** An eviction after `r` either leaves the count non-zero (review
//!    sees it) or sets it to zero again (dirty: re-queued). So a clean zero at `v` means no
//!    non-zero delta of the object was flushed between `r` and `v`; with every cache flushed in
//!    between and a true count that cannot rise from zero (only holders of a reference
//!    increment), the true count is zero (paper §3.1).
//! 4. **Revival.** A `tryget` holds its core's slot lock from its read of the weak word to its
//!    increment. If its read came after the dying bit was set at `r`, it cleared the bit (the
//!    free CAS fails) or read null (the object was freed: it fails). If it read before, then its
//!    slot's flush for epoch `tag + 1`, which happens after `r`, cannot also precede the
//!    `tryget` (the read would then see `r`'s bit), so by the slot lock it follows the
//!    increment: the increment is flushed between `r` and `v` and the object is not freed (3).
//!
//! The object's lock protects its count, its queue flags and its weak back-reference; the slot
//! lock protects the slot's cache, queue and epoch. Lock order: slot, then object, epoch or
//! orphan-queue lock (each alone); no path holds two slots or two objects.
//!
//! Queues without a slot (a detached slot's queue, zeroes reached by a `Ref` dropped without a
//! core) go to a shared *orphan queue*; every counted flush of any slot adopts its items into
//! that slot's queue (in tag order), so they are reviewed by flushes like every other item.
//!
//! # Using it
//! - **Objects** are allocated by [`Core::alloc`] (global count 1: the returned [`Ref`]). A
//!   [`Ref`] is one counted reference: [`Core::get`] makes another through the cache (`inc`),
//!   [`Core::put`] gives one back (`dec`). Dropping a `Ref` without a core (or cloning it) takes
//!   the slow path: the object's global count, under its lock, with no cache. When the true
//!   count is zero for a whole epoch the object's value is dropped, exactly once, on whichever
//!   thread reviews it, with no Refcache lock held (the *free callback* is `T`'s `Drop`).
//! - **Radix-tree nodes** (`radix`, RadixVM §3.2): a node's count is its number of used slots
//!   plus the transient references of traversals. Filling a slot takes a reference and keeps it
//!   as a count ([`Ref::into_raw`]); emptying one gives it back ([`Ref::from_raw`] then
//!   [`Core::put`]). A parent links to a child through the child's one [`Weak`]
//!   ([`Ref::downgrade`]); traversals take each child with [`Core::tryget`], which revives a node
//!   that emptied but is not freed yet and fails (`None`) for a freed one, after which the
//!   slot can be cleared (or refilled with a new node). A node freed drops its value, and with
//!   it whatever it holds (a `Ref` to its parent, say).
//! - **Frame references** (the `radix` address-space design): one object per shared frame,
//!   whose `Drop` returns the frame to its pool; each mapping's metadata holds a `Ref`, taken
//!   with [`Core::get`] at fault or fork time and released with [`Core::put`] at unmap.
//!
//! # Cores and teardown
//! A [`Core`] is a handle on one per-core slot (`index % cores`; handles of one slot share it
//! under its lock), used by one thread at a time. Handles check what they are given: a `Ref` or
//! `Weak` of another `Refcache` is refused with [`ForeignHandle`]. The domain (caches, queues, epochs) lives while any
//! `Refcache` handle, `Core` or object lives; when the last handle and core are gone, every
//! queued object whose count is zero is freed at once (no core remains to hold a cached delta,
//! so the global count is the true count), and later objects are freed as their last `Ref`
//! drops.
//!
//! A value's `Drop` that panics propagates out of the call that ran the review (`get`, `put`,
//! `flush`...); the other frees of that batch still run, and Refcache's state stays consistent
//! (the object was taken off every queue before its value was dropped).
//!
//! Not for: counts that must reach zero promptly (frees lag by three to eight epochs), objects
//! shared by several `Refcache`s, or several weak references to one object (there is one
//! back-reference; a second [`Ref::downgrade`] returns `None` while the first lives).

use crate::spin_mutex::SpinMutex;
use crate::sync::{spin, AtomicI64, AtomicU64, AtomicUsize, Ordering::*};
use crossbeam_utils::{Backoff, CachePadded};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Refcache's tuning knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefcacheConfig {
    /// Entries of each per-core delta cache (rounded up to a power of two, at least 1). More
    /// entries mean fewer collision evictions (shared cache lines) and more memory per core.
    pub cache_entries: usize,
    /// How long a core waits after its last flush before it flushes for a new epoch (the
    /// paper's 10 ms). Zero flushes at every maintenance check.
    pub epoch_period: Duration,
    /// A core runs its maintenance check (flush if due, review, help) every this many
    /// operations (at least 1).
    pub maintain_every: u32,
    /// How long an epoch may stay unfinished before a core that has flushed for it flushes the
    /// lagging slots on their behalf. Zero helps at every maintenance check.
    pub help_after: Duration,
}

impl Default for RefcacheConfig {
    fn default() -> Self {
        Self {
            cache_entries: 1024,
            epoch_period: Duration::from_millis(10),
            maintain_every: 64,
            help_after: Duration::from_millis(20),
        }
    }
}

impl RefcacheConfig {
    /// The configuration of tests and models: tiny caches (collisions on every other object),
    /// epochs as fast as the cores maintain, help at once.
    pub fn eager(cache_entries: usize) -> Self {
        Self {
            cache_entries,
            epoch_period: Duration::ZERO,
            maintain_every: 1,
            help_after: Duration::ZERO,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------------------------

/// The weak word's dying bit (paper: "a pointer marked with a dying bit").
const DYING: usize = 1;
/// The [`Weak`] handle has dropped; the object side owns (and frees) the cell.
const WEAK_GONE: usize = 2;
/// The object was freed (pointer null); the `Weak` side owns (and frees) the cell.
const OBJ_GONE: usize = 4;
const TAGS: usize = DYING | WEAK_GONE | OBJ_GONE;

/// A weak reference's word, on its own allocation so that it outlives the object: the object's
/// header pointer with [`DYING`], or null with [`OBJ_GONE`] once freed; [`WEAK_GONE`] when its
/// `Weak` dropped. The cell is freed by whichever of the object and the `Weak` lets go last.
struct WeakCell {
    word: AtomicUsize,
}

/// An object's state, under its lock (Fig. 2's fields).
#[derive(Debug)]
pub(crate) struct ObjState {
    /// The global count: the true count minus every cached delta.
    refcnt: i64,
    /// On some review queue (Fig. 2's "obj is on a review queue").
    queued: bool,
    /// Set to zero again while queued (a dirty zero).
    dirty: bool,
    /// The back-reference to the object's one weak reference.
    weak: Option<NonNull<WeakCell>>,
}

/// What every Refcache object starts with; `RcBox<T>` is `#[repr(C)]` with this first, so a
/// header pointer is the object's address.
pub(crate) struct Header {
    state: SpinMutex<ObjState>,
    /// The domain this object belongs to (alive while the object is).
    domain: NonNull<Inner>,
    /// Drops and deallocates the `RcBox<T>` this header begins.
    free: unsafe fn(NonNull<Header>),
}

#[repr(C)]
struct RcBox<T> {
    header: Header,
    value: T,
}

/// Drops and deallocates an `RcBox<T>`.
///
/// # Safety
/// `h` is the header of a live `RcBox<T>` allocated by `Core::alloc::<T>`, which nothing will
/// use again.
unsafe fn free_box<T>(h: NonNull<Header>) {
    // SAFETY: the caller's contract; the header is the first field of the `repr(C)` box.
    drop(unsafe { Box::from_raw(h.cast::<RcBox<T>>().as_ptr()) });
}

/// A counted reference to a Refcache object: the object is not freed while it exists.
///
/// Give it back with [`Core::put`] (the cache: no shared cache line); dropped, it decrements
/// the object's global count directly (correct, but it shares the object's cache line).
/// `Clone` likewise increments the global count; [`Core::get`] is the cached way.
pub struct Ref<T> {
    ptr: NonNull<RcBox<T>>,
    _owns: PhantomData<RcBox<T>>,
}

// SAFETY: a `Ref` gives `&T` to any thread holding it and the object may be dropped on any
// thread (the reviewer's): the bounds of `Arc<T>`.
unsafe impl<T: Send + Sync> Send for Ref<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Ref<T> {}

/// The object's one weak reference (paper §3.1): [`Core::tryget`] returns a [`Ref`] while the
/// object is not freed, reviving it if its count is zero; `None` once it is freed.
///
/// Holding a `Weak` does not keep the object alive. It is not `Clone`: the object has one
/// back-reference.
pub struct Weak<T> {
    cell: NonNull<WeakCell>,
    domain: NonNull<Inner>,
    _refers: PhantomData<RcBox<T>>,
}

// SAFETY: a `Weak` yields `Ref<T>`s (see `Ref`'s bounds); the cell is atomics only.
unsafe impl<T: Send + Sync> Send for Weak<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Weak<T> {}

// ---------------------------------------------------------------------------------------------
// The domain
// ---------------------------------------------------------------------------------------------

/// One entry of a delta cache. `delta == 0` means empty: `obj` may then be stale (freed) and is
/// never dereferenced.
#[derive(Clone, Copy, Debug)]
struct Entry {
    obj: *const Header,
    delta: i64,
}

/// A review-queue item: the object and its epoch tag (reviewed once the global epoch is
/// `>= tag + 2`).
#[derive(Clone, Copy, Debug)]
struct Item {
    obj: NonNull<Header>,
    tag: u64,
}

/// One per-core slot's state, under the slot's lock.
#[derive(Debug)]
struct SlotState {
    cache: Box<[Entry]>,
    review: VecDeque<Item>,
    /// The last epoch this slot counted a flush for (its per-core epoch); equal to the epoch
    /// barrier's `flushed` of this slot.
    local: u64,
    /// Operations since the last maintenance check.
    ops: u32,
    /// When this slot last flushed (ns since the domain started).
    last_flush: u64,
}

// SAFETY: the raw pointers are objects of this domain, touched only under their locks.
unsafe impl Send for SlotState {}

#[derive(Debug)]
struct Slot {
    state: SpinMutex<SlotState>,
    /// Objects allocated minus objects freed through this slot (sums to the live objects).
    live: AtomicI64,
    /// A copy of the slot's per-core epoch, for helpers looking for laggards (a hint).
    local_hint: AtomicU64,
}

/// The epoch barrier (paper §4), under the epoch lock.
#[derive(Debug)]
struct EpochState {
    /// Active slots that have not counted a flush for the current epoch.
    pending: usize,
    /// Per slot: core handles attached, and the last epoch counted.
    slots: Vec<SlotEpoch>,
}

#[derive(Clone, Copy, Debug)]
struct SlotEpoch {
    active: usize,
    flushed: u64,
}

/// The shared review queue of items that belong to no active slot, and teardown's state.
#[derive(Debug)]
struct Orphans {
    queue: Vec<Item>,
    /// Every handle and core is gone: zeroes are final, objects are freed at once.
    orphaned: bool,
    /// Once orphaned: live objects, plus one while the teardown runs; the domain is freed when
    /// it reaches zero.
    live: i64,
}

// SAFETY: as `SlotState`.
unsafe impl Send for Orphans {}

/// The domain every handle, core and object points to.
struct Inner {
    slots: Box<[CachePadded<Slot>]>,
    /// The global epoch (written under the epoch lock, read by everyone).
    epoch: CachePadded<AtomicU64>,
    epochs: CachePadded<SpinMutex<EpochState>>,
    orphans: CachePadded<SpinMutex<Orphans>>,
    /// Items on the orphan queue (a hint read without its lock; written under it).
    orphans_pending: AtomicUsize,
    /// `Refcache` handles plus `Core`s.
    handles: AtomicUsize,
    /// When the current epoch began (ns since `start`; a hint for helpers).
    epoch_began: AtomicU64,
    /// Objects freed (statistics).
    freed: AtomicU64,
    config: RefcacheConfig,
    #[cfg(not(loom))]
    start: std::time::Instant,
}

/// A handle on a Refcache domain: per-core caches, epochs and review queues shared by every
/// object allocated through its cores. Cloning makes another handle of the same domain.
pub struct Refcache {
    inner: NonNull<Inner>,
}

// SAFETY: the domain is shared state behind locks and atomics, made for every thread.
unsafe impl Send for Refcache {}
// SAFETY: as above.
unsafe impl Sync for Refcache {}

/// One core's handle: increments and decrements through its slot's delta cache, `tryget`,
/// allocation, and the periodic flush and review. Used by one thread at a time (`!Sync`).
pub struct Core {
    inner: NonNull<Inner>,
    slot: usize,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: a core's state lives in its slot, behind the slot's lock; the handle may move.
unsafe impl Send for Core {}

/// A handle refused: a [`Ref`] or [`Weak`] of another `Refcache` passed to a [`Core`] (its
/// counts, epochs and reviews belong to its own domain).
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
#[error("a {0} of another Refcache was passed to this Core")]
pub struct ForeignHandle(pub &'static str);

/// A snapshot of a domain's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefcacheStats {
    /// The global epoch.
    pub epoch: u64,
    /// Objects allocated and not freed yet.
    pub live_objects: i64,
    /// Objects freed.
    pub freed: u64,
}

/// What a review decided for one object.
enum Verdict {
    Keep,
    Requeue,
    Free,
}

/// Objects to free, freed (their values dropped) by `run`, or on drop if a value's `Drop`
/// panicked, so that none is lost (or freed twice: each is popped before it is freed).
struct Frees<'a> {
    inner: &'a Inner,
    slot: usize,
    list: Vec<NonNull<Header>>,
}

impl Frees<'_> {
    fn run(mut self) {
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(h) = self.list.pop() {
            self.inner.slots[self.slot].live.fetch_sub(1, Relaxed);
            self.inner.freed.fetch_add(1, Relaxed);
            // SAFETY: `h` was decided free under its lock (its true count is zero and its weak
            // word is null), taken off every queue, and popped: nothing uses it again.
            unsafe { ((*h.as_ptr()).free)(h) };
        }
    }
}

impl Drop for Frees<'_> {
    fn drop(&mut self) {
        self.drain();
    }
}

impl Inner {
    fn new(cores: usize, config: RefcacheConfig) -> Self {
        assert!(cores > 0, "a Refcache needs at least one core");
        let entries = config.cache_entries.max(1).next_power_of_two();
        let config = RefcacheConfig {
            cache_entries: entries,
            maintain_every: config.maintain_every.max(1),
            ..config
        };
        Self {
            slots: (0..cores)
                .map(|_| {
                    CachePadded::new(Slot {
                        state: SpinMutex::new(SlotState {
                            cache: vec![
                                Entry {
                                    obj: std::ptr::null(),
                                    delta: 0
                                };
                                entries
                            ]
                            .into_boxed_slice(),
                            review: VecDeque::new(),
                            local: 0,
                            ops: 0,
                            last_flush: 0,
                        }),
                        live: AtomicI64::new(0),
                        local_hint: AtomicU64::new(0),
                    })
                })
                .collect(),
            epoch: CachePadded::new(AtomicU64::new(0)),
            epochs: CachePadded::new(SpinMutex::new(EpochState {
                pending: 0,
                slots: vec![
                    SlotEpoch {
                        active: 0,
                        flushed: 0
                    };
                    cores
                ],
            })),
            orphans: CachePadded::new(SpinMutex::new(Orphans {
                queue: Vec::new(),
                orphaned: false,
                live: 0,
            })),
            orphans_pending: AtomicUsize::new(0),
            handles: AtomicUsize::new(1),
            epoch_began: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            config,
            #[cfg(not(loom))]
            start: std::time::Instant::now(),
        }
    }

    /// Nanoseconds since the domain started (0 under loom, whose models use zero periods).
    fn now(&self) -> u64 {
        #[cfg(not(loom))]
        {
            self.start.elapsed().as_nanos() as u64
        }
        #[cfg(loom)]
        {
            0
        }
    }

    /// Whether `period` has passed since `since` (without reading the clock for a zero period).
    fn elapsed(&self, since: u64, period: Duration) -> bool {
        period.is_zero() || self.now().saturating_sub(since) >= period.as_nanos() as u64
    }

    fn epoch(&self) -> u64 {
        // Acquire: pairs with the Release store in `advance_locked`: whoever sees epoch `e`
        // happens-after every flush counted for `e - 1` (correctness argument, step 2).
        self.epoch.load(Acquire)
    }

    #[inline]
    fn hash(&self, obj: *const Header) -> usize {
        // Fibonacci hashing of the address: the product's top bits index the cache.
        let bits = self.config.cache_entries.trailing_zeros();
        if bits == 0 {
            return 0;
        }
        let h = (obj as usize as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (u64::BITS - bits)) as usize
    }

    // --- the epoch barrier -------------------------------------------------------------------

    /// Starts epoch `E + 1`.
    ///
    /// # Preconditions
    /// The epoch lock is held (`es`) and every active slot has counted a flush for `E`.
    fn advance_locked(&self, es: &mut EpochState) {
        let next = self.epoch.load(Relaxed) + 1;
        // Release: publishes every flush counted for the ending epoch (they happened-before
        // their `mark_flushed`, under this lock); pairs with the Acquire load in `epoch()`.
        self.epoch.store(next, Release);
        es.pending = es.slots.iter().filter(|s| s.active > 0).count();
        self.epoch_began.store(self.now(), Relaxed);
    }

    /// Counts slot `s`'s flush, begun after reading epoch `e`, if `e` is still current.
    ///
    /// # Preconditions
    /// The caller holds `s`'s lock (`st`) and has just flushed its whole cache.
    fn mark_flushed(&self, s: usize, st: &mut SlotState, e: u64) {
        self.epochs.lock_with(|es| {
            let slot = &mut es.slots[s];
            if self.epoch.load(Relaxed) == e && slot.active > 0 && slot.flushed < e {
                slot.flushed = e;
                st.local = e;
                self.slots[s].local_hint.store(e, Relaxed);
                es.pending -= 1;
                if es.pending == 0 {
                    self.advance_locked(es);
                }
            }
        });
    }

    /// A core handle on slot `s` arrives.
    fn attach(&self, s: usize) {
        self.slots[s].state.lock_with(|st| {
            self.epochs.lock_with(|es| {
                let e = self.epoch.load(Relaxed);
                let slot = &mut es.slots[s];
                slot.active += 1;
                if slot.active == 1 {
                    // Its cache is empty (a slot without handles holds no delta): flushed for
                    // the current epoch.
                    slot.flushed = e;
                    st.local = e;
                    self.slots[s].local_hint.store(e, Relaxed);
                    if es.pending == 0 {
                        // Every other slot had flushed (or none was active): start the next.
                        self.advance_locked(es);
                    }
                }
            });
        });
    }

    /// A core handle on slot `s` leaves: its cache is flushed and, if it was the slot's last
    /// handle, the slot's review queue goes to the orphan queue and the slot stops counting.
    fn detach(&self, s: usize) {
        let frees = self.slots[s].state.lock_with(|st| {
            let e = self.epoch();
            self.flush_locked(s, st);
            // Not the slot's last handle: it leaves (the others keep the slot active).
            let last = self.epochs.lock_with(|es| {
                let slot = &mut es.slots[s];
                if slot.active > 1 {
                    slot.active -= 1;
                    false
                } else {
                    true
                }
            });
            if !last {
                self.mark_flushed(s, st, e);
                return self.review_locked(s, st);
            }
            let items: Vec<Item> = st.review.drain(..).collect();
            if !items.is_empty() {
                self.orphans.lock_with(|o| {
                    o.queue.extend(items);
                    self.orphans_pending.store(o.queue.len(), Relaxed);
                });
            }
            self.epochs.lock_with(|es| {
                let slot = &mut es.slots[s];
                slot.active -= 1;
                if slot.flushed < self.epoch.load(Relaxed) {
                    // It had not flushed for this epoch: it just did, and leaves.
                    es.pending -= 1;
                    if es.pending == 0 {
                        self.advance_locked(es);
                    }
                }
            });
            Vec::new()
        });
        Frees {
            inner: self,
            slot: s,
            list: frees,
        }
        .run();
    }

    // --- eviction, flush, review --------------------------------------------------------------

    /// Fig. 2's `evict`: adds `delta` to `obj`'s global count; a first zero queues it on slot
    /// `s` (tag `local + 1`, correctness argument step 1) and sets its dying bit, a zero while
    /// queued makes it dirty.
    ///
    /// # Preconditions
    /// The caller holds slot `s`'s lock (`st`); `obj` is live (a cached delta is a count).
    fn evict_locked(&self, st: &mut SlotState, obj: NonNull<Header>, delta: i64) {
        // SAFETY: precondition: the object is live.
        let h = unsafe { obj.as_ref() };
        let queue = h.state.lock_with(|os| apply(os, delta));
        if queue {
            st.review.push_back(Item {
                obj,
                tag: st.local + 1,
            });
        }
    }

    /// Adds `delta` to `obj`'s cached delta in slot `st`, evicting a colliding entry.
    ///
    /// # Preconditions
    /// As `evict_locked`; the caller owns the reference being counted (or, for `tryget`, has
    /// just won the weak word).
    #[inline]
    fn update_locked(&self, st: &mut SlotState, obj: NonNull<Header>, delta: i64) {
        let i = self.hash(obj.as_ptr());
        let e = st.cache[i];
        if !std::ptr::eq(e.obj, obj.as_ptr()) {
            self.replace_entry_locked(st, i, obj, delta);
        } else {
            st.cache[i].delta += delta;
        }
    }

    /// `update_locked`'s collision path: evicts entry `i` and gives it to `obj`.
    ///
    /// # Preconditions
    /// As `update_locked`.
    #[cold]
    fn replace_entry_locked(&self, st: &mut SlotState, i: usize, obj: NonNull<Header>, delta: i64) {
        let e = st.cache[i];
        {
            if e.delta != 0 {
                // SAFETY: a non-zero cached delta is a count: the entry's object is live.
                let victim = unsafe { NonNull::new_unchecked(e.obj as *mut Header) };
                self.evict_locked(st, victim, e.delta);
            }
            st.cache[i] = Entry {
                obj: obj.as_ptr(),
                delta,
            };
        }
    }

    /// Fig. 2's `flush`: evicts every non-zero entry and empties the cache.
    ///
    /// # Preconditions
    /// The caller holds slot `s`'s lock (`st`).
    fn flush_locked(&self, _s: usize, st: &mut SlotState) {
        for i in 0..st.cache.len() {
            let e = st.cache[i];
            st.cache[i] = Entry {
                obj: std::ptr::null(),
                delta: 0,
            };
            if e.delta != 0 {
                // SAFETY: a non-zero cached delta is a count: the object is live.
                let obj = unsafe { NonNull::new_unchecked(e.obj as *mut Header) };
                self.evict_locked(st, obj, e.delta);
            }
        }
        st.last_flush = self.now();
    }

    /// Fig. 2's `review` of slot `s`'s queue: every item whose tag is two epochs old is kept,
    /// re-queued or returned to be freed.
    ///
    /// # Preconditions
    /// The caller holds slot `s`'s lock (`st`).
    fn review_locked(&self, _s: usize, st: &mut SlotState) -> Vec<NonNull<Header>> {
        let e = self.epoch();
        let mut frees = Vec::new();
        // The queue is sorted by tag (pushes are `local + 1`, which only grows, and adopted
        // orphans are inserted in order): the due items are a prefix. Re-queued items get tag
        // `local + 1 > e - 2`, so they are not due again in this pass.
        while st.review.front().is_some_and(|it| e >= it.tag + 2) {
            let item = st.review.pop_front().expect("a front item");
            self.review_item(st, item.obj, &mut frees);
        }
        frees
    }

    /// Reviews one due object (taken off its queue).
    ///
    /// # Preconditions
    /// The caller holds a slot lock (`st`); `obj` was on a review queue (so it is not freed).
    fn review_item(
        &self,
        st: &mut SlotState,
        obj: NonNull<Header>,
        frees: &mut Vec<NonNull<Header>>,
    ) {
        // SAFETY: precondition: a queued object is not freed.
        let h = unsafe { obj.as_ref() };
        let verdict = h.state.lock_with(|os| {
            debug_assert!(os.queued, "a reviewed object is queued");
            if os.refcnt != 0 {
                os.queued = false;
                os.dirty = false;
                set_dying(os, false);
                Verdict::Keep
            } else if os.dirty || !kill_weak(os, obj, false) {
                os.dirty = false;
                set_dying(os, true);
                Verdict::Requeue
            } else {
                os.queued = false;
                Verdict::Free
            }
        });
        match verdict {
            Verdict::Keep => {}
            Verdict::Requeue => st.review.push_back(Item {
                obj,
                tag: st.local + 1,
            }),
            Verdict::Free => frees.push(obj),
        }
    }

    /// Flushes slot `s` if due (or `force`), counts the flush for the epoch, and reviews.
    ///
    /// # Preconditions
    /// The caller holds slot `s`'s lock (`st`).
    fn maintain_locked(&self, s: usize, st: &mut SlotState, force: bool) -> Vec<NonNull<Header>> {
        let e = self.epoch();
        if force || (st.local < e && self.elapsed(st.last_flush, self.config.epoch_period)) {
            self.flush_locked(s, st);
            self.adopt_orphans_locked(st);
            if st.local < e {
                self.mark_flushed(s, st, e);
            }
        }
        self.review_locked(s, st)
    }

    /// Moves the orphan queue's items (of detached slots and of `Ref`s dropped without a core)
    /// into slot `st`'s queue, in tag order. Every counted flush adopts them, so an orphan
    /// waits at most one epoch for a slot whose flushes review it.
    ///
    /// # Preconditions
    /// The caller holds the slot's lock (`st`).
    fn adopt_orphans_locked(&self, st: &mut SlotState) {
        if self.orphans_pending.load(Relaxed) == 0 {
            return;
        }
        let items = self.orphans.lock_with(|o| {
            self.orphans_pending.store(0, Relaxed);
            std::mem::take(&mut o.queue)
        });
        for item in items {
            let at = st.review.partition_point(|it| it.tag <= item.tag);
            st.review.insert(at, item);
        }
    }

    /// Flushes (and reviews) every active slot other than `me` that has not counted a flush for
    /// the current epoch, on its behalf; `wait`: even if its lock is held.
    fn help(&self, me: usize, wait: bool) {
        let e = self.epoch();
        for s in 0..self.slots.len() {
            if s == me || self.slots[s].local_hint.load(Relaxed) >= e {
                continue;
            }
            let work = |st: &mut SlotState| {
                let active = self.epochs.lock_with(|es| es.slots[s].active > 0);
                if active && st.local < e {
                    self.maintain_locked(s, st, true)
                } else {
                    Vec::new()
                }
            };
            let frees = if wait {
                Some(self.slots[s].state.lock_with(work))
            } else {
                self.slots[s].state.try_lock_with(work)
            };
            if let Some(list) = frees {
                Frees {
                    inner: self,
                    slot: s,
                    list,
                }
                .run();
            }
        }
    }

    /// A core's periodic maintenance (Fig. 2's periodic `flush` and `review`): flush if due,
    /// review, take the orphans' due items, and help lagging slots once the epoch is overdue.
    fn maintain(&self, s: usize, force: bool) {
        let (frees, caught_up) = self.slots[s].state.lock_with(|st| {
            let frees = self.maintain_locked(s, st, force);
            (frees, st.local >= self.epoch())
        });
        Frees {
            inner: self,
            slot: s,
            list: frees,
        }
        .run();
        if caught_up
            && self.slots.len() > 1
            && self.elapsed(self.epoch_began.load(Relaxed), self.config.help_after)
        {
            self.help(s, false);
        }
    }

    // --- the paths without a core ------------------------------------------------------------

    /// `delta` applied to `obj`'s global count without a cache (a `Ref` cloned or dropped
    /// without a core): a zero queues it on the orphan queue tagged with the epoch read under
    /// the epoch lock (correctness argument, step 1), or, once the domain is orphaned, frees it.
    ///
    /// # Safety
    /// `obj` is a live object of this domain and the caller owns the counted reference being
    /// added or dropped.
    unsafe fn update_direct(obj: NonNull<Header>, delta: i64) {
        // SAFETY: the caller's contract.
        let h = unsafe { obj.as_ref() };
        let this = h.domain;
        if !h.state.lock_with(|os| apply(os, delta)) {
            return;
        }
        // SAFETY: the domain lives while its object does (this one is queued, not freed).
        let inner = unsafe { this.as_ref() };
        // The epoch under the epoch lock: this zero happens-before the next advance.
        let tag = inner.epochs.lock_with(|_| inner.epoch.load(Relaxed));
        let orphaned = inner.orphans.lock_with(|o| {
            if !o.orphaned {
                o.queue.push(Item { obj, tag });
                inner.orphans_pending.store(o.queue.len(), Relaxed);
            }
            o.orphaned
        });
        if orphaned {
            // No core is left: the global count is the true count, and it is zero.
            let free = h.state.lock_with(|os| {
                if os.refcnt == 0 && kill_weak(os, obj, true) {
                    os.queued = false;
                    true
                } else {
                    os.queued = false;
                    false
                }
            });
            if free {
                /// Releases the freed object's count in `live`, also when its `Drop` panics.
                struct Release(NonNull<Inner>);
                impl Drop for Release {
                    fn drop(&mut self) {
                        // SAFETY: the object freed was counted in the orphaned domain's `live`.
                        unsafe { Inner::orphan_released(self.0, 1) };
                    }
                }
                let free = h.free;
                inner.freed.fetch_add(1, Relaxed);
                let _release = Release(this);
                // SAFETY: the true count is zero and the weak word is null: nothing uses it.
                unsafe { free(obj) };
            }
        }
    }

    /// Once orphaned: `n` objects (or the teardown's own hold) are gone; the last frees the
    /// domain.
    ///
    /// # Safety
    /// `this` is orphaned and `n` counts objects freed (or the teardown's hold) that its
    /// `live` counts; the caller does not use the domain after this call.
    unsafe fn orphan_released(this: NonNull<Inner>, n: i64) {
        // SAFETY: the caller's `n` is still counted: the domain lives.
        let last = unsafe { this.as_ref() }.orphans.lock_with(|o| {
            o.live -= n;
            o.live == 0
        });
        if last {
            // SAFETY: orphaned with no live object and no teardown running: no handle, core,
            // object or call refers to the domain any more. Allocated by `Refcache::new`.
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    /// The last handle and core are gone: free every queued zero, then leave the domain to its
    /// remaining objects (module doc, "Cores and teardown").
    ///
    /// # Safety
    /// `this` had its last handle or core dropped just now; the caller does not use it after.
    unsafe fn teardown(this: NonNull<Inner>) {
        // SAFETY: the teardown's own hold (`+ 1` below) keeps the domain alive until the end.
        let inner = unsafe { this.as_ref() };
        let items = inner.orphans.lock_with(|o| {
            o.orphaned = true;
            let live: i64 = inner.slots.iter().map(|s| s.live.load(Relaxed)).sum();
            o.live += live + 1;
            inner.orphans_pending.store(0, Relaxed);
            std::mem::take(&mut o.queue)
        });
        let mut items = items;
        for s in inner.slots.iter() {
            s.state.lock_with(|st| {
                debug_assert!(
                    st.cache.iter().all(|e| e.delta == 0),
                    "detached caches are empty"
                );
                items.extend(st.review.drain(..));
            });
        }
        // Frees the queued zeroes; on drop (also when a value's `Drop` panics) finishes the
        // batch and releases the teardown's hold.
        struct Batch {
            this: NonNull<Inner>,
            items: Vec<Item>,
            freed: i64,
        }
        impl Batch {
            fn run(mut self) {
                self.drain();
            }

            fn drain(&mut self) {
                // SAFETY: the teardown's hold keeps the domain alive until `drop` releases it.
                let inner = unsafe { self.this.as_ref() };
                while let Some(item) = self.items.pop() {
                    // SAFETY: a queued object is not freed.
                    let h = unsafe { item.obj.as_ref() };
                    let free = h.state.lock_with(|os| {
                        os.queued = false;
                        os.refcnt == 0 && kill_weak(os, item.obj, true)
                    });
                    if free {
                        let free = h.free;
                        inner.freed.fetch_add(1, Relaxed);
                        self.freed += 1;
                        // SAFETY: no core is left, so the zero global count is the true count,
                        // and the weak word is null: nothing uses the object again.
                        unsafe { free(item.obj) };
                    }
                }
            }
        }
        impl Drop for Batch {
            fn drop(&mut self) {
                self.drain();
                // SAFETY: the objects freed here and the teardown's hold were counted in
                // `live`; nothing here uses the domain afterwards.
                unsafe { Inner::orphan_released(self.this, self.freed + 1) };
            }
        }
        // Popped from the back: free in queue order. A panic in `run` unwinds through
        // `Batch::drop`, which frees the rest and releases.
        items.reverse();
        Batch {
            this,
            items,
            freed: 0,
        }
        .run();
    }

    fn stats(&self) -> RefcacheStats {
        RefcacheStats {
            epoch: self.epoch(),
            live_objects: self.slots.iter().map(|s| s.live.load(Relaxed)).sum(),
            freed: self.freed.load(Relaxed),
        }
    }
}

/// Fig. 2's `evict` body on an object's state: returns whether the object must be queued.
fn apply(os: &mut ObjState, delta: i64) -> bool {
    os.refcnt += delta;
    if os.refcnt != 0 {
        return false;
    }
    if os.queued {
        os.dirty = true;
        false
    } else {
        os.queued = true;
        os.dirty = false;
        set_dying(os, true);
        true
    }
}

/// Sets or clears the dying bit of the object's weak word.
fn set_dying(os: &ObjState, dying: bool) {
    if let Some(cell) = os.weak {
        // SAFETY: a bound cell lives while the object holds it (it frees it only when the
        // `Weak` side is gone and the object lets go).
        let word = unsafe { &cell.as_ref().word };
        if dying {
            // AcqRel: Acquire pairs with a `tryget`'s Release CAS, so a `tryget` that cleared
            // the bit before this happens-before it (correctness argument, step 4); Release
            // publishes the object's state to the next `tryget` that reads the bit.
            word.fetch_or(DYING, AcqRel);
        } else {
            word.fetch_and(!DYING, Release);
        }
    }
}

/// Fig. 2's free CAS: ⟨obj, dying⟩ to ⟨null⟩. True if the object may be freed as far as its
/// weak reference goes (no weak reference, its `Weak` dropped, or the CAS won); false if a
/// `tryget` cleared the dying bit. `final_`: no core is left (teardown), so no `tryget` can
/// race and the word is nulled whatever its dying bit.
fn kill_weak(os: &mut ObjState, obj: NonNull<Header>, final_: bool) -> bool {
    let Some(cell) = os.weak else {
        return true;
    };
    // SAFETY: a bound cell lives while the object holds it.
    let word = unsafe { &cell.as_ref().word };
    let me = obj.as_ptr() as usize;
    let mut v = word.load(Acquire);
    loop {
        if v & WEAK_GONE != 0 {
            // The `Weak` is gone: the object side owns the cell and frees it.
            os.weak = None;
            // SAFETY: both sides are done with the cell (the `Weak` dropped, the object lets
            // go now); allocated by `Ref::downgrade`.
            drop(unsafe { Box::from_raw(cell.as_ptr()) });
            return true;
        }
        if v != me | DYING && !(final_ && v & !TAGS == me) {
            return false;
        }
        // AcqRel: the free and a `tryget` race on this word; whoever changes it first wins
        // (Acquire pairs with the Release CAS of a `tryget` that cleared the bit).
        match word.compare_exchange(v, OBJ_GONE, AcqRel, Acquire) {
            Ok(_) => {
                // The `Weak` side owns the cell now (it frees it on drop).
                os.weak = None;
                return true;
            }
            Err(now) => v = now,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Handles
// ---------------------------------------------------------------------------------------------

impl Refcache {
    /// A domain with `cores` per-core slots and the default configuration.
    ///
    /// # Panics
    /// When `cores` is 0.
    pub fn new(cores: usize) -> Self {
        Self::with_config(cores, RefcacheConfig::default())
    }

    /// A domain with `cores` per-core slots and `config`.
    ///
    /// # Panics
    /// When `cores` is 0.
    pub fn with_config(cores: usize, config: RefcacheConfig) -> Self {
        Self {
            inner: NonNull::from(Box::leak(Box::new(Inner::new(cores, config)))),
        }
    }

    fn inner(&self) -> &Inner {
        // SAFETY: a handle keeps the domain alive.
        unsafe { self.inner.as_ref() }
    }

    /// A core handle on slot `index % cores()`: it takes part in epochs until it drops.
    pub fn core(&self, index: usize) -> Core {
        let inner = self.inner();
        let slot = index % inner.slots.len();
        inner.handles.fetch_add(1, Relaxed);
        inner.attach(slot);
        Core {
            inner: self.inner,
            slot,
            _not_sync: PhantomData,
        }
    }

    /// How many per-core slots there are.
    pub fn cores(&self) -> usize {
        self.inner().slots.len()
    }

    /// The configuration (with the cache size rounded up to a power of two).
    pub fn config(&self) -> RefcacheConfig {
        self.inner().config
    }

    /// The global epoch.
    pub fn epoch(&self) -> u64 {
        self.inner().epoch()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RefcacheStats {
        self.inner().stats()
    }

    /// Whether `a` and `b` are handles of one domain.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.inner == b.inner
    }
}

impl Clone for Refcache {
    fn clone(&self) -> Self {
        self.inner().handles.fetch_add(1, Relaxed);
        Self { inner: self.inner }
    }
}

impl Drop for Refcache {
    fn drop(&mut self) {
        release_handle(self.inner);
    }
}

impl std::fmt::Debug for Refcache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refcache")
            .field("cores", &self.cores())
            .field("stats", &self.stats())
            .finish()
    }
}

/// Drops one handle or core of the domain; the last runs the teardown.
fn release_handle(inner: NonNull<Inner>) {
    // SAFETY: the caller's handle kept the domain alive until now.
    let i = unsafe { inner.as_ref() };
    // AcqRel: the last handle's teardown happens-after every other handle's last use (the
    // `Arc` pattern).
    if i.handles.fetch_sub(1, AcqRel) == 1 {
        // SAFETY: this was the last handle; nothing here uses the domain afterwards.
        unsafe { Inner::teardown(inner) };
    }
}

impl Core {
    fn inner(&self) -> &Inner {
        // SAFETY: a core keeps the domain alive.
        unsafe { self.inner.as_ref() }
    }

    /// The per-core slot this handle uses.
    pub fn index(&self) -> usize {
        self.slot
    }

    /// A handle of this core's domain.
    pub fn refcache(&self) -> Refcache {
        self.inner().handles.fetch_add(1, Relaxed);
        Refcache { inner: self.inner }
    }

    /// Refuses an object of another domain (its counts and reviews belong to that one).
    fn check(&self, h: &Header) -> Result<(), ForeignHandle> {
        if h.domain == self.inner {
            Ok(())
        } else {
            Err(ForeignHandle("Ref"))
        }
    }

    /// A new object holding `value`, with one reference (global count 1). Its `Drop` runs,
    /// exactly once, when its true count has been zero for a whole epoch (or at teardown).
    pub fn alloc<T: Send + Sync + 'static>(&self, value: T) -> Ref<T> {
        let inner = self.inner();
        let b = Box::new(RcBox {
            header: Header {
                state: SpinMutex::new(ObjState {
                    refcnt: 1,
                    queued: false,
                    dirty: false,
                    weak: None,
                }),
                domain: self.inner,
                free: free_box::<T>,
            },
            value,
        });
        inner.slots[self.slot].live.fetch_add(1, Relaxed);
        Ref {
            ptr: NonNull::from(Box::leak(b)),
            _owns: PhantomData,
        }
    }

    /// [`alloc`](Self::alloc) and [`Ref::downgrade`] in one, fallibly: the object and its weak
    /// cell are allocated before anything is counted, and a failed allocation hands `value`
    /// back with nothing changed (a caller that must not abort on memory exhaustion, such as
    /// the radix tree's expansion, returns its own out-of-memory error then).
    ///
    /// # Errors
    /// `Err(value)` when either allocation fails.
    pub fn try_alloc_with_weak<T: Send + Sync + 'static>(
        &self,
        value: T,
    ) -> Result<(Ref<T>, Weak<T>), T> {
        use std::alloc::{alloc, dealloc, Layout};
        let inner = self.inner();
        let cell_layout = Layout::new::<WeakCell>();
        // SAFETY: `WeakCell` has a non-zero size.
        let cell = unsafe { alloc(cell_layout) } as *mut WeakCell;
        if cell.is_null() {
            return Err(value);
        }
        let box_layout = Layout::new::<RcBox<T>>();
        // SAFETY: `RcBox<T>` has a non-zero size (its header).
        let obj = unsafe { alloc(box_layout) } as *mut RcBox<T>;
        if obj.is_null() {
            // SAFETY: allocated above with this layout, never initialised or shared.
            unsafe { dealloc(cell as *mut u8, cell_layout) };
            return Err(value);
        }
        // SAFETY: both are fresh allocations of their types' layouts from the global allocator
        // (so `Box::from_raw` may free them, as `free_box` and the weak side do); written once
        // before they are shared.
        unsafe {
            cell.write(WeakCell {
                // Not dying even if queued: the review's free CAS then fails and re-queues.
                word: AtomicUsize::new(obj as usize),
            });
            let cell = NonNull::new_unchecked(cell);
            obj.write(RcBox {
                header: Header {
                    state: SpinMutex::new(ObjState {
                        refcnt: 1,
                        queued: false,
                        dirty: false,
                        weak: Some(cell),
                    }),
                    domain: self.inner,
                    free: free_box::<T>,
                },
                value,
            });
            inner.slots[self.slot].live.fetch_add(1, Relaxed);
            let weak = Weak {
                cell,
                domain: self.inner,
                _refers: PhantomData,
            };
            let r = Ref {
                ptr: NonNull::new_unchecked(obj),
                _owns: PhantomData,
            };
            Ok((r, weak))
        }
    }

    /// Runs one cache operation under the slot lock, then the maintenance check if due.
    #[inline]
    fn op(&self, f: impl FnOnce(&Inner, &mut SlotState)) {
        let inner = self.inner();
        let due = inner.slots[self.slot].state.lock_with(|st| {
            f(inner, st);
            st.ops += 1;
            if st.ops >= inner.config.maintain_every {
                st.ops = 0;
                true
            } else {
                false
            }
        });
        if due {
            inner.maintain(self.slot, false);
        }
    }

    /// Fig. 2's `inc`: another reference to `r`'s object, counted in this core's cache.
    ///
    /// # Errors
    /// [`ForeignHandle`] when `r` belongs to another `Refcache` (nothing is counted).
    pub fn get<T>(&self, r: &Ref<T>) -> Result<Ref<T>, ForeignHandle> {
        let h = r.header();
        self.check(h)?;
        let obj = r.obj();
        self.op(|inner, st| inner.update_locked(st, obj, 1));
        Ok(Ref {
            ptr: r.ptr,
            _owns: PhantomData,
        })
    }

    /// Fig. 2's `dec`: gives `r` back, counted in this core's cache.
    ///
    /// # Errors
    /// [`ForeignHandle`] when `r` belongs to another `Refcache`; `r` is then given back through
    /// its own domain's global count (as if dropped), so nothing leaks.
    pub fn put<T>(&self, r: Ref<T>) -> Result<(), ForeignHandle> {
        let h = r.header();
        self.check(h)?;
        let obj = r.obj();
        std::mem::forget(r);
        self.op(|inner, st| inner.update_locked(st, obj, -1));
        Ok(())
    }

    /// Fig. 2's `tryget`: a reference to `w`'s object if it is not freed (reviving it if its
    /// count is zero: its dying bit is cleared, so the pending review keeps it); `None` once it
    /// is freed.
    ///
    /// # Errors
    /// [`ForeignHandle`] when `w` belongs to another `Refcache` (nothing is revived).
    pub fn tryget<T>(&self, w: &Weak<T>) -> Result<Option<Ref<T>>, ForeignHandle> {
        if w.domain != self.inner {
            return Err(ForeignHandle("Weak"));
        }
        // SAFETY: the cell lives while its `Weak` does.
        let word = unsafe { &w.cell.as_ref().word };
        let mut got = None;
        // The read of the word and the increment form one critical section of this core's slot
        // (correctness argument, step 4).
        self.op(|inner, st| {
            let mut v = word.load(Acquire);
            loop {
                let ptr = v & !TAGS;
                if ptr == 0 {
                    return; // freed
                }
                if v & DYING != 0 {
                    // AcqRel: clears the bit before the review's free CAS can (or learns it
                    // lost); Release pairs with the Acquire of `set_dying` / `kill_weak`.
                    if let Err(now) = word.compare_exchange(v, v & !DYING, AcqRel, Acquire) {
                        v = now;
                        continue;
                    }
                }
                // SAFETY: the word held the object's pointer (not freed) when read inside this
                // critical section: the object cannot be freed before this core's next flush,
                // which comes after the increment below (correctness argument, step 4).
                let obj = unsafe { NonNull::new_unchecked(ptr as *mut Header) };
                inner.update_locked(st, obj, 1);
                got = Some(obj);
                return;
            }
        });
        Ok(got.map(|obj| Ref {
            ptr: obj.cast(),
            _owns: PhantomData,
        }))
    }

    /// Flushes this core's cache now (counting it for the current epoch), then reviews its
    /// queue and the orphans' due items.
    pub fn flush(&self) {
        self.inner().maintain(self.slot, true);
    }

    /// Drives one whole epoch: flushes this core and, on their behalf, every active slot that
    /// has not flushed for it (waiting for their locks), so that the global epoch advances at
    /// least once; then reviews. An object is freed at most 8 epochs after its last reference
    /// went (the bound `tests/refcache_stress.rs` asserts: its last delta is flushed within an
    /// epoch, it is reviewed two to three epochs after its last zero, and a dirty zero is
    /// re-queued once more), so 8 calls free every object unreferenced before the first.
    pub fn synchronize(&self) {
        let inner = self.inner();
        let start = inner.epoch();
        let backoff = Backoff::new();
        while inner.epoch() == start {
            inner.maintain(self.slot, true);
            inner.help(self.slot, true);
            if inner.epoch() == start {
                spin(&backoff);
            }
        }
        inner.maintain(self.slot, false);
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        /// Releases the core's handle also when a value's `Drop` panics during the detach.
        struct Release(NonNull<Inner>);
        impl Drop for Release {
            fn drop(&mut self) {
                release_handle(self.0);
            }
        }
        let _release = Release(self.inner);
        self.inner().detach(self.slot);
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("slot", &self.slot).finish()
    }
}

impl<T> Ref<T> {
    fn header(&self) -> &Header {
        // SAFETY: a `Ref` is a count: the object is live.
        unsafe { &self.ptr.as_ref().header }
    }

    fn obj(&self) -> NonNull<Header> {
        self.ptr.cast()
    }

    /// The object's one weak reference, bound now; `None` if it already has one that lives.
    pub fn downgrade(this: &Self) -> Option<Weak<T>> {
        let h = this.header();
        let obj = this.obj();
        h.state.lock_with(|os| {
            if let Some(old) = os.weak {
                // SAFETY: a bound cell lives while the object holds it.
                let v = unsafe { old.as_ref() }.word.load(Acquire);
                if v & WEAK_GONE == 0 {
                    return None;
                }
                // SAFETY: its `Weak` dropped and the object lets go now: both sides are done.
                drop(unsafe { Box::from_raw(old.as_ptr()) });
            }
            let cell = NonNull::from(Box::leak(Box::new(WeakCell {
                // Not dying even if queued: the review's free CAS then fails and re-queues.
                word: AtomicUsize::new(obj.as_ptr() as usize),
            })));
            os.weak = Some(cell);
            Some(Weak {
                cell,
                domain: h.domain,
                _refers: PhantomData,
            })
        })
    }

    /// Whether `a` and `b` refer to one object.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.ptr == b.ptr
    }

    /// The value's address.
    pub fn as_ptr(this: &Self) -> *const T {
        // SAFETY: the object is live.
        unsafe { &raw const (*this.ptr.as_ptr()).value }
    }

    /// Keeps the reference as a bare count (the object stays alive) and returns the value's
    /// address, for [`Ref::from_raw`] (as `Arc::into_raw`).
    pub fn into_raw(this: Self) -> *const T {
        let p = Self::as_ptr(&this);
        std::mem::forget(this);
        p
    }

    /// The reference kept by [`Ref::into_raw`].
    ///
    /// # Safety
    /// `ptr` came from `Ref::<T>::into_raw` and this call takes that one count back (each
    /// `into_raw` is matched by at most one `from_raw`).
    pub unsafe fn from_raw(ptr: *const T) -> Self {
        let offset = std::mem::offset_of!(RcBox<T>, value);
        // SAFETY: the caller's contract: `ptr` is the value field of a live `RcBox<T>`.
        let b = unsafe { (ptr as *const u8).sub(offset) } as *mut RcBox<T>;
        Self {
            // SAFETY: derived from a live box's address.
            ptr: unsafe { NonNull::new_unchecked(b) },
            _owns: PhantomData,
        }
    }

    /// Whether this object was allocated by a core of `rc`.
    pub fn belongs_to(this: &Self, rc: &Refcache) -> bool {
        this.header().domain == rc.inner
    }
}

impl<T> std::ops::Deref for Ref<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a `Ref` is a count: the object is live.
        unsafe { &self.ptr.as_ref().value }
    }
}

impl<T> Clone for Ref<T> {
    /// Another reference through the object's global count (no cache; [`Core::get`] is the
    /// scalable way).
    fn clone(&self) -> Self {
        // SAFETY: live object (this `Ref`), and this call owns the reference it adds.
        unsafe { Inner::update_direct(self.obj(), 1) };
        Self {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<T> Drop for Ref<T> {
    /// Gives the reference back through the object's global count (no cache; [`Core::put`]
    /// is the scalable way).
    fn drop(&mut self) {
        // SAFETY: live object (this `Ref`), and this drop owns the reference it gives back.
        unsafe { Inner::update_direct(self.obj(), -1) };
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Ref<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl<T> Weak<T> {
    /// Whether the object has been freed (a later [`Core::tryget`] fails). `false` does not
    /// promise that a `tryget` will succeed.
    pub fn is_freed(&self) -> bool {
        // SAFETY: the cell lives while its `Weak` does.
        let v = unsafe { self.cell.as_ref() }.word.load(Acquire);
        v & !TAGS == 0
    }

    /// Whether this is the weak reference of `r`'s object.
    pub fn refers_to(&self, r: &Ref<T>) -> bool {
        // SAFETY: the cell lives while its `Weak` does.
        let v = unsafe { self.cell.as_ref() }.word.load(Relaxed);
        v & !TAGS == r.ptr.as_ptr() as usize
    }
}

impl<T> Drop for Weak<T> {
    fn drop(&mut self) {
        // SAFETY: the cell lives while its `Weak` does.
        let prev = unsafe { self.cell.as_ref() }
            .word
            .fetch_or(WEAK_GONE, AcqRel);
        if prev & OBJ_GONE != 0 {
            // SAFETY: the object side let go at the free (`kill_weak`); this is the last use.
            drop(unsafe { Box::from_raw(self.cell.as_ptr()) });
        }
    }
}

impl<T> std::fmt::Debug for Weak<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weak")
            .field("freed", &self.is_freed())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize as StdUsize};
    use std::sync::Arc;

    /// A value that records its drop (and a second drop).
    struct Probe {
        dropped: Arc<StdUsize>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, SeqCst);
        }
    }

    fn probe() -> (Probe, Arc<StdUsize>) {
        let d = Arc::new(StdUsize::new(0));
        (Probe { dropped: d.clone() }, d)
    }

    fn eager(cores: usize, entries: usize) -> Refcache {
        Refcache::with_config(cores, RefcacheConfig::eager(entries))
    }

    #[test]
    fn an_object_is_freed_once_after_its_count_stays_zero_for_an_epoch() {
        let rc = eager(1, 4);
        let core = rc.core(0);
        let (p, dropped) = probe();
        let r = core.alloc(p);
        let r2 = core.get(&r).unwrap();
        core.put(r).unwrap();
        core.synchronize();
        core.synchronize();
        assert_eq!(dropped.load(SeqCst), 0, "a reference is held");
        core.put(r2).unwrap();
        // Flushed at the next epoch (tag e), reviewed at e + 2.
        for _ in 0..4 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
        assert_eq!(rc.stats().live_objects, 0);
        assert_eq!(rc.stats().freed, 1);
    }

    #[test]
    fn the_cache_absorbs_increments_and_decrements_until_a_flush() {
        let rc = Refcache::with_config(
            1,
            RefcacheConfig {
                maintain_every: u32::MAX,
                ..RefcacheConfig::eager(16)
            },
        );
        let core = rc.core(0);
        let r = core.alloc(7u32);
        let refs: Vec<_> = (0..10).map(|_| core.get(&r).unwrap()).collect();
        assert_eq!(r.header().state.lock_with(|os| os.refcnt), 1, "cached");
        for x in refs {
            core.put(x).unwrap();
        }
        assert_eq!(r.header().state.lock_with(|os| os.refcnt), 1);
        assert_eq!(*r, 7);
        core.put(r).unwrap();
    }

    #[test]
    fn a_collision_evicts_the_delta_to_the_global_count() {
        let rc = Refcache::with_config(
            1,
            RefcacheConfig {
                maintain_every: u32::MAX,
                ..RefcacheConfig::eager(1)
            },
        );
        let core = rc.core(0);
        let a = core.alloc(1u8);
        let b = core.alloc(2u8);
        let a2 = core.get(&a).unwrap();
        let b2 = core.get(&b).unwrap(); // evicts a's +1
        assert_eq!(a.header().state.lock_with(|os| os.refcnt), 2);
        assert_eq!(b.header().state.lock_with(|os| os.refcnt), 1);
        for r in [a, a2, b, b2] {
            core.put(r).unwrap();
        }
    }

    #[test]
    fn a_dirty_zero_is_requeued_not_freed() {
        // One core: a count that goes to zero, is queued, rises and falls back to zero while
        // queued must survive the first review.
        let rc = Refcache::with_config(
            1,
            RefcacheConfig {
                maintain_every: u32::MAX,
                ..RefcacheConfig::eager(4)
            },
        );
        let core = rc.core(0);
        let (p, dropped) = probe();
        let r = core.alloc(p);
        let held = core.get(&r).unwrap(); // cached +1
        core.put(r).unwrap(); // cached 0
                              // Make the global count reach zero while a reference exists: evict -1 directly.
        let raw = Ref::into_raw(core.get(&held).unwrap());
        rc.inner().slots[0]
            .state
            .lock_with(|st| rc.inner().flush_locked(0, st)); // global 2
                                                             // Drop two through the global count: 0, queued (on the orphan queue).
                                                             // SAFETY: both counts came from `into_raw`/`get` above.
        drop(unsafe { Ref::from_raw(raw) });
        let h2 = held.clone(); // direct +1 -> 2? no: global 1 -> 2
        drop(h2);
        assert!(!held.header().state.lock_with(|os| os.queued));
        drop(held); // global 0: queued on the orphan queue
        assert!(held_queued(&rc));
        for _ in 0..6 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
    }

    fn held_queued(rc: &Refcache) -> bool {
        rc.inner().orphans.lock_with(|o| !o.queue.is_empty())
    }

    #[test]
    fn tryget_revives_a_zero_object_and_fails_once_it_is_freed() {
        let rc = eager(1, 4);
        let core = rc.core(0);
        let (p, dropped) = probe();
        let r = core.alloc(p);
        let w = Ref::downgrade(&r).unwrap();
        assert!(
            Ref::downgrade(&r).is_none(),
            "one weak reference per object"
        );
        assert!(w.refers_to(&r));
        core.put(r).unwrap();
        // Flush only (no review): zero, queued, dying.
        rc.inner().slots[0]
            .state
            .lock_with(|st| rc.inner().flush_locked(0, st));
        // SAFETY: the cell lives while its `Weak` does.
        let word = |w: &Weak<Probe>| unsafe { w.cell.as_ref() }.word.load(SeqCst);
        assert_eq!(word(&w) & DYING, DYING);
        let revived = core.tryget(&w).unwrap().expect("not freed yet");
        assert_eq!(word(&w) & DYING, 0, "revived: no longer dying");
        for _ in 0..6 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 0, "revived");
        assert!(!w.is_freed());
        core.put(revived).unwrap();
        for _ in 0..6 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
        assert!(w.is_freed());
        assert!(core.tryget(&w).unwrap().is_none());
    }

    #[test]
    fn a_weak_dropped_first_does_not_keep_the_object_and_can_be_rebound() {
        let rc = eager(1, 4);
        let core = rc.core(0);
        let (p, dropped) = probe();
        let r = core.alloc(p);
        drop(Ref::downgrade(&r).unwrap());
        let w = Ref::downgrade(&r).expect("the first weak is gone");
        drop(w);
        core.put(r).unwrap();
        for _ in 0..4 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
    }

    #[test]
    fn try_alloc_with_weak_is_alloc_then_downgrade() {
        let rc = eager(1, 4);
        let core = rc.core(0);
        let (p, dropped) = probe();
        let (r, w) = core.try_alloc_with_weak(p).ok().expect("memory");
        assert!(Ref::downgrade(&r).is_none(), "the weak is bound");
        let r2 = core.tryget(&w).unwrap().expect("alive");
        core.put(r2).unwrap();
        core.put(r).unwrap();
        for _ in 0..4 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
        assert!(w.is_freed());
        assert!(core.tryget(&w).unwrap().is_none());
        drop(w);
        assert_eq!(rc.stats().live_objects, 0);
    }

    #[test]
    fn a_core_refuses_handles_of_another_refcache() {
        let a = eager(1, 4);
        let b = eager(1, 4);
        let ca = a.core(0);
        let cb = b.core(0);
        let (p, dropped) = probe();
        let r = ca.alloc(p);
        let w = Ref::downgrade(&r).unwrap();
        assert_eq!(cb.get(&r).err(), Some(ForeignHandle("Ref")));
        assert_eq!(cb.tryget(&w).err(), Some(ForeignHandle("Weak")));
        assert!(Ref::belongs_to(&r, &a) && !Ref::belongs_to(&r, &b));
        // Refused, but given back through its own domain: freed there in time.
        assert_eq!(cb.put(r), Err(ForeignHandle("Ref")));
        for _ in 0..4 {
            ca.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
        assert!(w.is_freed());
    }

    #[test]
    fn an_idle_core_does_not_stall_epochs() {
        let rc = eager(2, 4);
        let busy = rc.core(0);
        let idle = rc.core(1);
        let (p, dropped) = probe();
        let r = busy.alloc(p);
        // The idle core holds a cached reference and never maintains.
        let held = idle.get(&r).unwrap();
        busy.put(r).unwrap();
        let start = rc.epoch();
        for _ in 0..10 {
            busy.flush();
        }
        assert!(rc.epoch() >= start + 5, "helpers flushed the idle core");
        assert_eq!(dropped.load(SeqCst), 0, "its cached reference counts");
        idle.put(held).unwrap();
        for _ in 0..10 {
            busy.flush();
        }
        assert_eq!(dropped.load(SeqCst), 1);
        drop(idle);
    }

    #[test]
    fn a_detached_core_leaves_and_its_queue_is_reviewed_by_others() {
        let rc = eager(2, 4);
        let a = rc.core(0);
        let b = rc.core(1);
        let (p, dropped) = probe();
        let r = b.alloc(p);
        b.put(r).unwrap();
        drop(b); // flushes: zero, queued, handed to the orphan queue
        for _ in 0..4 {
            a.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
        let _ = AtomicBool::new(false);
    }

    #[test]
    fn teardown_frees_queued_zeroes_and_later_last_drops() {
        let rc = eager(2, 4);
        let core = rc.core(0);
        let (p1, d1) = probe();
        let (p2, d2) = probe();
        let a = core.alloc(p1);
        let b = core.alloc(p2);
        let w = Ref::downgrade(&b).unwrap();
        core.put(a).unwrap();
        let b2 = core.get(&b).unwrap();
        core.put(b).unwrap();
        drop(core);
        drop(rc);
        assert_eq!(d1.load(SeqCst), 1, "a queued zero is freed at teardown");
        assert_eq!(d2.load(SeqCst), 0);
        assert!(!w.is_freed());
        drop(b2); // the last reference, after the domain's handles are gone
        assert_eq!(d2.load(SeqCst), 1);
        assert!(w.is_freed());
    }

    #[test]
    fn refs_without_a_core_count_through_the_global_count() {
        let rc = eager(1, 4);
        let core = rc.core(0);
        let (p, dropped) = probe();
        let r = core.alloc(p);
        let clones: Vec<_> = (0..5).map(|_| r.clone()).collect();
        drop(clones);
        drop(r); // zero: queued on the orphan queue
        for _ in 0..4 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
    }

    #[test]
    fn into_raw_and_from_raw_keep_a_bare_count() {
        let rc = eager(1, 4);
        let core = rc.core(0);
        let (p, dropped) = probe();
        let r = core.alloc(p);
        let raw = Ref::into_raw(core.get(&r).unwrap());
        core.put(r).unwrap();
        for _ in 0..4 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 0);
        // SAFETY: from the `into_raw` above, taken back once.
        core.put(unsafe { Ref::from_raw(raw) }).unwrap();
        for _ in 0..4 {
            core.synchronize();
        }
        assert_eq!(dropped.load(SeqCst), 1);
    }
}
