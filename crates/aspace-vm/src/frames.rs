//! The frame allocator: 4 KiB frames of real memory carved out of one `MAP_NORESERVE`
//! reservation, handed out through per-core caches.
//!
//! # Algorithm
//!
//! A [`FramePool`] (one per address space, shared by every core) owns the reservation
//! (`reservation.rs`) and names its frames by index ([`Frame`]). Free frames live in two places:
//!
//! - a **high-water index** `next`: frames `next..capacity` have never been handed out. They
//!   need no zeroing (fresh anonymous memory reads as zero) and cost nothing until touched;
//! - a **global free list** (`Mutex<Vec<Frame>>`) of frames that were used and given back.
//!
//! Each core owns a [`FrameCache`] (`Send`, `!Sync`; no synchronization on its fast path): `alloc`
//! pops the most recently freed frame (LIFO, so it is likely still in the CPU cache), `free`
//! pushes. An empty cache refills `batch` frames at once, from the global free list first and
//! then from the high-water index; a cache that reaches `2 * batch` frames returns its `batch`
//! oldest to the global list. (Both are overflow-safe for any `batch`: the threshold saturates
//! and a claim never moves the high-water index past the capacity.) The global lock is therefore taken once per `batch` operations.
//!
//! **Zeroing happens on free**: `FrameCache::free` zeroes the frame before it enters any free
//! list, so every free frame (cached, global, or never used) reads as zero and `alloc` never
//! zeroes. This puts the cost on `munmap`/`madvise`, where the freeing core usually still has
//! the frame in its cache, and keeps the fault path short.
//!
//! **Exhaustion**: `alloc` returns `None` when the caller's cache is empty, the global free
//! list is empty and the high-water index reached the capacity. Other cores' caches are not
//! raided: up to `2 * batch` free frames per attached core (and `batch` is the configured
//! `frame_batch`, 64 by default) can sit unused while one core sees `None`. A detaching core
//! `drain`s its cache back to the global list. So a space of `n` frames serves at least
//! `n - cores * 2 * batch` pages at once, all `n` when one core does all the work.
//!
//! **Accounting**: `in_use()` is exact whenever no alloc/free/drain is in flight. Each cache
//! keeps a signed count of frames it allocated minus frames it freed (a frame allocated on one
//! core and freed on another makes one count positive and the other negative), published by
//! its owner with a plain `Relaxed` store into its own cache-padded slot (no shared cache line
//! is written on the fast path). The pool sums the registered slots plus the counts folded in
//! by caches that drained. Counters are registered lazily, on a cache's first use of the pool.
//!
//! # Invariants
//!
//! - A frame is in exactly one of: the high-water range, the global list, one cache, or in use
//!   (owned by whoever `alloc` returned it to, normally one page-table entry).
//! - Every frame in a free list, and every frame at or above the high-water index, reads as
//!   zero.
//! - `in_use() == Σ(alloc) - Σ(free)` over all caches, exactly when nothing is in flight.
//!
//! # Safety contract with the rest of the crate
//!
//! [`FramePool::ptr`] gives out raw pointers into the reservation; frames are plain memory that
//! the access path reads and writes through them. `free` (which writes zeroes into the frame)
//! must only be called once no page-table entry and no soft TLB can still lead a core to the
//! frame: after the PTE is cleared and the shootdown returned (`shootdown.rs`). Every
//! dereference of a frame pointer elsewhere is justified by that protocol.
//!
//! Per-core free-frame caches refilled in batches are the usual per-CPU page lists (Linux's
//! pcp lists; RadixVM, EuroSys'13, §4 allocates physical pages per core).
//!
//! The pool's atomics are `std`'s in both builds (`--cfg loom` included): a bump index and
//! statistics counters whose correctness rests on RMW uniqueness and on the callers'
//! synchronization, not on a protocol worth model-checking; no loom model builds a pool.
//!
//! Frames that more than one owner holds (page-cache pages, `file.rs`) are counted: the pool
//! keeps one reference count per frame (`frames/refs.rs`), untouched for exclusive frames.
//!
//! Not for: page-table memory (boxed tables), or returning memory to the kernel.

use crate::error::{Limit, VmError};
use crate::reservation::Reservation;
use crate::sync::stat::{AtomicI64, AtomicU64, Mutex};
use crate::types::PAGE_SIZE;
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod refs;
pub(crate) use refs::FrameRefs;

/// One 4 KiB frame of the pool, named by its index in the reservation.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub(crate) struct Frame(u32);

