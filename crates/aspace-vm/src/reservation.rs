//! The one audited raw-memory module of the crate: the `MAP_NORESERVE` reservation that backs
//! every frame.
//!
//! What it is: [`Reservation::reserve`] asks the kernel for one private anonymous mapping of the
//! requested size with `MAP_NORESERVE` (no swap accounting: untouched pages cost nothing, a
//! reservation larger than free memory is fine until it is touched) and [`Drop`] gives it back
//! with `munmap`. This is the only place in the crate that calls `mmap`/`munmap`; the frame pool
//! (`frames.rs`) hands out 4 KiB slices of it by index.
//!
//! Invariants: while a `Reservation` lives, `[base, base + len)` is readable and writable memory
//! owned by it, page aligned, and every byte that nobody wrote since the reservation reads as zero
//! (fresh anonymous memory). Nothing is mapped over it or unmapped from it until `Drop`.
//!
//! Not for: per-frame bookkeeping (that is `frames.rs`), page-table memory (ordinary boxed
//! allocations in `page_table.rs`), or giving memory back to the kernel piecemeal.

use std::ptr::NonNull;

/// One private anonymous `MAP_NORESERVE` mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Reservation` is a plain region of process memory; it owns no thread-affine state.
// Moving the owner to another thread, or sharing `&Reservation` (which only exposes the base
// address and the length), cannot cause a data race by itself; every access to the memory goes
// through raw pointers whose users justify their own synchronization.
unsafe impl Send for Reservation {}
// SAFETY: see `Send` above: `&Reservation` gives out only the address and the length.
unsafe impl Sync for Reservation {}

impl Reservation {
    /// Reserves `len` bytes (rounded up to whole pages by the kernel). Returns `None` when the
    /// kernel refuses (address-space exhaustion, `len == 0`, an overcommit policy that forbids it).
    pub(crate) fn reserve(len: usize) -> Option<Reservation> {
        if len == 0 {
            return None;
        }
        // SAFETY: an anonymous private mapping at an address the kernel picks (no MAP_FIXED)
        // cannot replace or alias any existing memory of the process; the arguments are valid
        // and the result is checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(Reservation {
            base: NonNull::new(ptr.cast::<u8>())?,
            len,
        })
    }

    /// First byte of the reservation (page aligned).
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Its length in bytes, as requested.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: `[base, base + len)` is exactly the mapping `reserve` created and still owns
        // (nothing else unmaps or remaps it); `&mut self` means no borrow of the reservation is
        // alive, and the frame pool that handed out raw pointers into it is being dropped too.
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        debug_assert_eq!(rc, 0, "munmap of the frame reservation failed");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reservation_reads_zero_and_is_writable() {
        let r = Reservation::reserve(1 << 20).expect("reserve 1 MiB");
        assert_eq!(r.len(), 1 << 20);
        assert_eq!(r.base() as usize % 4096, 0);
        // SAFETY: both offsets lie inside the live reservation, which nothing else accesses.
        unsafe {
            assert_eq!(*r.base().add(12345), 0);
            *r.base().add(12345) = 7;
            assert_eq!(*r.base().add(12345), 7);
        }
    }

    #[test]
    fn zero_length_reservation_is_refused() {
        assert!(Reservation::reserve(0).is_none());
    }

    #[test]
    fn huge_noreserve_reservation_costs_nothing_until_touched() {
        // 64 GiB of address space: MAP_NORESERVE means no commit charge (the test machine has
        // far less memory). Only one page is touched.
        let r = Reservation::reserve(64 << 30).expect("MAP_NORESERVE reservation of 64 GiB");
        // SAFETY: the offset lies inside the live reservation.
        unsafe { *r.base().add(5 << 30) = 1 };
    }
}
