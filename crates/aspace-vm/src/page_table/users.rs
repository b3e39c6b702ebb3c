//! The per-leaf record of the cores that may hold translations from a leaf page table
//! ([`LeafUsers`]), for targeted TLB shootdown (RadixVM, EuroSys'13 §3.4: the page tables track
//! which cores may have cached each mapping, so an unmap interrupts only those cores).
//!
//! # What it records
//!
//! Every leaf table keeps [`USER_BITS`] "user" bits on a cache line of their own (the table is
//! 64-byte aligned, so the line costs no more than one word would). Core `c` owns bit
//! `c % USER_BITS` ([`UserBit`]). A set bit `b` means "every core whose index is `b` modulo
//! `USER_BITS` may hold a translation read from this leaf"; the shooter turns the union of the
//! masks it read into the [`CoreSet`] of all those cores ([`UserMask::cores_into`]). With
//! `max_cores <= USER_BITS` (the default 256 is) every core has a bit of its own; above, cores
//! share bits and a shared bit targets its whole residue class (more targets, never fewer).
//!
//! # The protocol (a store-buffering pair)
//!
//! ```text
//! walker (core c, TLB miss, inside an access):     shooter (under the leaf lock):
//!   walk down to the leaf L                           change entries of L (clear / downgrade)
//!   if c owns its bit alone and it is set in L:       FS: fence(SeqCst)
//!       nothing (one Relaxed load)                    m := L.users (Relaxed loads)
//!   else: L.users |= bit (RMW); FW: fence(SeqCst)   ... shootdown(cores of m); free frames
//!   pte := L.entries[i] (Acquire); cache pte
//! ```
//!
//! **Claim**: if the walker caches the old entry (its `pte` load reads a value the shooter's
//! change overwrote), the shooter's `m` contains the walker's bit, so the walker is a target and
//! the shootdown (`shootdown.rs`) flushes it or waits for its access before any frame is freed.
//!
//! **Why (C++20 [atomics.order] p4, the rules for SC fences and coherence-ordered pairs)**: let
//! `U` be the RMW that set the bit and `F` an SC fence with `U` sequenced before `F` and `F`
//! happening before the walker's `pte` load `R`. If `R` reads an older entry value than the
//! shooter's store `W`, then `R` is coherence-ordered before `W`; `F` happens before `R` and `W`
//! happens before `FS`, so `F` precedes `FS` in the single total order S. `U` happens before
//! `F` and `FS` happens before the shooter's mask load, so by the same rule that load cannot be
//! coherence-ordered before `U`: it reads `U` or a later modification of the word. Every later
//! modification while `L` is linked is an RMW that only sets bits (the reset below happens only
//! to unlinked tables, after their entries were cleared and shot down, and the caller excludes
//! `free_tables` from the range it clears, so no reset falls between `U` and the shooter's
//! load), so the bit is in `m`. Without either fence this is exactly the store-buffering
//! outcome (x86 lets each load pass the earlier store to the other location): both loads read
//! the old values and the shooter frees a frame the walker still uses.
//!
//! Which `U`/`F` pair serves:
//! - **Slow path** (bit not seen set, or shared): the walker's own RMW and `FW`, sequenced
//!   before `R`.
//! - **Steady state** (the walker owns its bit alone and sees it set: no write, no fence): the
//!   bit was set by an RMW of this core slot, because no other slot maps to it. Either this core
//!   did it on an earlier walk, followed by that walk's `FW` (sequenced before `R`), or an
//!   earlier holder of the slot did, whose `FW` happens before this core's walks through the
//!   slot's hand-over (`Shootdown::unregister` Release, `register` Acquire). Either way an `F`
//!   happens before `R`. The Relaxed load is enough to *see* the bit: coherence makes it read
//!   the core's own earlier RMW or a later value.
//! - **Shared bits** get no steady state: a bit seen set may come from another core of the class,
//!   whose `FW` is sequenced after its RMW and is not ordered before this walker's `R` even by an
//!   Acquire load (a Release RMW would order the RMW, not the fence after it). Those cores always
//!   take the slow path: a fence and an RMW per TLB miss, on a line the other cores of the class
//!   may also write (only spaces of more than `USER_BITS` cores have such cores).
//!
//! Also ordered by other fences, but not relied on: `begin_access`'s F2 (`shootdown.rs`) is a
//! SeqCst fence after every earlier access's RMW, so a bit set in an earlier access is covered by
//! it too; a bit set earlier in the *same* access (a multi-page access) is covered only by that
//! walk's FW, which is why the steady state names FW.
//!
//! The loom models (`users/loom_tests.rs`) run a walker against a shooter on the real page
//! tables and shootdown and fail when `FW` or `FS` is removed, when the walker records after
//! reading the entry, or when a core that shares its bit takes the steady state.
//!
//! # Invariants
//!
//! - While a leaf is linked its bits are only set (`fetch_or`), never cleared: the record is
//!   conservative (a core that flushed since is still a target; RadixVM's per-page sets are
//!   exact but cost a write per TLB fill).
//! - The record is reset when the leaf is scrubbed (`Table::scrub`, unlinked by `free_tables`
//!   after `clear_range` and its shootdown). A walker still inside the unlinked table may set its
//!   bit after the reset; the table is then reused with that bit set: one spurious target, never
//!   a missing one (and the steady-state argument above still holds: only that core's slot sets
//!   it).
//! - Only the access path records (the walk whose result goes into a TLB). `fill` does not: a
//!   filled entry is cached only by a later walk, which records. The exception is the owner
//!   tree of the per-core organisation (`per_core/owner.rs`), which no walker reads: there a
//!   fill records the core that copies the entry (`record_locked`, under the leaf lock), and
//!   `free_tables` keeps the records of the leaves it frees in the intermediate table above
//!   that stays (`absorb`; intermediate tables' records are otherwise unused).
//!
//! Not for: intermediate tables (the field exists in every table, only leaves use it), deciding
//! the policy (`shootdown.rs`, `Shared`), or the shootdown itself.