impl Frame {
    /// The frame with this index (the page-table entry format stores the index).
    pub(crate) const fn from_index(index: u32) -> Frame {
        Frame(index)
    }

    /// Its index in the pool.
    pub(crate) const fn index(self) -> u32 {
        self.0
    }
}

/// A cache's published count of frames it allocated minus frames it freed.
type InUseCounter = CachePadded<AtomicI64>;

/// The global frame pool of one address space. `Sync`: every core's cache uses it.
pub(crate) struct FramePool {
    memory: Reservation,
    /// Number of frames in the reservation.
    capacity: u64,
    /// Frames moved between a cache and the global list at once.
    batch: usize,
    /// A cache holding this many frames spills `batch` of them: `2 * batch`, saturated (any
    /// `batch` is accepted here; `Config` bounds the configured one).
    spill_at: usize,
    /// Frames `next..capacity` were never handed out; never above `capacity` (`bump`).
    next: CachePadded<AtomicU64>,
    /// Used frames given back (all zeroed).
    free: CachePadded<Mutex<Vec<Frame>>>,
    /// Every live cache's slot (registered on first use, removed at drain).
    caches: Mutex<Vec<Arc<InUseCounter>>>,
    /// Counts folded in by caches that drained. Only changed under `caches`' lock.
    retired: AtomicI64,
    /// Reference counts of the frames more than one owner holds (`frames/refs.rs`).
    refs: FrameRefs,
    /// Frames taken by `alloc_direct` minus frames given back by `free_direct`.
    direct: AtomicI64,
}

impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePool")
            .field("capacity", &self.capacity)
            .field("batch", &self.batch)
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl FramePool {
    /// A pool of `memory / 4096` frames (rounded down), moving `batch` frames at a time between
    /// caches and the global list (`batch` 0 is treated as 1; any larger value is safe: the
    /// arithmetic that depends on it saturates or is bounded by the capacity).
    ///
    /// # Errors
    /// [`VmError::OutOfMemory`]`(`[`Limit::Frames`]`)` when the reservation fails, when `memory`
    /// holds no whole frame, or when it holds more frames than a 32-bit index can name (16 TiB).
    pub(crate) fn new(memory: u64, batch: usize) -> Result<FramePool, VmError> {
        let capacity = memory / PAGE_SIZE;
        if capacity == 0 || capacity > u64::from(u32::MAX) {
            return Err(VmError::OutOfMemory(Limit::Frames));
        }
        let bytes = usize::try_from(capacity * PAGE_SIZE)
            .map_err(|_| VmError::OutOfMemory(Limit::Frames))?;
        let memory = Reservation::reserve(bytes).ok_or(VmError::OutOfMemory(Limit::Frames))?;
        let refs = FrameRefs::new(capacity).ok_or(VmError::OutOfMemory(Limit::Frames))?;
        Ok(FramePool {
            memory,
            capacity,
            batch: batch.max(1),
            spill_at: batch.max(1).saturating_mul(2),
            next: CachePadded::new(AtomicU64::new(0)),
            free: CachePadded::new(Mutex::new(Vec::new())),
            caches: Mutex::new(Vec::new()),
            retired: AtomicI64::new(0),
            refs,
            direct: AtomicI64::new(0),
        })
    }

    /// A zeroed frame taken without a cache (file I/O on a caller's thread, `memory.rs`): from
    /// the global list, else a never-used one; `None` when both are empty. One lock per call;
    /// counted in [`FramePool::in_use`] at once.
    pub(crate) fn alloc_direct(&self) -> Option<Frame> {
        #[cfg(all(test, not(loom)))]
        if crate::fault_inject::FRAME_ALLOC.fails() {
            return None;
        }
        let f = self.free.lock().pop().or_else(|| {
            let fresh = self.bump(1);
            (!fresh.is_empty()).then_some(Frame(fresh.start))
        })?;
        // Relaxed: a count read as a snapshot by `in_use` (as the caches' slots).
        self.direct.fetch_add(1, Ordering::Relaxed);
        Some(f)
    }

    /// Gives `f`, taken with [`FramePool::alloc_direct`] or by a cache, back to the global list
    /// (zeroed first), where every core's next refill can take it. The caller guarantees what
    /// `FrameCache::free` requires: freed once, nothing can reach it any more.
    pub(crate) fn free_direct(&self, f: Frame) {
        zero(self, f);
        self.free.lock().push(f);
        // Relaxed: as in `alloc_direct`.
        self.direct.fetch_sub(1, Ordering::Relaxed);
    }

    /// The reference counts of shared frames.
    #[inline]
    pub(crate) fn refs(&self) -> &FrameRefs {
        &self.refs
    }

    /// Frames in the pool.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Frames currently allocated (returned by `alloc` and not yet freed). Exact whenever no
    /// `alloc`, `free` or `drain` is in flight; a snapshot otherwise.
    pub(crate) fn in_use(&self) -> u64 {
        let caches = self.caches.lock();
        let live: i64 = caches.iter().map(|s| s.load(Ordering::Relaxed)).sum();
        let total =
            self.retired.load(Ordering::Relaxed) + self.direct.load(Ordering::Relaxed) + live;
        u64::try_from(total).unwrap_or(0)
    }

    /// Start of frame `f`'s 4 KiB. Dereferencing it is the caller's business: see the module
    /// doc's safety contract.
    #[inline]
    pub(crate) fn ptr(&self, f: Frame) -> *mut u8 {
        debug_assert!(u64::from(f.0) < self.capacity, "frame {f:?} out of range");
        // Widening u32 -> usize; the product is below the reservation's length.
        let offset = f.0 as usize * PAGE_SIZE as usize;
        debug_assert!(offset < self.memory.len());
        self.memory.base().wrapping_add(offset)
    }

    /// Runs `f` while this thread holds both locks of the pool (the global free list, then the
    /// caches' registry, the order `drain` takes them in), for the fork test
    /// (`AddressSpace::hold_pool_locks_for_testing`).
    #[cfg(not(loom))]
    pub(crate) fn with_locks_held<R>(&self, f: impl FnOnce() -> R) -> R {
        let _free = self.free.lock();
        let _caches = self.caches.lock();
        f()
    }

    /// Claims up to `n` never-used frames from the high-water index.
    ///
    /// A compare-and-swap that never moves `next` past `capacity`, whatever `n`: a `fetch_add`
    /// of `n` overshoots by up to `n` per concurrent refill, and with a batch of 2^62 four
    /// refills that all passed the capacity check wrapped the counter to 0 and handed the same
    /// frames out again. The refill path is cold (once per `batch` allocations), so the CAS
    /// costs nothing measurable.
    fn bump(&self, n: usize) -> std::ops::Range<u32> {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        // Relaxed (load and CAS): `next` only hands out distinct indices (each successful CAS
        // claims `cur..end` from the value it replaced, and the RMWs of `next` are totally
        // ordered); the frames' contents are the kernel's zeroes and need no publication.
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            if cur >= self.capacity {
                return 0..0;
            }
            // `cur < capacity <= u32::MAX`, so neither the sum nor the casts overflow.
            let end = cur + n.min(self.capacity - cur);
            match self
                .next
                .compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return cur as u32..end as u32,
                Err(now) => cur = now,
            }
        }
    }

    /// Frames never handed out yet (for tests and diagnostics).
    #[cfg(all(test, not(loom)))]
    fn untouched(&self) -> u64 {
        self.capacity
            .saturating_sub(self.next.load(Ordering::Relaxed))
    }

    fn register(&self) -> Arc<InUseCounter> {
        let slot = Arc::new(CachePadded::new(AtomicI64::new(0)));
        self.caches.lock().push(Arc::clone(&slot));
        slot
    }
}

/// One core's free-frame cache. `Send` (it travels with its handle) but `!Sync`.
pub(crate) struct FrameCache {
    frames: Vec<Frame>,
    /// Frames allocated through this cache minus frames freed through it.
    outstanding: i64,
    /// Where `outstanding` is published for `FramePool::in_use` (None until first use).
    slot: Option<Arc<InUseCounter>>,
    /// The pool it was first used with (address, for a debug check that it never changes).
    pool_id: usize,
    _not_sync: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for FrameCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameCache")
            .field("cached", &self.frames.len())
            .field("outstanding", &self.outstanding)
            .finish()
    }
}

impl Default for FrameCache {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameCache {
    /// An empty cache, not yet tied to a pool.
    pub(crate) fn new() -> FrameCache {
        FrameCache {
            frames: Vec::new(),
            outstanding: 0,
            slot: None,
            pool_id: 0,
            _not_sync: PhantomData,
        }
    }

    /// Frames sitting in this cache.
    #[allow(dead_code)] // diagnostics; the engine does not read it yet
    pub(crate) fn cached(&self) -> usize {
        self.frames.len()
    }

