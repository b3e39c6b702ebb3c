//! The per-core soft TLB: a small direct-mapped cache of page translations (page -> frame
//! pointer + rights) that `read`/`write`/`touch` consult before walking the page tables.
//!
//! # Algorithm
//!
//! `entries` (a power of two) slots; page number `vpn = va >> 12` lives in slot `vpn & mask`.
//! Each slot is 16 bytes: a *key* and the frame's address. The key packs everything a lookup
//! checks into one word, so a lookup is one mask, one load, one `and` and one compare:
//!
//! ```text
//!   bits 63..12  the page's virtual address (va & !0xfff)
//!   bits 11..4   the TLB generation the entry was filled in (mod 256)
//!   bit  3       VALID
//!   bits  2..0   rights: READ (any of PROT_READ/WRITE/EXEC, x86 rules), WRITE, EXEC
//! ```
//!
//! A lookup for access kind `k` hits when `key & (PAGE | GEN | VALID | bit(k))` equals
//! `page | gen | VALID | bit(k)`: same page, filled in the current generation, and carrying the
//! right. [`Tlb::flush_all`] is O(1): it bumps the generation, which makes every entry stale;
//! every 256th flush the generation wraps and the array is really cleared, so an entry can never
//! come back to life.
//!
//! # Invariants
//!
//! - An entry is only inserted by its own core, inside an access window (see `shootdown.rs`), from
//!   a page-table entry read in that window; it is dropped (by `flush_all`) at the start of the
//!   first access after any shootdown that targeted this core. That is what makes it safe to use
//!   the cached frame pointer without re-reading the page tables.
//! - A fresh registration starts with an empty TLB (a new [`Tlb`], or one just flushed).
//!
//! Hits and misses are counted per TLB in plain fields (the TLB is one core's, `!Sync`); the
//! owner publishes them into the space's statistics.
//!
//! Not for: synchronization. The TLB is private to its core; staleness is the shootdown
//! protocol's business (`shootdown.rs`), and it never dereferences the frame pointers it holds.

use crate::types::{Access, Prot, PAGE_SIZE};

/// Bits of the key holding the page address.
const PAGE_MASK: u64 = !(PAGE_SIZE - 1);
/// Rights bits (one per [`Access`] kind).
const RIGHT_READ: u64 = 1 << 0;
const RIGHT_WRITE: u64 = 1 << 1;
const RIGHT_EXEC: u64 = 1 << 2;
/// The entry holds a translation.
const VALID: u64 = 1 << 3;
/// Where the generation sits in the key, and its mask.
const GEN_SHIFT: u32 = 4;
const GEN_MASK: u64 = 0xff << GEN_SHIFT;

/// The key bit for the right an access of kind `access` needs.
#[inline(always)]
fn right_for(access: Access) -> u64 {
    match access {
        Access::Read => RIGHT_READ,
        Access::Write => RIGHT_WRITE,
        Access::Exec => RIGHT_EXEC,
    }
}

/// The key's rights bits for a page mapped with `prot` (x86 rules: see [`Prot::allows`]).
fn rights_of(prot: Prot) -> u64 {
    let mut r = 0;
    if prot.allows(Access::Read) {
        r |= RIGHT_READ;
    }
    if prot.allows(Access::Write) {
        r |= RIGHT_WRITE;
    }
    if prot.allows(Access::Exec) {
        r |= RIGHT_EXEC;
    }
    r
}

/// One cached translation.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Entry {
    /// Page, generation, VALID and rights (module doc).
    key: u64,
    /// Start of the frame backing the page.
    frame: *mut u8,
}

const EMPTY: Entry = Entry {
    key: 0,
    frame: std::ptr::null_mut(),
};

/// A core's direct-mapped soft TLB.
pub(crate) struct Tlb {
    entries: Box<[Entry]>,
    /// `entries.len() - 1`.
    mask: u64,
    /// The current generation, already shifted into key position (`gen << GEN_SHIFT`).
    gen: u64,
    hits: u64,
    misses: u64,
}

// SAFETY: the frame pointers are plain addresses into the space's frame reservation; the TLB
// never dereferences them, and the core that owns the TLB only uses them inside an access window
// of the shootdown protocol, whichever thread it runs on. Moving the TLB (with its core handle)
// to another thread is therefore fine. It stays `!Sync`: one core uses it at a time.
unsafe impl Send for Tlb {}