use crate::shootdown::CoreSet;
use crate::sync::{fence, AtomicU64, Ordering};

/// Bits of a leaf's record: one 64-byte line. Under loom one word, so that a model can make two
/// cores share a bit with 65 shootdown slots (as the shootdown models already use).
pub(crate) const USER_BITS: usize = if cfg!(loom) { 64 } else { 512 };
const USER_WORDS: usize = USER_BITS / 64;

/// The bit core `c` records, and whether `c` owns it alone (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UserBit {
    word: usize,
    mask: u64,
    /// No other core slot `< max_cores` maps to this bit: the steady state may skip the fence.
    exclusive: bool,
}

impl UserBit {
    /// The bit of core slot `core` in a space of `max_cores` slots.
    pub(crate) fn of(core: usize, max_cores: usize) -> UserBit {
        debug_assert!(core < max_cores);
        let bit = core % USER_BITS;
        UserBit {
            word: bit / 64,
            mask: 1 << (bit % 64),
            // Slots `bit`, `bit + USER_BITS`, ...: alone iff the second one does not exist.
            exclusive: bit + USER_BITS >= max_cores,
        }
    }

    /// Whether this core owns its bit alone.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn exclusive(self) -> bool {
        self.exclusive
    }
}

/// A leaf table's record (module doc). All zero in a fresh or scrubbed table.
#[derive(Debug)]
pub(super) struct LeafUsers {
    words: [AtomicU64; USER_WORDS],
}