    /// The slot, registering with `pool` on first use.
    #[inline]
    fn publish(&mut self, pool: &FramePool) {
        let slot = match &self.slot {
            Some(slot) => {
                debug_assert_eq!(
                    self.pool_id, pool as *const FramePool as usize,
                    "a FrameCache used with two pools"
                );
                slot
            }
            None => {
                self.pool_id = pool as *const FramePool as usize;
                self.slot.insert(pool.register())
            }
        };
        // Relaxed: a counter read by `in_use` as a snapshot; exactness "when nothing is in
        // flight" comes from whatever synchronization made the caller's alloc/free finish
        // before the reader's call.
        slot.store(self.outstanding, Ordering::Relaxed);
    }

    /// A zeroed frame, or `None` when the pool is exhausted (this cache, the global list and
    /// the never-used frames are all empty; other cores' caches are not raided).
    #[inline]
    pub(crate) fn alloc(&mut self, pool: &FramePool) -> Option<Frame> {
        #[cfg(all(test, not(loom)))]
        if crate::fault_inject::FRAME_ALLOC.fails() {
            return None;
        }
        if self.frames.is_empty() && !self.refill(pool) {
            return None;
        }
        let f = self.frames.pop()?;
        self.outstanding += 1;
        self.publish(pool);
        Some(f)
    }

    /// Gives `f` back: zeroes it and keeps it for this core's next `alloc`.
    ///
    /// The caller guarantees `f` came from `pool`, is freed once, and that no page-table entry
    /// or soft TLB can lead any core to it any more (its PTE was cleared and the shootdown
    /// returned).
    #[inline]
    pub(crate) fn free(&mut self, pool: &FramePool, f: Frame) {
        zero(pool, f);
        self.frames.push(f);
        self.outstanding -= 1;
        if self.frames.len() >= pool.spill_at {
            self.spill(pool);
        }
        self.publish(pool);
    }

    /// `free` for every frame of `frames`, which is left empty (the unmap path's batch).
    pub(crate) fn free_all(&mut self, pool: &FramePool, frames: &mut Vec<Frame>) {
        for f in frames.drain(..) {
            self.free(pool, f);
        }
    }

    /// Returns every cached frame to the global list and folds this cache's count into the
    /// pool (at detach). The cache can be used again afterwards (it re-registers).
    pub(crate) fn drain(&mut self, pool: &FramePool) {
        if !self.frames.is_empty() {
            pool.free.lock().append(&mut self.frames);
        }
        if let Some(slot) = self.slot.take() {
            debug_assert_eq!(self.pool_id, pool as *const FramePool as usize);
            let mut caches = pool.caches.lock();
            // Relaxed: read and updated under `caches`' lock, like `in_use`'s reads.
            pool.retired.fetch_add(self.outstanding, Ordering::Relaxed);
            caches.retain(|s| !Arc::ptr_eq(s, &slot));
        }
        self.outstanding = 0;
    }

    /// Takes a batch from the global list, topped up from the never-used frames.
    #[cold]
    fn refill(&mut self, pool: &FramePool) -> bool {
        let want = pool.batch;
        {
            let mut free = pool.free.lock();
            let take = free.len().min(want);
            let at = free.len() - take;
            self.frames.extend(free.drain(at..));
        }
        if self.frames.len() < want {
            let fresh = pool.bump(want - self.frames.len());
            // Reverse, so that LIFO pops hand out ascending indices (sequential touching of
            // the reservation).
            self.frames.extend(fresh.rev().map(Frame));
        }
        !self.frames.is_empty()
    }

    /// Returns the `batch` oldest cached frames to the global list.
    #[cold]
    fn spill(&mut self, pool: &FramePool) {
        let n = pool.batch.min(self.frames.len());
        pool.free.lock().extend(self.frames.drain(..n));
    }
}

impl Drop for FrameCache {
    fn drop(&mut self) {
        // A cache dropped without `drain` strands its frames (they stay reserved memory of the
        // pool, neither free nor counted in use). The engine drains at detach.
        debug_assert!(
            self.frames.is_empty() || std::thread::panicking(),
            "FrameCache dropped with {} frames: call drain(pool) at detach",
            self.frames.len()
        );
    }
}

/// Zeroes frame `f`.
#[inline]
fn zero(pool: &FramePool, f: Frame) {
    // SAFETY: `pool.ptr(f)` is the start of frame `f`'s 4096 bytes inside the live reservation
    // (`f` came from this pool, so its index is below `capacity`). The caller of `free`
    // guarantees no core can reach the frame any more (PTE cleared, shootdown returned), so no
    // other access to these bytes runs concurrently.
    unsafe { std::ptr::write_bytes(pool.ptr(f), 0, PAGE_SIZE as usize) };
}

#[cfg(all(test, not(loom)))]
mod fault_injection_tests;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn fill_frame(pool: &FramePool, f: Frame, byte: u8) {
        // SAFETY: the test owns `f` (allocated, not freed) and nobody else accesses it.
        unsafe { std::ptr::write_bytes(pool.ptr(f), byte, PAGE_SIZE as usize) };
    }

