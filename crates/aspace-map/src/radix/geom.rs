//! The shape of the radix tree: levels, fan-out, and which slot of which level covers a page.
//!
//! RadixVM (EuroSys'13 §3.2, Fig. 3) indexes the 36-bit virtual page number of x86-64's 48-bit
//! user address space with four levels of nine bits: 512 slots per node, like a hardware page
//! table. Those four levels are the tree's levels 0 (leaves: one slot per page) to 3. The
//! `IntervalMap` contract's key space is the whole `u64` range (page numbers of 52 bits), so two
//! more levels sit above them: level 4 (nine more bits) and the root, level 5, of which only the
//! first 128 slots are reachable (the top seven bits). An address below 2^48 is found through
//! root slot 0 and level-4 slot 0, two cache-hot words that every such lookup shares read-only.
//!
//! | level | slot covers | node covers |
//! |-------|-------------|-------------|
//! | 0     | 4 KiB       | 2 MiB       |
//! | 1     | 2 MiB       | 1 GiB       |
//! | 2     | 1 GiB       | 512 GiB     |
//! | 3     | 512 GiB     | 256 TiB     |
//! | 4     | 256 TiB     | 128 PiB     |
//! | 5     | 128 PiB     | the key space |
//!
//! Under `--cfg loom` the tree is three levels of two bits (64 pages), so that a model's nodes
//! have four slots and loom explores few atomics; the models use pages below 64 only.
//!
//! All positions here are page numbers (`addr / PAGE_SIZE`), not addresses.

/// Index bits per level.
#[cfg(not(loom))]
pub(crate) const BITS: u32 = 9;
#[cfg(loom)]
pub(crate) const BITS: u32 = 2;

/// Slots per node.
pub(crate) const FANOUT: usize = 1 << BITS;

/// Number of levels: 0 (leaves) to `LEVELS - 1` (the root).
#[cfg(not(loom))]
pub(crate) const LEVELS: usize = 6;
#[cfg(loom)]
pub(crate) const LEVELS: usize = 3;

/// The root's level.
pub(crate) const ROOT_LEVEL: usize = LEVELS - 1;

/// Pages covered by one slot of `level`.
#[inline]
pub(crate) const fn span(level: usize) -> u64 {
    1u64 << (BITS as usize * level)
}

/// Index of the slot of a `level` node that covers `page`.
#[inline]
pub(crate) const fn index(page: u64, level: usize) -> usize {
    ((page >> (BITS as usize * level)) as usize) & (FANOUT - 1)
}

/// First page of the `level` slot that covers `page`.
#[inline]
pub(crate) const fn slot_start(page: u64, level: usize) -> u64 {
    page & !(span(level) - 1)
}

/// Pages covered by the whole tree: under loom the model's 64 pages; otherwise every page of the
/// key space fits (the root's reachable slots end at 2^52 pages).
#[cfg(all(loom, test))]
pub(crate) const TREE_PAGES: u64 = span(LEVELS);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::contract::{KEY_SPACE_END, PAGE_SIZE};

    #[test]
    fn the_four_lower_levels_are_radixvms_36_bits() {
        assert_eq!(span(4), 1 << 36, "levels 0-3 index the 36-bit page number");
        assert_eq!(span(1) * PAGE_SIZE, 2 << 20);
        assert_eq!(span(2) * PAGE_SIZE, 1 << 30);
    }

    #[test]
    fn every_page_of_the_key_space_has_a_root_slot() {
        let last = KEY_SPACE_END / PAGE_SIZE - 1;
        assert_eq!(index(last, ROOT_LEVEL), 127);
        assert!(index(last, ROOT_LEVEL) < FANOUT);
        assert_eq!(slot_start(last, 0), last);
        assert_eq!(slot_start(0x1234, 1), 0x1200);
    }
}
