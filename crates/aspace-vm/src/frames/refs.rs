//! Reference counts of shared frames: one 32-bit count per frame of a pool, for the frames that
//! more than one owner may hold (a page-cache page: the cache and every mapping of it).
//!
//! A frame is either **exclusive** (what `FrameCache::alloc` hands out: owned by whoever took
//! it, normally one page-table entry, and freed by that owner; its count stays 0 and is never
//! touched, so anonymous memory pays nothing for this module) or **counted**: its owner made
//! it so with [`FrameRefs::share`] (count 1: the owner's own reference), and whoever drops the
//! count to 0 with [`FrameRefs::put`] frees the frame. Linux's `struct page` count, without
//! the page: the counts live in one array indexed by frame number, reserved with
//! `MAP_NORESERVE` like the frames themselves (4 bytes per 4 KiB frame, untouched pages cost
//! nothing). Today the page cache holds the only reference of its pages; file mappings and
//! copy-on-write will add holders (a `get` while holding a reference, or under the page cache's
//! grace-period rule, `page_cache.rs`), so a count never rises from 0.
//!
//! Not for: who holds the references (the page cache, page tables), or freeing (the caller
//! frees the frame whose last reference it put).

use super::Frame;
use crate::reservation::Reservation;
// `std`'s in every build: the counts are not part of a loom model, and the conflict audit does
// not record them (page-cache pages only; no workload it runs shares frames).
use std::sync::atomic::{AtomicU32, Ordering};

/// One count per frame (see the module doc).
pub(crate) struct FrameRefs {
    /// `capacity` counts, 4 bytes each, zero until touched.
    counts: Reservation,
    capacity: u64,
}

impl std::fmt::Debug for FrameRefs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameRefs")
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl FrameRefs {
    /// Counts for `capacity` frames, all 0; `None` when the reservation fails.
    pub(crate) fn new(capacity: u64) -> Option<FrameRefs> {
        let bytes = usize::try_from(capacity.checked_mul(4)?).ok()?;
        Some(FrameRefs {
            counts: Reservation::reserve(bytes.max(1))?,
            capacity,
        })
    }

    /// Frame `f`'s count.
    #[inline]
    fn count(&self, f: Frame) -> &AtomicU32 {
        assert!(
            u64::from(f.index()) < self.capacity,
            "frame {f:?} out of range"
        );
        // SAFETY: the index is below `capacity`, so the 4 aligned bytes lie inside the live
        // reservation (page aligned, `capacity * 4` long); those bytes are only ever accessed
        // as this atomic.
        unsafe { AtomicU32::from_ptr(self.counts.base().cast::<u32>().add(f.index() as usize)) }
    }

    /// Makes the exclusive frame `f` counted, with the caller's reference as its only one.
    pub(crate) fn share(&self, f: Frame) {
        // Relaxed: the frame is still the caller's alone; whoever it hands the frame to next
        // learns of it through that hand-over's own synchronization (a page-cache insert's
        // Release, a page-table fill's Release).
        let was = self.count(f).swap(1, Ordering::Relaxed);
        debug_assert_eq!(was, 0, "frame {f:?} was already counted");
    }

    /// Drops one reference to the counted frame `f`; `true` when it was the last (the caller
    /// now owns the frame exclusively and frees it: its count is 0 again).
    pub(crate) fn put(&self, f: Frame) -> bool {
        // AcqRel: Release so that every holder's accesses to the frame happen before the last
        // put; Acquire in the last put, which then frees (and zeroes) the frame after all of
        // them (the `Arc` drop protocol).
        let was = self.count(f).fetch_sub(1, Ordering::AcqRel);
        assert!(was != 0, "frame {f:?}: put without a reference");
        was == 1
    }

    /// Frame `f`'s current count (0: exclusive or free), for tests.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn load(&self, f: Frame) -> u32 {
        self.count(f).load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_shared_frame_is_freed_by_its_last_put_and_counts_are_per_frame() {
        let refs = FrameRefs::new(8).unwrap();
        let (a, b) = (Frame::from_index(3), Frame::from_index(7));
        assert_eq!(
            (refs.load(a), refs.load(b)),
            (0, 0),
            "exclusive frames are not counted"
        );
        refs.share(a);
        refs.share(b);
        assert_eq!(refs.load(a), 1);
        assert!(refs.put(a), "the only reference was the last");
        assert_eq!((refs.load(a), refs.load(b)), (0, 1));
        refs.share(a);
        assert_eq!(refs.load(a), 1, "a freed frame can be shared again");
    }

    #[test]
    #[should_panic(expected = "put without a reference")]
    fn a_put_of_an_uncounted_frame_panics_rather_than_wrapping() {
        let refs = FrameRefs::new(1).unwrap();
        refs.put(Frame::from_index(0));
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn a_frame_past_the_capacity_panics() {
        FrameRefs::new(2).unwrap().share(Frame::from_index(2));
    }
}