    fn frame_is_zero(pool: &FramePool, f: Frame) -> bool {
        // SAFETY: the test owns `f`; the slice covers exactly its 4096 bytes.
        let bytes = unsafe { std::slice::from_raw_parts(pool.ptr(f), PAGE_SIZE as usize) };
        bytes.iter().all(|&b| b == 0)
    }

    #[test]
    fn pool_of_n_frames_gives_exactly_n_distinct_frames_then_none() {
        let pool = FramePool::new(40 * PAGE_SIZE + 100, 8).unwrap();
        assert_eq!(pool.capacity(), 40);
        let mut cache = FrameCache::new();
        let mut seen = HashSet::new();
        for _ in 0..40 {
            let f = cache.alloc(&pool).expect("frame");
            assert!(seen.insert(f), "frame {f:?} handed out twice");
            assert!(frame_is_zero(&pool, f));
        }
        assert_eq!(cache.alloc(&pool), None);
        assert_eq!(cache.alloc(&pool), None, "exhaustion is stable, no crash");
        assert_eq!(pool.in_use(), 40);
        for f in seen {
            cache.free(&pool, f);
        }
        assert_eq!(pool.in_use(), 0);
        cache.drain(&pool);
    }

    #[test]
    fn reused_frame_reads_as_zero() {
        let pool = FramePool::new(4 * PAGE_SIZE, 1).unwrap();
        let mut a = FrameCache::new();
        let mut b = FrameCache::new();
        let mut held = Vec::new();
        for _ in 0..4 {
            let f = a.alloc(&pool).unwrap();
            fill_frame(&pool, f, 0xAB);
            held.push(f);
        }
        assert_eq!(a.alloc(&pool), None);
        for f in held.drain(..) {
            a.free(&pool, f);
        }
        a.drain(&pool);
        // Another core gets the recycled frames through the global list: all zero.
        for _ in 0..4 {
            let f = b.alloc(&pool).expect("recycled frame");
            assert!(frame_is_zero(&pool, f), "recycled frame {f:?} not zeroed");
            held.push(f);
        }
        assert_eq!(b.alloc(&pool), None);
        for f in held {
            b.free(&pool, f);
        }
        b.drain(&pool);
    }

