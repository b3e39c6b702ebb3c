//! TLB shootdown: the protocol that makes "unmapped" mean unmapped for every core's soft TLB.
//!
//! This is the crate's written shootdown contract (RadixVM, EuroSys'13, §3.3-3.4 for the
//! targeted variant): **before `munmap`, an `mprotect` that removes rights, or
//! `madvise(DONTNEED)` returns, and before any frame it took away is reused, no core can use a
//! stale translation**: no access that is still running may be using it, and no access that
//! starts later can find it in a TLB or in the page tables.
//!
//! # The protocol (a QSBR grace period restricted to the target cores)
//!
//! Every registered core owns a [`ShootdownSlot`] with two counters:
//! - `access`: odd while the core is inside an access (`read`/`write`/`touch`), even otherwise;
//!   only the core writes it.
//! - `request`: the number of flush requests ever sent to the core; shooters bump it.
//! - `ack`: the last request count the core flushed for (or started from at registration);
//!   only the core writes it.
//!
//! Core side, around every access ([`Shootdown::begin_access`], [`Shootdown::end_access`]):
//!
//! ```text
//! begin:  access := access + 1 (odd)         Release store
//!         F2: fence(SeqCst)
//!         r := request                        Acquire load
//!         if r != seen { flush TLB; seen := r; ack := r (Release store) }
//!         ... translate (TLB, else page-table walk + TLB insert), copy bytes ...
//! end:    access := access + 1 (even)        Release store
//! ```
//!
//! Shooter side ([`Shootdown::shootdown`]), after the caller cleared the page-table entries:
//!
//! ```text
//!         F1: fence(SeqCst)
//!         for each registered target c:  c.request += 1            (Release RMW)
//!         F3: fence(SeqCst)
//!         for each registered target c:  a := c.access (Acquire);
//!                                        if a is odd: t := c.request (Relaxed, >= our bump);
//!                                            wait until c.access != a or c.ack >= t (Acquire)
//! ```
//!
//! The caller frees the frames (or reuses them) only after `shootdown` returns.
//!
//! # Why it is correct (the Dekker argument)
//!
//! Take a core `c` and one shootdown. The core's F2 and the shooter's F3 are both SeqCst fences,
//! so one precedes the other in the single total order S of SeqCst operations (C++ [atomics.order]:
//! for a store W sequenced before fence X and a load R sequenced after fence Y, X before Y in S
//! means R observes W or a later store).
//! - **F3 before F2**: the bump (before F3) is visible to the core's `request` load (after F2),
//!   so the core flushes its TLB before translating anything, and — through the same fence pair
//!   (and the Release bump / Acquire load) — the caller's PTE clears, sequenced before the bump,
//!   are visible to its page-table walks. The access cannot find the old translation.
//! - **F2 before F3**: the odd `access` store (before F2) is visible to the shooter's load (after
//!   F3), so the shooter sees the access (or a later value of the counter) and waits until the
//!   counter moves on. The end of the access is a Release store that the shooter's wait loop
//!   reads with Acquire, so everything the access did (its frame reads and writes) happens
//!   before `shootdown` returns, hence before the frame's reuse.
//! - Every access of `c` whose `begin` store comes after the value the shooter read is in the
//!   first case (its F2 is after F3 in S, because the shooter's load did not observe that store).
//! - The core may also read the bump *early* (F2 before F3 in S, the load just happened to see
//!   it). It then records the bump in `seen`, so no later access will flush for it: its walks in
//!   this access must already see the cleared PTEs, or it would cache a stale translation and use
//!   it after the shooter returned. The fences do not give that here; the Acquire `request` load
//!   reading the Release bump does (the shooter's F1 alone also makes the bump a release).
//! - The wait also ends when `ack >= t` (`t`, read after our bump, is our bump or a later one):
//!   the core then read a request count `>= t` in some `begin` (or at registration) and flushed
//!   (a new core's TLB is empty). That load is Acquire and read our Release bump or a later RMW
//!   of its release sequence, so the core's walks after it see the PTE clears; its TLB holds no
//!   entry older than it; and every access before it ended before the `ack` store (program
//!   order), which is Release and read by our Acquire load, so those accesses happen before we
//!   return. The window we saw may be the one whose `begin` acknowledged (it read our bump
//!   although its odd store is what our load after F3 read: reading a store that follows the
//!   load's fence in S is allowed); without `ack` we would wait for that window to end even
//!   though it holds nothing stale. For a per-call access that costs one access at most; for
//!   a session (below) it was unbounded, and loom found it.
//! - The shooter's wait ends when it reads *any* later value of `access`, possibly the next
//!   access's odd `begin` store instead of the awaited `end` store. Since C++20 a release
//!   sequence no longer continues through later plain stores of the same thread, so the `begin`
//!   store is itself Release (free on x86): reading it still synchronizes with the end of the
//!   awaited access.
//!
//! Without the two fences both loads may read the old values (store buffering: x86 lets a load
//! pass an earlier store to another location), the core would use its stale entry while the
//! shooter, seeing `access` even, returned and the caller reused the frame. The loom models
//! (`shootdown/loom_tests.rs`) fail when any fence is removed, the wait or the request check is
//! dropped, the `end`/`begin` stores or the `request` load are made Relaxed (each tried; the
//! Release `begin` store was in fact found by loom). Only making the bump Relaxed passes, because
//! F1 before it is a release fence.
//!
//! **Idle cores never block**: a core outside an access has an even counter; the shooter bumps
//! its request and moves on. The bump makes the idle core flush its TLB at its next
//! `begin_access`. **The shooter's own core** is not inside an access while it runs `munmap`
//! (precondition), so it is not waited for; its request is bumped like any other target's, so its
//! own TLB is flushed at its next access. Two shooters at once only bump each other's requests.
//!
//! **Registration** races with shootdowns by a second Dekker pair: the core sets its bit in the
//! `registered` bitmap and then, in its first `begin_access`, executes F2 before walking the page
//! tables; the shooter clears PTEs, executes F1 and reads the bitmap. Either the shooter sees the
//! bit (and treats the core as above) or F1 precedes F2 and the core's walk sees the cleared
//! PTEs. A new core starts with an empty TLB, so it has nothing stale to flush. **Unregistering**
//! clears the bit with Release after the core's last `end_access`; a shooter that reads the bit
//! cleared (Acquire) therefore also sees that core's last access finished.
//!
//! # Sessions: one window for many accesses, requests taken at safe points
//!
//! A session (`session.rs`, the public `Session`) keeps one core's window open across many
//! accesses, as a QEMU vCPU takes cross-CPU flushes at safe points instead of fencing every
//! access. The core side is the protocol above with `begin` done once and the per-access fence
//! replaced by a check of the core's own request word:
//!
//! ```text
//! open:    begin
//! access:  if request != seen (Relaxed load)                  [`requested`]
//!              renew: end; begin (flushes, acks)              [`Shootdown::renew`]
//!          translate (TLB, else walk), copy
//! fault:   end; the design's fault handler (locks); begin     (the session steps out)
//! poll():  the access's first line alone
//! close:   end
//! ```
//!
//! Safety: a session is a sequence of windows, each opened by `begin` and closed by `end`
//! exactly as above, so the argument above applies to each window unchanged: a shooter that
//! saw a window's odd value returns only once that window ended (Release `end`, after every
//! frame access of the window) or the core acknowledged its request (Release `ack`, after a
//! flush), and a window opened after the shooter's F3 reads the bump and flushes. The relaxed
//! check weakens nothing: a stale value only *delays* the `renew` that lets a waiting shooter
//! go. When it sees the bump, `renew`'s `begin` reads the request again (Acquire, after F2): by
//! coherence it reads the bump or a later value, so it flushes, acknowledges and synchronizes
//! with the bump's Release (the PTE clears are visible to the new window's walks).
//!
//! Liveness, the latency contract: a shooter waits for a session at most until the session's
//! first check (access or `poll()`) that reads the shooter's bump, plus the rest of that one
//! access: that check renews, whose `end` and `ack` each release the shooter. A window whose
//! `begin` already took the bump has acknowledged it, so the shooter does not wait for it at
//! all (the `ack` case above; without `ack` such a window would hold the shooter until the
//! session stepped out or closed, however often it polled: loom's
//! `loom_a_polling_session_releases_the_shooter_at_its_next_poll` deadlocked). A session that
//! neither accesses nor polls holds every shooter that targets it; an idle core (no session,
//! no access) is never waited for.
//!
//! # Cost
//!
//! `begin_access` is one store, one fence and one load on the core's own cache line (plus a
//! relaxed load of its own counter); `end_access` is one load and one store. On x86-64 the fence
//! is a `lock or`, which costs a little more than a compiler-only fence on every access. The
//! alternative that aspace-rcu uses — a compiler fence on the core side and
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` in the shooter between the bumps and the
//! `access` loads (the forced barrier splits each core's program at a point that plays F2's
//! role, exactly as in aspace-rcu's memb flavor) — would be correct, but it moves the cost to
//! every shootdown: a `membarrier` system call costs hundreds of nanoseconds on an idle machine
//! and microseconds once other threads run, against one shootdown per `munmap` in workloads whose
//! whole `munmap` costs well under a microsecond. The fence stays.
//!
//! # Targets
//!
//! A space's [`ShootdownPolicy`] (fixed at build, the design's choice) decides whom a round
//! targets. **Broadcast** ([`Targets::All`], the `coarse` design, like Linux's IPI to every CPU
//! of the `mm`): every registered core. **Targeted** ([`Targets::Cores`], RadixVM §3.4): only the
//! cores that may have cached a removed translation, read from a record the page tables keep
//! (`page_table/users.rs`): every leaf table has a users mask, and a core's page-table walk on
//! the access path sets the core's bit (`c % USER_BITS`, 512 bits: one per core up to 512 cores,
//! a residue class beyond) in the leaf *before* it loads the entry it will put into its TLB. The
//! shooter changes the entries, executes a SeqCst fence, and reads the masks of the leaves it
//! changed; the union, expanded to a [`CoreSet`], is the target set, and an empty set means no
//! round at all (no core ever walked those leaves, so no TLB holds their entries).
//!
//! Why that record is complete (the full argument, with the C++20 fence rules, is in
//! `users.rs`): the walker's bit store and entry load and the shooter's entry change and mask
//! load form a store-buffering pair, each side separated by a SeqCst fence, so either the
//! shooter's mask load sees the bit or the walker's entry load sees the change (and the walker
//! caches nothing stale). A core whose bit is already set skips the store and the fence only when
//! it owns the bit alone: then an earlier walk of its slot set it and executed the fence, which
//! happens before this entry load. Every translation a core holds (TLB or a multi-page access's
//! list) comes from such a walk, so a core left out of the set holds none of the removed
//! translations and can begin no access that finds one; for the cores in the set the protocol
//! above applies unchanged (registration needs no second argument: a core that registers after
//! the shooter read the masks has an empty TLB and records itself before any walk).
//!
//! The record is conservative: a leaf's bits are only set while it is linked (cleared when the
//! table is scrubbed after `free_tables`), so a core that walked a leaf once stays a target of
//! its later changes until the table is freed, and a shared bit targets its whole class. The
//! loom models of `page_table/users/` run the record against a targeted shootdown; those here
//! check that a targeted shooter waits for a target inside an access (also one in the second
//! bitmap word), neither waits for nor flushes a non-target, and that the target's next access
//! flushes.
//!
//! # Preconditions (checked in debug builds where cheap)
//!
//! - `begin_access`/`end_access` alternate per core; no access nests.
//! - A core never blocks inside an access (never takes a lock, never calls `shootdown`): a
//!   shooter holding the space's write lock may be waiting for it.
//! - The caller of `shootdown` is not inside an access and has already cleared (or downgraded)
//!   the page-table entries; it reuses frames only after `shootdown` returns.
//! - Page-table walks and TLB inserts happen only inside an access.
//!
//! Not for: page-table reclamation (that is aspace-rcu's grace periods: a core walks the tables
//! under its RCU read guard) or frame accounting (the caller frees frames after this returns).

use crate::error::VmError;
use crate::sync::stat::AtomicU64 as StatCounter;
use crate::sync::{fence, spin_wait, AtomicU64, Ordering};
use crate::tlb::Tlb;
use crossbeam_utils::{Backoff, CachePadded};
use std::sync::atomic::Ordering as StatOrdering;

/// A registered core's index into the shootdown slots (and the space's other per-core arrays).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CoreId(u32);

impl CoreId {
    /// The slot index, `0..max_cores`.
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }

    /// The id of slot `index` (tests that build core sets by hand).
    #[cfg(test)]
    pub(crate) fn for_tests(index: usize) -> CoreId {
        CoreId(u32::try_from(index).expect("slot index"))
    }
}

/// A set of cores (a plain bitset, snapshotted by the caller), for [`Targets::Cores`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CoreSet {
    words: Vec<u64>,
}

impl CoreSet {
    /// The empty set.
    pub(crate) fn new() -> CoreSet {
        CoreSet::default()
    }

    /// Adds `id`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn insert(&mut self, id: CoreId) {
        let (w, bit) = (id.index() / 64, id.index() % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << bit;
    }

    /// Takes `id` out of the set; returns whether it was in it.
    pub(crate) fn remove(&mut self, id: CoreId) -> bool {
        let (w, bit) = (id.index() / 64, id.index() % 64);
        match self.words.get_mut(w) {
            Some(x) if *x & (1 << bit) != 0 => {
                *x &= !(1 << bit);
                true
            }
            _ => false,
        }
    }

    /// Whether `id` is in the set.
    #[cfg_attr(any(not(test), loom), allow(dead_code))]
    pub(crate) fn contains(&self, id: CoreId) -> bool {
        let (w, bit) = (id.index() / 64, id.index() % 64);
        self.words.get(w).is_some_and(|x| x & (1 << bit) != 0)
    }

    /// Adds the cores `64 * w + i` for every bit `i` set in `bits`.
    pub(crate) fn or_word(&mut self, w: usize, bits: u64) {
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= bits;
    }

    /// Empties the set (keeping its memory, for a scratch set reused per shootdown).
    pub(crate) fn clear(&mut self) {
        self.words.clear();
    }

    /// Whether the set has no core.
    pub(crate) fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Bits of cores `64 * w .. 64 * w + 64`.
    fn word(&self, w: usize) -> u64 {
        self.words.get(w).copied().unwrap_or(0)
    }
}

/// How a space chooses the targets of its shootdowns (module doc, "Targets").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ShootdownPolicy {
    /// [`Targets::All`]: every registered core, like Linux's broadcast IPI (`coarse`).
    Broadcast,
    /// [`Targets::Cores`]: only the cores recorded in the users masks of the leaf tables whose
    /// entries changed (`page_table/users.rs`); no shootdown at all when that set is empty.
    Targeted,
}

/// Which cores a shootdown targets.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Targets<'a> {
    /// Every registered core (the broadcast policy).
    All,
    /// Only these cores (the targeted policy; see the module doc for what the caller must
    /// ensure).
    Cores(&'a CoreSet),
}

impl Targets<'_> {
    /// The cores `64 * w .. 64 * w + 64` it names (all of them for [`Targets::All`]).
    #[inline]
    pub(crate) fn word(&self, w: usize) -> u64 {
        match self {
            Targets::All => !0,
            Targets::Cores(set) => set.word(w),
        }
    }
}

/// One core's shootdown state (module doc).
#[derive(Debug)]
struct ShootdownSlot {
    /// Odd while the core is inside an access. Written only by the core.
    access: AtomicU64,
    /// Flush requests sent to the core; bumped by shooters.
    request: AtomicU64,
    /// The last request count the core flushed for, or started from (module doc). Written only
    /// by the core.
    ack: AtomicU64,
    /// Flushes this slot's cores performed in response (statistics; never reset, so the sum
    /// over slots counts every core that ever used the slot).
    received: StatCounter,
}

/// The shootdown slots of one address space.
pub(crate) struct Shootdown {
    slots: Box<[CachePadded<ShootdownSlot>]>,
    /// Bit `i` set while slot `i` is registered. Dense, so a shooter reads one word per 64
    /// slots instead of touching every slot's cache line. Each word has a line of its own: every
    /// `munmap` reads it, and a small heap box shares its line with whatever the allocator put
    /// beside it (the conflict audit caught a neighbour written by every operation).
    registered: Box<[CachePadded<AtomicU64>]>,
    /// Shootdowns initiated, for the protocol's own tests (which run rounds without a core).
    /// The engine counts rounds per core instead (`counters.rs`): one shared counter bumped
    /// by every round was a cache line every `munmap` of every core wrote.
    #[cfg(test)]
    sent: CachePadded<StatCounter>,
}

/// What one round of [`Shootdown::shootdown_round`] did (statistics; the calling core adds it
/// to its own counters, `counters.rs`, so counting costs no shared line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Round {
    /// Registered target cores whose flush request was bumped.
    pub(crate) targets: u64,
    /// Target cores found inside an access and waited for.
    pub(crate) waits: u64,
}

impl Shootdown {
    /// Slots for at most `max_cores` cores at once.
    pub(crate) fn new(max_cores: usize) -> Shootdown {
        assert!(
            max_cores > 0 && max_cores <= u32::MAX as usize,
            "max_cores out of range"
        );
        let slots = (0..max_cores)
            .map(|_| {
                CachePadded::new(ShootdownSlot {
                    access: AtomicU64::new(0),
                    request: AtomicU64::new(0),
                    ack: AtomicU64::new(0),
                    received: StatCounter::new(0),
                })
            })
            .collect();
        let registered = (0..max_cores.div_ceil(64))
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        Shootdown {
            slots,
            registered,
            #[cfg(test)]
            sent: CachePadded::new(StatCounter::new(0)),
        }
    }

    /// The most cores that can be registered at once.
    pub(crate) fn max_cores(&self) -> usize {
        self.slots.len()
    }

    /// Claims a free slot (the lowest). The caller starts with an empty TLB and should take
    /// `seen` from [`Shootdown::current_request`] (any value is safe: a mismatch only costs a
    /// flush of the empty TLB).
    ///
    /// # Errors
    /// [`VmError::TooManyCores`] when every slot is taken.
    pub(crate) fn register(&self) -> Result<CoreId, VmError> {
        let max = self.max_cores();
        for (w, word) in self.registered.iter().enumerate() {
            let mut cur = word.load(Ordering::Relaxed);
            loop {
                let bit = (!cur).trailing_zeros() as usize;
                let index = w * 64 + bit;
                if bit == 64 || index >= max {
                    break;
                }
                // Acquire: pairs with the Release in `unregister`, so this core sees the slot's
                // `access` as the previous owner left it (even) after its last access. The
                // registration race with shooters is ordered by the fences F1 (shooter) and F2
                // (our first `begin_access`), module doc "Registration".
                match word.compare_exchange_weak(
                    cur,
                    cur | 1 << bit,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(CoreId(index as u32)),
                    Err(now) => cur = now,
                }
            }
        }
        Err(VmError::TooManyCores(max))
    }

    /// Releases `id`'s slot. The core must not be inside an access; its TLB is discarded.
    pub(crate) fn unregister(&self, id: CoreId) {
        let slot = &self.slots[id.index()];
        debug_assert!(
            slot.access.load(Ordering::Relaxed) % 2 == 0,
            "unregister inside an access"
        );
        // Release: pairs with the Acquire bitmap loads of shooters (a shooter that sees the bit
        // cleared also sees this core's last access ended) and with the Acquire CAS of the next
        // `register` of this slot.
        let prev = self.registered[id.index() / 64]
            .fetch_and(!(1 << (id.index() % 64)), Ordering::Release);
        debug_assert!(
            prev & 1 << (id.index() % 64) != 0,
            "unregister of a free slot"
        );
    }

    /// The `seen` a core that just registered `id` starts from: the slot's request count,
    /// acknowledged (a new core's TLB is empty, so it has flushed for every request so far; a
    /// shooter that bumped the slot before may return on it, module doc).
    pub(crate) fn start(&self, id: CoreId) -> u64 {
        let slot = &self.slots[id.index()];
        // Acquire: pairs with the Release bumps (the PTE clears of a shooter we acknowledge
        // are visible to our walks).
        let r = slot.request.load(Ordering::Acquire);
        // Release: pairs with the Acquire `ack` load in a shooter's wait.
        slot.ack.store(r, Ordering::Release);
        r
    }

    /// The current flush-request count of `id`'s slot.
    pub(crate) fn current_request(&self, id: CoreId) -> u64 {
        // Relaxed: a fresh TLB is empty, so missing a concurrent bump costs nothing (the bump's
        // own ordering is established by the next `begin_access`).
        self.slots[id.index()].request.load(Ordering::Relaxed)
    }

    /// Enters an access of core `id` (module doc, "begin"). Flushes `tlb` when a shootdown was
    /// requested since `*seen`; returns whether it flushed.
    #[inline]
    pub(crate) fn begin_access(&self, id: CoreId, seen: &mut u64, tlb: &mut Tlb) -> bool {
        let slot = &self.slots[id.index()];
        // Relaxed: only this core writes `access`.
        let a = slot.access.load(Ordering::Relaxed);
        debug_assert!(a % 2 == 0, "nested begin_access");
        // Release: a shooter's wait loop may read this value without having read the previous
        // `end_access` store (it only waits for the counter to change); since C++20 a later
        // relaxed store by the same thread does not continue a release sequence, so this store
        // must itself release everything the previous access did. Pairs with the Acquire loads
        // in `shootdown`. (Its ordering before the request load is F2's job, not this one's.)
        // On x86 a Release store is a plain `mov`. Loom found this one (module doc).
        slot.access.store(a + 1, Ordering::Release);
        // F2 (SeqCst): the Dekker fence; pairs with the shooter's F3 (either our request load
        // sees its bump, or its access load sees our odd store) and, for a core's first access
        // after `register`, with the shooter's F1.
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release bump in `shootdown`: the PTE clears before the bump
        // are visible to this access's page-table walks, also when we see the bump before the
        // shooter's F3 (then `seen` absorbs it and nothing flushes later; module doc).
        let r = slot.request.load(Ordering::Acquire);
        if r != *seen {
            tlb.flush_all();
            *seen = r;
            // Release: pairs with the Acquire `ack` load in a shooter's wait: the accesses of
            // the windows before this one (ended before it) happen before that shooter returns,
            // and this core's TLB holds nothing older than request `r` from here on.
            slot.ack.store(r, Ordering::Release);
            slot.received.fetch_add(1, StatOrdering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Leaves the access of core `id` (module doc, "end").
    #[inline]
    pub(crate) fn end_access(&self, id: CoreId) {
        let slot = &self.slots[id.index()];
        // Relaxed: only this core writes `access`.
        let a = slot.access.load(Ordering::Relaxed);
        debug_assert!(a % 2 == 1, "end_access outside an access");
        // Release: pairs with the Acquire loads in `shootdown`'s wait: everything this access
        // did (frame reads/writes through translations it held) happens before the shooter
        // returns and the caller reuses the frame.
        slot.access.store(a + 1, Ordering::Release);
    }

    /// The flush-request word of `id`'s slot, for a session's per-access check
    /// ([`requested`]; module doc, "Sessions").
    #[inline]
    pub(crate) fn request_word(&self, id: CoreId) -> &AtomicU64 {
        &self.slots[id.index()].request
    }

    /// Takes a flush request inside a session (module doc, "Sessions"): ends the session's
    /// current window and begins a new one, which flushes `tlb` (and acknowledges). Returns
    /// whether it flushed. Must be called inside an access of `id`.
    #[inline(never)]
    pub(crate) fn renew(&self, id: CoreId, seen: &mut u64, tlb: &mut Tlb) -> bool {
        self.end_access(id);
        self.begin_access(id, seen, tlb)
    }

    /// Makes every targeted core drop its cached translations (module doc): bumps their flush
    /// requests, then waits for the targeted cores that are inside an access until that access
    /// ends. Cores outside an access are not waited for. Returns how many cores it waited for.
    ///
    /// The caller has already cleared or downgraded the page-table entries, is not inside an
    /// access itself, and reuses frames only after this returns.
    #[cfg_attr(not(test), allow(dead_code))] // the engine calls `shootdown_round`
    pub(crate) fn shootdown(&self, targets: Targets<'_>) -> u64 {
        self.shootdown_round(targets).waits
    }

    /// [`Shootdown::shootdown`], reporting how many cores it targeted and waited for.
    pub(crate) fn shootdown_round(&self, targets: Targets<'_>) -> Round {
        #[cfg(test)]
        self.sent.fetch_add(1, StatOrdering::Relaxed);
        // F1 (SeqCst): orders the caller's PTE clears before our reads of the bitmap; pairs with
        // F2 of a core's first access after it registered (module doc, "Registration").
        fence(Ordering::SeqCst);
        let (mut waited, mut targeted) = (0, 0);
        for (w, word) in self.registered.iter().enumerate() {
            // Acquire: pairs with the Release in `unregister` (a core seen gone has finished its
            // last access).
            let cores = word.load(Ordering::Acquire) & targets.word(w);
            if cores == 0 {
                continue;
            }
            targeted += u64::from(cores.count_ones());
            for i in bits(cores) {
                // Release: pairs with the Acquire request load in `begin_access`: the caller's PTE
                // clears are visible to a core that sees this bump, even early (module doc). F1
                // already makes the bump a release; this states it where it is needed.
                self.slots[w * 64 + i]
                    .request
                    .fetch_add(1, Ordering::Release);
            }
            // F3 (SeqCst): the Dekker fence; pairs with each core's F2 (module doc).
            fence(Ordering::SeqCst);
            for i in bits(cores) {
                let slot = &self.slots[w * 64 + i];
                // Acquire: pairs with the Release in `end_access` (the access we read as ended,
                // or every access before the one we read, happened before our return).
                let a = slot.access.load(Ordering::Acquire);
                if a % 2 == 1 {
                    waited += 1;
                    #[cfg(all(test, not(loom)))]
                    crate::fault_inject::SHOOTER_WAITS.reached();
                    // Relaxed: our own bump precedes this load in the word's modification order,
                    // so `t` is our bump or a later one (the order it needs).
                    let t = slot.request.load(Ordering::Relaxed);
                    let backoff = Backoff::new();
                    // Acquire (both): pair with the Release in `end_access` of the access we
                    // wait for and with the Release `ack` store of a `begin` that flushed for
                    // `t` or later (module doc).
                    while slot.access.load(Ordering::Acquire) == a
                        && slot.ack.load(Ordering::Acquire) < t
                    {
                        spin_wait(&backoff);
                    }
                }
            }
        }
        Round {
            targets: targeted,
            waits: waited,
        }
    }

    /// Shootdown rounds so far (tests of the protocol).
    #[cfg(test)]
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(StatOrdering::Relaxed)
    }

    /// TLB flushes that cores performed in response to shootdowns so far.
    pub(crate) fn received(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.received.load(StatOrdering::Relaxed))
            .sum()
    }

    /// Cores registered now (racy snapshot, for statistics).
    pub(crate) fn cores(&self) -> u64 {
        self.registered
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum()
    }
}

impl std::fmt::Debug for Shootdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shootdown")
            .field("max_cores", &self.max_cores())
            .field("cores", &self.cores())
            .field("received", &self.received())
            .finish()
    }
}

/// Whether a flush request newer than `seen` reached the core whose request word is `request`
/// (a session's per-access check; module doc, "Sessions").
#[inline(always)]
pub(crate) fn requested(request: &AtomicU64, seen: u64) -> bool {
    // Relaxed: this load only decides *when* to take the request; the ordering that makes
    // taking it safe is `renew`'s (its Release end store, F2, the Acquire request load and the
    // Release `ack` store). A stale value only delays it to a later check; coherence makes the
    // bump visible to a later load (on hardware within a store's propagation delay).
    request.load(Ordering::Relaxed) != seen
}

/// The indices of the set bits of `x`, lowest first.
fn bits(mut x: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if x == 0 {
            None
        } else {
            let i = x.trailing_zeros() as usize;
            x &= x - 1;
            Some(i)
        }
    })
}

#[cfg(all(test, loom))]
mod loom_tests;

#[cfg(all(test, not(loom)))]
mod policy_tests;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::types::{Access, Prot, PAGE_SIZE};
    use std::sync::atomic::{AtomicBool, AtomicU64 as StdU64, Ordering::*};

    /// A core as the engine holds one: slot, `seen`, TLB.
    struct Core {
        id: CoreId,
        seen: u64,
        tlb: Tlb,
    }

    impl Core {
        fn new(sd: &Shootdown) -> Core {
            let id = sd.register().unwrap();
            Core {
                id,
                seen: sd.current_request(id),
                tlb: Tlb::new(8),
            }
        }
        fn begin(&mut self, sd: &Shootdown) -> bool {
            sd.begin_access(self.id, &mut self.seen, &mut self.tlb)
        }
    }

    fn fake_frame(n: usize) -> *mut u8 {
        (0x4000_0000 + n * PAGE_SIZE as usize) as *mut u8
    }

    #[test]
    fn register_gives_the_lowest_free_slot_and_too_many_cores_when_full() {
        let sd = Shootdown::new(130);
        let ids: Vec<CoreId> = (0..130).map(|_| sd.register().unwrap()).collect();
        assert_eq!(
            ids.iter().map(|i| i.index()).collect::<Vec<_>>(),
            (0..130).collect::<Vec<_>>()
        );
        assert_eq!(sd.register(), Err(VmError::TooManyCores(130)));
        assert_eq!(sd.cores(), 130);
        sd.unregister(ids[70]);
        sd.unregister(ids[3]);
        assert_eq!(sd.cores(), 128);
        assert_eq!(sd.register().unwrap().index(), 3);
        assert_eq!(sd.register().unwrap().index(), 70);
        assert!(sd.register().is_err());
    }

    #[test]
    fn begin_access_flushes_only_after_a_shootdown() {
        let sd = Shootdown::new(4);
        let mut c = Core::new(&sd);
        assert!(!c.begin(&sd), "a fresh core has nothing to flush");
        c.tlb.insert(0x10_000, fake_frame(1), Prot::READ);
        sd.end_access(c.id);
        assert!(!c.begin(&sd));
        assert_eq!(c.tlb.lookup(0x10_000, Access::Read), Some(fake_frame(1)));
        sd.end_access(c.id);
        assert_eq!(sd.shootdown(Targets::All), 0);
        assert!(c.begin(&sd), "the shootdown's request is honoured");
        assert_eq!(c.tlb.lookup(0x10_000, Access::Read), None);
        sd.end_access(c.id);
        assert!(!c.begin(&sd), "one flush per request");
        sd.end_access(c.id);
        assert_eq!((sd.sent(), sd.received()), (1, 1));
    }

    #[test]
    fn idle_cores_do_not_block_and_flush_at_their_next_access() {
        let sd = Shootdown::new(8);
        let mut cores: Vec<Core> = (0..5).map(|_| Core::new(&sd)).collect();
        for c in &mut cores {
            c.begin(&sd);
            c.tlb.insert(0x20_000, fake_frame(2), Prot::READ_WRITE);
            sd.end_access(c.id);
        }
        // Nobody is inside an access: nobody is waited for; all five are targets.
        assert_eq!(
            sd.shootdown_round(Targets::All),
            Round {
                targets: 5,
                waits: 0
            }
        );
        assert_eq!(sd.shootdown(Targets::All), 0);
        for c in &mut cores {
            assert!(c.begin(&sd));
            assert_eq!(c.tlb.lookup(0x20_000, Access::Write), None);
            sd.end_access(c.id);
        }
        // Two shootdowns, one flush per core (both requests seen at once).
        assert_eq!((sd.sent(), sd.received()), (2, 5));
    }

    #[test]
    fn targeted_shootdown_flushes_and_waits_for_only_its_targets() {
        let sd = Shootdown::new(100);
        let mut a = Core::new(&sd);
        // Put `b` in a different bitmap word.
        let others: Vec<CoreId> = (0..70).map(|_| sd.register().unwrap()).collect();
        let mut b = Core::new(&sd);
        assert_eq!(b.id.index(), 71);
        for c in [&mut a, &mut b] {
            c.begin(&sd);
            c.tlb.insert(0x30_000, fake_frame(3), Prot::READ);
            sd.end_access(c.id);
        }
        let mut set = CoreSet::new();
        set.insert(b.id);
        assert!(set.contains(b.id) && !set.contains(a.id));
        // `a` is inside an access, but not targeted: the shooter must not wait for it (a wait
        // here would never end: this thread is `a`).
        assert!(!a.begin(&sd));
        assert_eq!(
            sd.shootdown_round(Targets::Cores(&set)),
            Round {
                targets: 1,
                waits: 0
            }
        );
        assert_eq!(a.tlb.lookup(0x30_000, Access::Read), Some(fake_frame(3)));
        sd.end_access(a.id);
        assert!(!a.begin(&sd), "a non-target is not asked to flush");
        sd.end_access(a.id);
        assert!(b.begin(&sd), "the target flushes");
        assert_eq!(b.tlb.lookup(0x30_000, Access::Read), None);
        sd.end_access(b.id);
        // The empty set does nothing.
        assert_eq!(sd.shootdown(Targets::Cores(&CoreSet::new())), 0);
        assert!(!b.begin(&sd));
        sd.end_access(b.id);
        for id in others {
            sd.unregister(id);
        }
    }

    #[test]
    fn shootdown_waits_for_a_core_inside_an_access_until_it_ends() {
        let sd = Shootdown::new(4);
        let in_access = AtomicBool::new(false);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut c = Core::new(&sd);
                let start = c.seen;
                c.begin(&sd);
                in_access.store(true, Release);
                // Stay inside until the shooter's bump arrived (it is then waiting for us).
                while sd.current_request(c.id) == start {
                    std::thread::yield_now();
                }
                done.store(true, Relaxed);
                sd.end_access(c.id);
                sd.unregister(c.id);
            });
            while !in_access.load(Acquire) {
                std::thread::yield_now();
            }
            assert_eq!(
                sd.shootdown_round(Targets::All),
                Round {
                    targets: 1,
                    waits: 1
                },
                "waited for the core"
            );
            assert!(done.load(Relaxed), "returned before the access ended");
        });
    }

    /// Accessors and shooters over shared page tables (one `AtomicU64` PTE per page) and frames
    /// (one `AtomicU64` word each, holding the page number it backs and the mapping's
    /// generation, or POISON while free). An accessor reads its frame twice with a pause in
    /// between (a page copy takes time): both reads agree, the frame is never free nor another
    /// page's, and a translation removed by a munmap that returned before the access began is
    /// never used (per-page unmap generations). Two shooters own two pages each, so shootdowns
    /// overlap and may both wait for the same accessor. After every munmap a shooter waits (for
    /// a bounded number of yields) until each accessor has finished one more access: a progress
    /// handshake, not a sleep, so the interleavings happen whatever the scheduler does.
    #[test]
    fn accessors_never_read_a_frame_after_its_unmap_returned() {
        const SHOOTERS: usize = 2;
        const PAGES_PER_SHOOTER: usize = 2;
        const FRAMES_PER_SHOOTER: usize = 4;
        const PAGES: usize = SHOOTERS * PAGES_PER_SHOOTER;
        const ACCESSORS: usize = 2;
        const ROUNDS: usize = 300;
        const POISON: u64 = u64::MAX;
        const PRESENT: u64 = 1 << 63;
        let sd = Shootdown::new(ACCESSORS + SHOOTERS);
        let frames: Vec<StdU64> = (0..SHOOTERS * FRAMES_PER_SHOOTER)
            .map(|_| StdU64::new(POISON))
            .collect();
        let ptes: Vec<StdU64> = (0..PAGES).map(|_| StdU64::new(0)).collect();
        // Munmaps of each page that have returned.
        let unmapped: Vec<StdU64> = (0..PAGES).map(|_| StdU64::new(0)).collect();
        // Accesses each accessor has completed.
        let progress: Vec<StdU64> = (0..ACCESSORS).map(|_| StdU64::new(0)).collect();
        let stop = AtomicBool::new(false);
        // Set by an accessor that panics, so that the shooters' handshake fails instead of
        // waiting forever for its progress.
        let failed = AtomicBool::new(false);
        let (sd, frames, ptes, unmapped, progress, stop, failed) =
            (&sd, &frames, &ptes, &unmapped, &progress, &stop, &failed);
        std::thread::scope(|s| {
            for (t, my_progress) in progress.iter().enumerate() {
                s.spawn(move || {
                    let _flag = PanicFlag(failed);
                    let mut c = Core::new(sd);
                    let mut page = t;
                    while !stop.load(Relaxed) {
                        page = (page + 1) % PAGES;
                        let va = (page as u64 + 16) * PAGE_SIZE;
                        // Acquire: pairs with the shooter's Release after shootdown returned.
                        let gone_before = unmapped[page].load(Acquire);
                        sd.begin_access(c.id, &mut c.seen, &mut c.tlb);
                        let ptr = match c.tlb.lookup(va, Access::Read) {
                            Some(p) => Some(p),
                            None => {
                                // Acquire: pairs with the shooter's Release PTE store.
                                let pte = ptes[page].load(Acquire);
                                (pte & PRESENT != 0).then(|| {
                                    let p = frame_ptr_of(frames, (pte & !PRESENT) as usize);
                                    c.tlb.insert(va, p, Prot::READ);
                                    p
                                })
                            }
                        };
                        let value = ptr.map(|p| {
                            // SAFETY: `p` points at an element of `frames`, alive for the scope.
                            let frame = unsafe { &*(p as *const StdU64) };
                            let first = frame.load(Relaxed);
                            for _ in 0..64 {
                                std::hint::spin_loop();
                            }
                            assert_eq!(frame.load(Relaxed), first, "frame reused mid-access");
                            first
                        });
                        sd.end_access(c.id);
                        if let Some(v) = value {
                            assert_ne!(v, POISON, "read a free frame");
                            let (owner, generation) = (v >> 32, v & 0xffff_ffff);
                            assert_eq!(owner, page as u64, "read another page's frame");
                            assert!(
                                generation >= gone_before,
                                "used a translation removed by a returned munmap"
                            );
                        }
                        my_progress.fetch_add(1, Relaxed);
                    }
                    sd.unregister(c.id);
                });
            }
            let shooters: Vec<_> = (0..SHOOTERS)
                .map(|sh| {
                    s.spawn(move || {
                        // Map page p to a free frame (contents first, then the PTE); later munmap
                        // it (clear PTE, shootdown, poison the frame, free it), alternately.
                        let me = sd.register().unwrap();
                        let my_pages = [sh, sh + SHOOTERS];
                        let mut free: Vec<usize> =
                            (sh * FRAMES_PER_SHOOTER..(sh + 1) * FRAMES_PER_SHOOTER).collect();
                        let mut mapped: [Option<usize>; PAGES_PER_SHOOTER] = [None; 2];
                        for round in 0..ROUNDS {
                            let k = round % PAGES_PER_SHOOTER;
                            let page = my_pages[k];
                            match mapped[k].take() {
                                None => {
                                    let f = free.remove(round % free.len());
                                    let generation = unmapped[page].load(Relaxed);
                                    frames[f].store((page as u64) << 32 | generation, Relaxed);
                                    // Release: publishes the frame contents to walkers.
                                    ptes[page].store(PRESENT | f as u64, Release);
                                    mapped[k] = Some(f);
                                }
                                Some(f) => {
                                    ptes[page].store(0, Release);
                                    sd.shootdown(Targets::All);
                                    frames[f].store(POISON, Relaxed);
                                    free.push(f);
                                    // Release: pairs with the accessors' Acquire generation load.
                                    unmapped[page].fetch_add(1, Release);
                                    // The handshake is bounded (it only encourages
                                    // interleaving; a starved accessor must not stall CI).
                                    let seen: Vec<u64> =
                                        progress.iter().map(|p| p.load(Relaxed)).collect();
                                    for _ in 0..100_000 {
                                        assert!(!failed.load(Relaxed), "an accessor failed");
                                        if progress
                                            .iter()
                                            .zip(&seen)
                                            .all(|(p, &s)| p.load(Relaxed) != s)
                                        {
                                            break;
                                        }
                                        std::thread::yield_now();
                                    }
                                }
                            }
                        }
                        sd.unregister(me);
                    })
                })
                .collect();
            for h in shooters {
                h.join().unwrap();
            }
            stop.store(true, Relaxed);
        });
        assert_eq!(sd.sent(), (SHOOTERS * ROUNDS / 2) as u64);
    }

    /// Sets its flag when dropped during a panic.
    struct PanicFlag<'a>(&'a AtomicBool);

    impl Drop for PanicFlag<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.store(true, Relaxed);
            }
        }
    }

    fn frame_ptr_of(frames: &[StdU64], f: usize) -> *mut u8 {
        &frames[f] as *const StdU64 as *mut u8
    }
}