impl Tlb {
    /// An empty TLB with `entries` slots (a power of two, checked by `Config::validate`).
    pub(crate) fn new(entries: usize) -> Tlb {
        assert!(entries.is_power_of_two(), "TLB size must be a power of two");
        Tlb {
            entries: vec![EMPTY; entries].into_boxed_slice(),
            mask: entries as u64 - 1,
            gen: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// The slot index of the page containing `va`.
    #[inline(always)]
    fn index(&self, va: u64) -> usize {
        ((va / PAGE_SIZE) & self.mask) as usize
    }

    /// The start of the frame backing the page containing `va`, if the TLB holds a translation
    /// for that page that allows an access of kind `access`. Counts a hit or a miss.
    #[inline]
    pub(crate) fn lookup(&mut self, va: u64, access: Access) -> Option<*mut u8> {
        let need = right_for(access);
        let i = self.index(va);
        debug_assert!(i < self.entries.len());
        // SAFETY: `index` masks with `mask`, which is `entries.len() - 1` for a power-of-two
        // length (`new`), so `i < entries.len()`. (The hot path of a session: no bounds check.)
        let e = unsafe { *self.entries.get_unchecked(i) };
        if e.key & (PAGE_MASK | GEN_MASK | VALID | need)
            == (va & PAGE_MASK) | self.gen | VALID | need
        {
            self.hits += 1;
            Some(e.frame)
        } else {
            self.misses += 1;
            None
        }
    }

    /// Caches the translation of the page containing `va` to the frame starting at `frame`, with
    /// the rights of `prot`; replaces whatever the slot held. A `PROT_NONE` translation grants
    /// nothing: it still replaces the slot's entry, but no lookup ever hits it.
    ///
    /// The caller must be inside an access window and have read the translation from a present
    /// page-table entry in that window (module doc, invariants).
    #[inline]
    pub(crate) fn insert(&mut self, va: u64, frame: *mut u8, prot: Prot) {
        let i = self.index(va);
        self.entries[i] = Entry {
            key: (va & PAGE_MASK) | self.gen | VALID | rights_of(prot),
            frame,
        };
    }

    /// Drops every translation: O(1) by advancing the generation; every 256th call clears the
    /// array so that an entry of an old generation cannot match again after the wrap.
    pub(crate) fn flush_all(&mut self) {
        self.gen = (self.gen + (1 << GEN_SHIFT)) & GEN_MASK;
        if self.gen == 0 {
            self.entries.fill(EMPTY);
        }
    }

    /// Lookups that hit.
    pub(crate) fn hits(&self) -> u64 {
        self.hits
    }

    /// Lookups that missed.
    pub(crate) fn misses(&self) -> u64 {
        self.misses
    }
}

impl std::fmt::Debug for Tlb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tlb")
            .field("entries", &self.entries.len())
            .field("generation", &(self.gen >> GEN_SHIFT))
            .field("hits", &self.hits)
            .field("misses", &self.misses)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn frame(n: usize) -> *mut u8 {
        // Fake, never dereferenced addresses (the TLB does not dereference them).
        (0x1000_0000 + n * PAGE_SIZE as usize) as *mut u8
    }

    #[test]
    fn lookup_misses_on_an_empty_tlb_and_hits_after_insert() {
        let mut t = Tlb::new(8);
        assert_eq!(t.lookup(0x5000, Access::Read), None);
        t.insert(0x5000, frame(1), Prot::READ_WRITE);
        assert_eq!(t.lookup(0x5123, Access::Read), Some(frame(1)));
        assert_eq!(t.lookup(0x5fff, Access::Write), Some(frame(1)));
        assert_eq!((t.hits(), t.misses()), (2, 1));
    }

    #[test]
    fn lookup_requires_the_right_of_the_access() {
        let mut t = Tlb::new(8);
        t.insert(0x5000, frame(1), Prot::READ);
        assert_eq!(t.lookup(0x5000, Access::Read), Some(frame(1)));
        assert_eq!(t.lookup(0x5000, Access::Write), None);
        assert_eq!(t.lookup(0x5000, Access::Exec), None);
        t.insert(0x6000, frame(2), Prot::WRITE);
        // x86: writable implies readable.
        assert_eq!(t.lookup(0x6000, Access::Read), Some(frame(2)));
        assert_eq!(t.lookup(0x6000, Access::Exec), None);
        t.insert(0x7000, frame(3), Prot::EXEC);
        assert_eq!(t.lookup(0x7000, Access::Exec), Some(frame(3)));
        assert_eq!(t.lookup(0x7000, Access::Write), None);
    }

    #[test]
    fn prot_none_is_never_hit_and_replaces_the_old_entry() {
        let mut t = Tlb::new(8);
        t.insert(0x5000, frame(1), Prot::READ);
        t.insert(0x5000, frame(1), Prot::NONE);
        for a in [Access::Read, Access::Write, Access::Exec] {
            assert_eq!(t.lookup(0x5000, a), None);
        }
    }

    #[test]
    fn pages_with_the_same_slot_evict_each_other() {
        let mut t = Tlb::new(4);
        t.insert(0x1000, frame(1), Prot::READ);
        t.insert(0x5000, frame(5), Prot::READ); // 0x5000 >> 12 = 5, 5 & 3 == 1 & 3
        assert_eq!(t.lookup(0x1000, Access::Read), None);
        assert_eq!(t.lookup(0x5000, Access::Read), Some(frame(5)));
        // A page in another slot is unaffected.
        t.insert(0x2000, frame(2), Prot::READ);
        assert_eq!(t.lookup(0x2000, Access::Read), Some(frame(2)));
    }

    #[test]
    fn tag_distinguishes_pages_beyond_the_index_bits() {
        let mut t = Tlb::new(64);
        let hi = 0x7fff_ffff_f000_u64;
        t.insert(hi, frame(9), Prot::READ);
        assert_eq!(t.lookup(hi, Access::Read), Some(frame(9)));
        // Same slot (low 6 bits of the page number equal), different page.
        assert_eq!(t.lookup(hi - 64 * PAGE_SIZE, Access::Read), None);
    }

    #[test]
    fn flush_all_drops_every_entry() {
        let mut t = Tlb::new(16);
        for p in 0..16u64 {
            t.insert(p * PAGE_SIZE, frame(p as usize), Prot::READ_WRITE);
        }
        t.flush_all();
        for p in 0..16u64 {
            assert_eq!(t.lookup(p * PAGE_SIZE, Access::Read), None);
        }
        // Entries inserted after the flush are used.
        t.insert(0x3000, frame(7), Prot::READ);
        assert_eq!(t.lookup(0x3000, Access::Read), Some(frame(7)));
    }

    #[test]
    fn an_entry_stays_dead_across_the_generation_wrap() {
        let mut t = Tlb::new(4);
        t.insert(0x1000, frame(1), Prot::READ);
        // 256 flushes bring the generation back to the entry's; the wrap must have cleared it.
        for i in 0..256 {
            t.flush_all();
            assert_eq!(
                t.lookup(0x1000, Access::Read),
                None,
                "after {} flushes",
                i + 1
            );
        }
        for i in 0..600 {
            t.insert(0x2000, frame(2), Prot::READ);
            t.flush_all();
            assert_eq!(t.lookup(0x2000, Access::Read), None, "round {i}");
        }
    }

    #[test]
    fn a_one_entry_tlb_works() {
        let mut t = Tlb::new(1);
        t.insert(0x1000, frame(1), Prot::READ);
        t.insert(0x2000, frame(2), Prot::READ);
        assert_eq!(t.lookup(0x1000, Access::Read), None);
        assert_eq!(t.lookup(0x2000, Access::Read), Some(frame(2)));
    }

    #[test]
    fn lookup_matches_a_model_on_random_operations() {
        use rand::{Rng, SeedableRng};
        use std::collections::HashMap;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut t = Tlb::new(8);
        // Model: what the TLB may hold is a subset of the inserted-since-last-flush map; an entry
        // it returns must equal the model's, and the last insert into a slot must be returned.
        let mut model: HashMap<u64, (*mut u8, Prot)> = HashMap::new();
        for _ in 0..20_000 {
            let page = rng.gen_range(0..32u64) * PAGE_SIZE;
            match rng.gen_range(0..10) {
                0 => {
                    t.flush_all();
                    model.clear();
                }
                1..=3 => {
                    let prot = Prot::from_bits_retain(rng.gen_range(0..8));
                    let f = frame(rng.gen_range(0..100));
                    t.insert(page, f, prot);
                    if prot.bits() == 0 {
                        model.remove(&page);
                    } else {
                        model.insert(page, (f, prot));
                        let got = t.lookup(page + 5, Access::Read);
                        assert_eq!(got, Some(f), "the last insert is cached");
                    }
                }
                _ => {
                    let access = [Access::Read, Access::Write, Access::Exec][rng.gen_range(0..3)];
                    if let Some(f) = t.lookup(page, access) {
                        let (mf, mp) = model.get(&page).copied().expect("hit on a flushed page");
                        assert_eq!(f, mf);
                        assert!(mp.allows(access), "hit without the right");
                    }
                }
            }
        }
    }
}