    #[test]
    fn in_use_counts_frames_allocated_on_one_core_and_freed_on_another() {
        let pool = FramePool::new(1024 * PAGE_SIZE, 4).unwrap();
        let mut a = FrameCache::new();
        let mut b = FrameCache::new();
        let frames: Vec<Frame> = (0..100).map(|_| a.alloc(&pool).unwrap()).collect();
        assert_eq!(pool.in_use(), 100);
        for &f in &frames[..60] {
            b.free(&pool, f);
        }
        assert_eq!(pool.in_use(), 40);
        // Caches hold at most 2 * batch frames; the rest went back to the global list.
        assert!(b.cached() < 2 * 4);
        b.drain(&pool);
        assert_eq!(pool.in_use(), 40, "drain keeps the count exact");
        for &f in &frames[60..] {
            a.free(&pool, f);
        }
        assert_eq!(pool.in_use(), 0);
        a.drain(&pool);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn refill_prefers_recycled_frames_over_untouched_ones() {
        let pool = FramePool::new(1024 * PAGE_SIZE, 2).unwrap();
        let mut a = FrameCache::new();
        // The first refill takes a batch of 2 never-used frames.
        let f = a.alloc(&pool).unwrap();
        assert_eq!(pool.untouched(), 1022);
        a.free(&pool, f);
        a.drain(&pool); // 2 recycled frames in the global list
        let mut b = FrameCache::new();
        assert_eq!(
            b.alloc(&pool),
            Some(f),
            "the most recently freed frame first"
        );
        assert_eq!(
            pool.untouched(),
            1022,
            "refilled from the recycled frames only"
        );
        let g = b.alloc(&pool).unwrap();
        assert_ne!(g, f);
        assert_eq!(pool.untouched(), 1022);
        // Only now does a refill touch new frames.
        let h = b.alloc(&pool).unwrap();
        assert_eq!(pool.untouched(), 1020);
        for x in [f, g, h] {
            b.free(&pool, x);
        }
        b.drain(&pool);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn a_batch_near_usize_max_allocates_and_frees_without_overflow() {
        // `free` compared the cache with `2 * batch`, which overflows (a panic under overflow
        // checks, the `ci` profile; a wrapped threshold in release).
        let pool = FramePool::new(64 * PAGE_SIZE, usize::MAX).unwrap();
        let mut cache = FrameCache::new();
        let frames: Vec<Frame> = (0..64)
            .map(|_| cache.alloc(&pool).expect("frame"))
            .collect();
        assert_eq!(cache.alloc(&pool), None);
        assert_eq!(pool.in_use(), 64);
        for f in frames {
            cache.free(&pool, f);
        }
        assert_eq!(pool.in_use(), 0);
        cache.drain(&pool);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn a_claim_of_a_huge_batch_never_moves_the_high_water_index_past_the_capacity() {
        // A `fetch_add` of the batch left `next` 2^62 past the capacity after one refill; four
        // refills that passed the capacity check together wrapped it to 0, and the next refill
        // handed frames 0.. out a second time.
        let pool = FramePool::new(64 * PAGE_SIZE, 1 << 62).unwrap();
        let mut cache = FrameCache::new();
        let f = cache.alloc(&pool).unwrap();
        assert_eq!(pool.next.load(Ordering::Relaxed), pool.capacity());
        assert_eq!(pool.untouched(), 0);
        for _ in 0..4 {
            assert_eq!(pool.bump(1 << 62), 0..0);
            assert_eq!(pool.bump(usize::MAX), 0..0);
        }
        assert_eq!(pool.next.load(Ordering::Relaxed), pool.capacity());
        cache.free(&pool, f);
        cache.drain(&pool);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn concurrent_claims_of_huge_batches_hand_out_each_frame_once() {
        const THREADS: usize = 4;
        let pool = FramePool::new(64 * PAGE_SIZE, 1 << 62).unwrap();
        let start = std::sync::Barrier::new(THREADS);
        let claimed: Vec<std::ops::Range<u32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        let mut got = Vec::new();
                        for _ in 0..4 {
                            got.push(pool.bump(1 << 62));
                        }
                        got
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let mut seen = HashSet::new();
        for r in claimed {
            for i in r {
                assert!(seen.insert(i), "frame {i} claimed twice");
            }
        }
        assert_eq!(seen.len(), 64, "every frame claimed once");
        assert_eq!(pool.next.load(Ordering::Relaxed), pool.capacity());
    }

    #[test]
    fn pool_larger_than_u32_frames_is_refused() {
        assert_eq!(
            FramePool::new((u64::from(u32::MAX) + 1) * PAGE_SIZE, 64).unwrap_err(),
            VmError::OutOfMemory(Limit::Frames)
        );
        assert_eq!(
            FramePool::new(PAGE_SIZE - 1, 64).unwrap_err(),
            VmError::OutOfMemory(Limit::Frames)
        );
    }

    #[test]
    fn concurrent_caches_never_share_a_frame_and_balance_to_zero() {
        const THREADS: usize = 4;
        const ROUNDS: usize = 2_000;
        let pool = FramePool::new(256 * PAGE_SIZE, 4).unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let pool = &pool;
                s.spawn(move || {
                    let mut cache = FrameCache::new();
                    let mut held: Vec<Frame> = Vec::new();
                    let tag = t as u8 + 1;
                    for i in 0..ROUNDS {
                        if i % 3 != 2 {
                            if let Some(f) = cache.alloc(pool) {
                                assert!(frame_is_zero(pool, f), "allocated frame not zero");
                                fill_frame(pool, f, tag);
                                held.push(f);
                            }
                        } else if let Some(f) = held.pop() {
                            // SAFETY: `f` is owned by this thread; nobody else writes it.
                            let b = unsafe { *pool.ptr(f).add(100) };
                            assert_eq!(b, tag, "another thread wrote our frame");
                            cache.free(pool, f);
                        }
                        if held.len() > 40 {
                            for f in held.drain(..) {
                                cache.free(pool, f);
                            }
                        }
                    }
                    for f in held {
                        cache.free(pool, f);
                    }
                    cache.drain(pool);
                });
            }
        });
        assert_eq!(pool.in_use(), 0);
    }
}
