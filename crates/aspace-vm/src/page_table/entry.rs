//! Page-table entry encoding: the address split (index, shift and span of each level), the bits
//! of an intermediate entry, and the leaf entry [`Pte`].
//!
//! A 48-bit virtual address is split 9/9/9/9/12 like x86-64's: the root (level 4) table indexes
//! bits 39..47, level 3 bits 30..38, level 2 bits 21..29, and a leaf (level 1) table bits
//! 12..20. An entry of a level-4/3/2 table is 0 or `child pointer | PRESENT` (plus `LOCKED` on
//! level-2 entries: the fill lock of the leaf table they point to). A leaf entry is a [`Pte`]:
//! bit 0 present, bit 1 writable, bit 2 readable, bit 3 executable, the frame index from bit 12.
//!
//! Not for: walking or changing tables (`mod.rs`), table memory (`pool.rs`).

use crate::frames::Frame;
use crate::types::Prot;

/// Entries per table.
pub(super) const ENTRIES: usize = 512;
/// Levels of tables (the root is level 4, leaves level 1).
pub(super) const LEVELS: u32 = 4;
/// Bits of virtual address the tables translate.
pub(crate) const VA_BITS: u32 = 12 + 9 * LEVELS;
/// Intermediate entry: points to a child table.
pub(super) const PRESENT: u64 = 1;
/// Level-2 entry: the leaf table it points to is locked for fills/clears/protects.
pub(super) const LOCKED: u64 = 1 << 1;
/// The child pointer of an intermediate entry (tables are 64-byte aligned).
pub(super) const ADDR_MASK: u64 = !0x3f;

/// Shift of the address bits a level-`level` table indexes.
#[inline]
pub(super) const fn shift(level: u32) -> u32 {
    12 + 9 * (level - 1)
}

/// Index into a level-`level` table for `va`.
#[inline]
pub(super) const fn index(va: u64, level: u32) -> usize {
    ((va >> shift(level)) & (ENTRIES as u64 - 1)) as usize
}

/// Bytes one entry of a level-`level` table covers.
#[inline]
pub(super) const fn span(level: u32) -> u64 {
    1 << shift(level)
}

/// A leaf page-table entry: bit 0 present, bit 1 writable, bit 2 readable, bit 3 executable,
/// the frame index in bits 12 and up.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub(crate) struct Pte(u64);

impl Pte {
    pub(super) const PRESENT: u64 = 1;
    const WRITABLE: u64 = 1 << 1;
    const READABLE: u64 = 1 << 2;
    const EXEC: u64 = 1 << 3;
    const RIGHTS: u64 = Self::WRITABLE | Self::READABLE | Self::EXEC;
    const FRAME_SHIFT: u32 = 12;

    /// A present entry mapping `frame` with `prot` (unknown protection bits are dropped).
    #[inline]
    pub(crate) fn new(frame: Frame, prot: Prot) -> Pte {
        Pte(Self::PRESENT | Self::rights(prot) | (u64::from(frame.index()) << Self::FRAME_SHIFT))
    }

    /// The entry whose raw bits are `bits` (as loaded from a leaf table).
    #[inline]
    pub(super) const fn from_bits(bits: u64) -> Pte {
        Pte(bits)
    }

    #[inline]
    fn rights(prot: Prot) -> u64 {
        let mut bits = 0;
        if prot.contains(Prot::READ) {
            bits |= Self::READABLE;
        }
        if prot.contains(Prot::WRITE) {
            bits |= Self::WRITABLE;
        }
        if prot.contains(Prot::EXEC) {
            bits |= Self::EXEC;
        }
        bits
    }

    /// Whether it maps a frame.
    #[inline]
    pub(crate) fn present(self) -> bool {
        self.0 & Self::PRESENT != 0
    }

    /// The frame it maps (meaningful only when present).
    #[inline]
    pub(crate) fn frame(self) -> Frame {
        Frame::from_index((self.0 >> Self::FRAME_SHIFT) as u32)
    }

    /// Its protection (`PROT_*` bits).
    #[inline]
    pub(crate) fn prot(self) -> Prot {
        let mut bits = 0;
        if self.0 & Self::READABLE != 0 {
            bits |= Prot::READ.bits();
        }
        if self.0 & Self::WRITABLE != 0 {
            bits |= Prot::WRITE.bits();
        }
        if self.0 & Self::EXEC != 0 {
            bits |= Prot::EXEC.bits();
        }
        Prot::from_bits_retain(bits)
    }

    /// The same entry with protection `prot`.
    #[inline]
    pub(crate) fn with_prot(self, prot: Prot) -> Pte {
        Pte(self.0 & !Self::RIGHTS | Self::rights(prot))
    }

    /// The raw bits.
    #[allow(dead_code)] // diagnostics and tests
    #[inline]
    pub(crate) fn bits(self) -> u64 {
        self.0
    }
}

/// Whether going from `old` to `new` takes away an access right (x86 rules: write or exec
/// imply read), i.e. whether cached translations must be shot down.
#[inline]
pub(crate) fn rights_removed(old: Prot, new: Prot) -> bool {
    use crate::types::Access;
    [Access::Read, Access::Write, Access::Exec]
        .into_iter()
        .any(|a| old.allows(a) && !new.allows(a))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pte_encodes_frame_and_protection() {
        let f = Frame::from_index(0xdead_beef);
        for bits in 0..8 {
            let prot = Prot::from_bits_retain(bits);
            let pte = Pte::new(f, prot);
            assert!(pte.present());
            assert_eq!(pte.frame(), f);
            assert_eq!(pte.prot(), prot);
            assert_eq!(pte.bits() & 0xfff & !0xf, 0);
            assert_eq!(Pte::from_bits(pte.bits()), pte);
        }
        assert_eq!(
            Pte::new(f, Prot::READ).with_prot(Prot::NONE).prot(),
            Prot::NONE
        );
        assert!(
            Pte::new(f, Prot::NONE).present(),
            "PROT_NONE pages keep their frame"
        );
    }

    #[test]
    fn rights_removed_follows_the_x86_implications() {
        // WRITE alone implies READ (x86): READ|WRITE -> WRITE removes nothing.
        assert!(!rights_removed(Prot::READ_WRITE, Prot::WRITE));
        assert!(rights_removed(Prot::READ_WRITE, Prot::READ));
        assert!(rights_removed(Prot::READ, Prot::NONE));
        assert!(!rights_removed(Prot::NONE, Prot::READ));
    }

    #[test]
    fn index_shift_and_span_split_the_address_9_9_9_9_12() {
        let va = 0x7f12_3456_7000u64;
        assert_eq!(index(va, 1), ((va >> 12) & 511) as usize);
        assert_eq!(index(va, 4), ((va >> 39) & 511) as usize);
        assert_eq!(span(1), 4096);
        assert_eq!(span(2), 2 << 20);
        assert_eq!(span(3), 1 << 30);
        assert_eq!(span(4) * ENTRIES as u64, 1 << VA_BITS);
    }
}