impl LeafUsers {
    /// An empty record (loom tables are built field by field; real ones are zeroed memory).
    #[cfg(loom)]
    pub(super) fn new() -> LeafUsers {
        LeafUsers {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Walker side: records `user` before the caller loads the entry it will cache (module doc,
    /// "walker").
    #[inline]
    pub(super) fn record(&self, user: UserBit) {
        let w = &self.words[user.word];
        // Relaxed: the steady state (module doc): a bit this core owns alone and sees set was
        // set by an RMW of its slot followed by an `FW` that happens before our entry load.
        if user.exclusive && w.load(Ordering::Relaxed) & user.mask != 0 {
            return;
        }
        // Relaxed: the RMW's order before our entry load is FW's job, not the RMW's.
        w.fetch_or(user.mask, Ordering::Relaxed);
        // FW (SeqCst): the store-buffering fence between our bit (the RMW above) and our entry
        // load; pairs with the shooter's FS in `collect_after_changes`: either the shooter's
        // mask load sees our bit or our entry load sees its change (module doc).
        fence(Ordering::SeqCst);
    }

    /// Shooter side: ORs the record into `out`. Called under the leaf lock after the caller
    /// changed entries of this leaf (and before it frees anything they mapped).
    #[inline]
    pub(super) fn collect_after_changes(&self, out: &mut UserMask) {
        // FS (SeqCst): orders the caller's entry changes before the mask loads below; pairs
        // with a walker's FW in `record` (module doc).
        fence(Ordering::SeqCst);
        for (o, w) in out.0.iter_mut().zip(&self.words) {
            // Relaxed: FS and FW order it (module doc).
            *o |= w.load(Ordering::Relaxed);
        }
    }

    /// Owner-tree side (`per_core/owner.rs`): records `user` as a core that copied a
    /// translation of this leaf of the per-core organisation's owner tree. Called under the
    /// leaf lock, which orders it before the editors' reads of the record (they read it under
    /// the same lock, `collect_after_changes`, or after unlinking the leaf, which waits out the
    /// lock holder): no fence, and no steady-state subtlety (a bit seen set under the lock was
    /// set under it).
    #[inline]
    pub(super) fn record_locked(&self, user: UserBit) {
        let w = &self.words[user.word];
        // Relaxed: ordered by the leaf lock (doc). Written only when missing, so that the
        // steady state of a core refilling its copy reads the line without dirtying it.
        if w.load(Ordering::Relaxed) & user.mask == 0 {
            w.fetch_or(user.mask, Ordering::Relaxed);
        }
    }

    /// ORs the record into `out` (a table being unlinked by `free_tables_noting`, whose
    /// writers are done: see there).
    pub(super) fn or_into(&self, out: &mut UserMask) {
        for (o, w) in out.0.iter_mut().zip(&self.words) {
            // Relaxed: the caller's unlink (or exclusion) ordered every writer before us.
            *o |= w.load(Ordering::Relaxed);
        }
    }

    /// ORs `m` into the record of an intermediate table that stays linked while tables below
    /// it are freed (`free_tables_noting`: the cores that copied below them).
    pub(super) fn absorb(&self, m: &UserMask) {
        for (w, &bits) in self.words.iter().zip(&m.0) {
            // Relaxed: read only by a later free of this table, ordered after us by the
            // caller's exclusion of the range (the design's lock); an RMW because editors of
            // disjoint ranges may absorb into one table at once.
            if bits != 0 && w.load(Ordering::Relaxed) & bits != bits {
                w.fetch_or(bits, Ordering::Relaxed);
            }
        }
    }

    /// Clears the record of an unlinked table (`Table::scrub`).
    pub(super) fn reset(&self) {
        for w in &self.words {
            // Relaxed: the table is unlinked; its reuse is ordered after this by the retired
            // list's mutex and the RCU grace period. Only dirty the line when needed.
            if w.load(Ordering::Relaxed) != 0 {
                w.store(0, Ordering::Relaxed);
            }
        }
    }

    /// The record now (tests).
    #[cfg(all(test, not(loom)))]
    pub(super) fn snapshot(&self) -> UserMask {
        UserMask(self.words.each_ref().map(|w| w.load(Ordering::Relaxed)))
    }
}

/// A union of leaf records (plain bits), as `clear_range_noting`/`protect_range_noting` collect
/// it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UserMask([u64; USER_WORDS]);

impl UserMask {
    /// Sets `user`'s bit (the per-core organisation notes the owner of a tree it changed:
    /// `organisation.rs`).
    #[inline]
    pub(crate) fn insert(&mut self, user: UserBit) {
        self.0[user.word] |= user.mask;
    }

    /// ORs `other` into this mask.
    #[inline]
    pub(crate) fn or(&mut self, other: &UserMask) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }

    /// The bits of core word `w` (cores `64 * w .. 64 * w + 64`, each standing for its residue
    /// class as in [`UserMask::cores_into`]).
    #[inline]
    #[allow(clippy::modulo_one)] // USER_WORDS is 1 under loom
    pub(crate) fn core_word(&self, w: usize) -> u64 {
        self.0[w % USER_WORDS]
    }

    /// No bit set: no core may hold a translation from the leaves it covers.
    #[cfg_attr(any(not(test), loom), allow(dead_code))]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Whether `user`'s bit is set.
    #[cfg_attr(any(not(test), loom), allow(dead_code))]
    pub(crate) fn contains(&self, user: UserBit) -> bool {
        self.0[user.word] & user.mask != 0
    }

    /// Replaces `out` with every core slot `< max_cores` a set bit stands for (its residue class
    /// modulo [`USER_BITS`]). `USER_BITS` is a multiple of 64, so core word `w` is mask word
    /// `w % USER_WORDS`.
    pub(crate) fn cores_into(&self, max_cores: usize, out: &mut CoreSet) {
        out.clear();
        for w in 0..max_cores.div_ceil(64) {
            #[allow(clippy::modulo_one)] // USER_WORDS is 1 under loom
            let mut bits = self.0[w % USER_WORDS];
            if w == max_cores / 64 {
                bits &= (1 << (max_cores % 64)) - 1;
            }
            if bits != 0 {
                out.or_word(w, bits);
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::PageTables;
    use super::*;
    use crate::frames::Frame;
    use crate::shootdown::CoreId;
    use crate::types::{Prot, PAGE_SIZE};

    /// Bytes one leaf table maps.
    const LEAF: u64 = 512 * PAGE_SIZE;

    fn mask_of(users: &[UserBit]) -> UserMask {
        let mut m = UserMask::default();
        for u in users {
            m.0[u.word] |= u.mask;
        }
        m
    }

    /// Tables with pages `va`, `va + PAGE_SIZE` and `va + LEAF` (the next leaf) filled.
    fn tables(va: u64) -> PageTables {
        let pt = PageTables::new(1);
        let mut ptc = pt.cache(0);
        for (i, p) in [va, va + PAGE_SIZE, va + LEAF].into_iter().enumerate() {
            pt.fill(&mut ptc, p, Prot::READ_WRITE, || {
                Some(Frame::from_index(i as u32 + 1))
            })
            .unwrap();
        }
        pt
    }

    /// The users record of the leaf of `va`.
    fn leaf_users(pt: &PageTables, va: u64) -> UserMask {
        let slot = pt.leaf_slot(&mut pt.cache(0), va).unwrap();
        let e = slot.load(Ordering::Relaxed);
        pt.child(e).users.snapshot()
    }

    #[test]
    fn only_recorded_lookups_record_and_only_in_the_leaf_walked() {
        let va = 0x40_0000;
        let pt = tables(va);
        let (u3, u70) = (UserBit::of(3, 256), UserBit::of(70, 256));
        assert!(pt.lookup(va).is_some());
        assert_eq!(
            leaf_users(&pt, va),
            UserMask::default(),
            "plain lookup records"
        );
        assert!(pt.lookup_recorded(va, u3).is_some());
        assert!(
            pt.lookup_recorded(va + PAGE_SIZE, u3).is_some(),
            "steady state"
        );
        // A walk that finds the leaf but no entry records too (it may be retried after a
        // fill: the record must precede that entry load as well).
        assert!(pt.lookup_recorded(va + 2 * PAGE_SIZE, u70).is_none());
        assert_eq!(leaf_users(&pt, va), mask_of(&[u3, u70]));
        assert_eq!(leaf_users(&pt, va + LEAF), UserMask::default());
        // No leaf, nothing recorded (and nothing to record into).
        assert!(pt.lookup_recorded(0x8000_0000, u3).is_none());
    }

    #[test]
    fn noting_collects_the_masks_of_the_leaves_whose_entries_changed() {
        let va = 0x40_0000;
        let pt = tables(va);
        let (a, b) = (UserBit::of(1, 256), UserBit::of(200, 256));
        pt.lookup_recorded(va, a);
        pt.lookup_recorded(va + LEAF, b);
        // Downgrading only the first leaf's pages collects only its mask.
        let mut users = UserMask::default();
        assert!(pt.protect_range_noting(va..va + LEAF, Prot::READ, Some(&mut users)));
        assert_eq!(users, mask_of(&[a]));
        // Nothing changes (the same protection again): nothing collected.
        let mut users = UserMask::default();
        assert!(!pt.protect_range_noting(va..va + LEAF, Prot::READ, Some(&mut users)));
        assert_eq!(users, UserMask::default());
        // A clear over both leaves collects both; a clear that finds nothing collects nothing.
        let mut users = UserMask::default();
        let mut freed = Vec::new();
        pt.clear_range_noting(va..va + 2 * LEAF, &mut freed, Some(&mut users));
        assert_eq!(freed.len(), 3);
        assert_eq!(users, mask_of(&[a, b]));
        let mut users = UserMask::default();
        pt.clear_range_noting(va..va + 2 * LEAF, &mut freed, Some(&mut users));
        assert_eq!(users, UserMask::default(), "no entry cleared, no mask read");
        // Without a mask to fill, the same calls work as before.
        pt.clear_range_noting(va..va + LEAF, &mut freed, None);
    }

    #[test]
    fn freeing_a_leaf_resets_its_record() {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let va = 0x40_0000;
        let pt = PageTables::new(1);
        let mut ptc = pt.cache(0);
        let u = UserBit::of(5, 256);
        pt.fill(&mut ptc, va, Prot::READ, || Some(Frame::from_index(1)))
            .unwrap();
        pt.lookup_recorded(va, u);
        assert_eq!(leaf_users(&pt, va), mask_of(&[u]));
        let leaf =
            pt.leaf_slot(&mut ptc, va).unwrap().load(Ordering::Relaxed) & super::super::ADDR_MASK;
        let mut freed = Vec::new();
        pt.clear_range(va..va + PAGE_SIZE, &mut freed);
        pt.free_tables(&mut ptc, 0..1 << 47, &domain);
        assert_eq!(pt.table_count(), 1, "the leaf was unlinked");
        // SAFETY: the unlinked leaf is retired, not freed: table memory stays allocated while
        // `pt` lives (type-stable, `pool.rs`), and a `Table` is atomics only.
        let leaf = unsafe { &*(leaf as *const super::super::Table) };
        assert_eq!(
            leaf.users.snapshot(),
            UserMask::default(),
            "scrub resets the record"
        );
    }

    #[test]
    fn user_bits_are_exclusive_up_to_user_bits_cores_and_shared_above() {
        for c in [0, 1, 63, 64, 255] {
            let u = UserBit::of(c, 256);
            assert!(u.exclusive(), "core {c} of 256");
            assert_eq!((u.word, u.mask), (c / 64, 1 << (c % 64)));
        }
        assert!(UserBit::of(USER_BITS - 1, USER_BITS).exclusive());
        // 600 slots: 0..88 share with 512..600; 88..512 are alone.
        let n = USER_BITS + 88;
        assert_eq!(UserBit::of(0, n), UserBit::of(USER_BITS, n));
        assert!(!UserBit::of(0, n).exclusive() && !UserBit::of(USER_BITS + 87, n).exclusive());
        assert!(UserBit::of(88, n).exclusive() && UserBit::of(USER_BITS - 1, n).exclusive());
    }

    #[test]
    fn a_mask_stands_for_every_core_of_its_residue_classes_below_max_cores() {
        let n = USER_BITS + 66;
        let mut m = UserMask::default();
        for c in [3, 69, USER_BITS + 65] {
            m.0[UserBit::of(c, n).word] |= UserBit::of(c, n).mask;
        }
        assert!(!m.is_empty() && m.contains(UserBit::of(65, n)));
        let mut set = CoreSet::new();
        set.insert(CoreId::for_tests(7)); // replaced, not added to
        m.cores_into(n, &mut set);
        let got: Vec<usize> = (0..n)
            .filter(|&c| set.contains(CoreId::for_tests(c)))
            .collect();
        // `USER_BITS + 69` would be in 69's class but is beyond max_cores.
        assert_eq!(got, [3, 65, 69, USER_BITS + 3, USER_BITS + 65]);
        let mut empty = CoreSet::new();
        UserMask::default().cores_into(n, &mut empty);
        assert!(empty.is_empty());
    }
}
