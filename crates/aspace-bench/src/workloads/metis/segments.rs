//! The per-worker allocator of the `metis` workloads: a bump allocator over segments it maps
//! from the address space, in the manner of Streamflow as Metis used it [ASPLOS'12 §6: "a
//! per-core allocator that mmaps 8 MB segments"].
//!
//! A worker's [`Segments`] hands out page-sized, page-aligned chunks ([`Segments::alloc_page`])
//! from the segment it mapped last, and maps a fresh segment of the configured size through the
//! worker's [`VmCore`] (no hint: the space places it) when that one is full. Nothing is freed
//! chunk by chunk: at the end of a job [`Segments::unmap_all`] unmaps every segment, so the next
//! job maps fresh ones and faults their pages in again, the work Metis gives the VM system. A
//! chunk's pages are only touched (and so only cost frames) when the worker writes them.
//!
//! Invariants: `next..end` is the unused tail of the last segment (empty when there is none);
//! every address handed out lies in a segment listed in `mapped` until `unmap_all`.
//!
//! Not for: objects larger than a page (tables are chains of pages, see `table.rs`) or freeing
//! single objects.

use super::super::vm::{VmCore, PAGE};

/// One worker's segments.
#[derive(Debug)]
pub struct Segments {
    /// Bytes per segment (a multiple of [`PAGE`]).
    size: u64,
    /// Start of every segment mapped since the last [`Segments::unmap_all`].
    mapped: Vec<u64>,
    /// Next free byte of the last segment.
    next: u64,
    /// End of the last segment.
    end: u64,
    /// Segments mapped since this allocator was made.
    total_mapped: u64,
}

impl Segments {
    /// An allocator mapping segments of `size` bytes (a non-zero multiple of [`PAGE`]).
    pub fn new(size: u64) -> Segments {
        assert!(size >= PAGE && size % PAGE == 0, "segment size {size}");
        Segments {
            size,
            mapped: Vec::new(),
            next: 0,
            end: 0,
            total_mapped: 0,
        }
    }

    /// A fresh page-aligned page of the current segment, mapping a new segment if it is full.
    pub fn alloc_page<C: VmCore>(&mut self, core: &mut C) -> u64 {
        if self.next == self.end {
            let start = core.mmap(0, self.size);
            self.mapped.push(start);
            self.total_mapped += 1;
            self.next = start;
            self.end = start + self.size;
        }
        let page = self.next;
        self.next += PAGE;
        page
    }

    /// Segments mapped since this allocator was made.
    pub fn total_mapped(&self) -> u64 {
        self.total_mapped
    }

    /// Unmaps every segment.
    ///
    /// # Safety
    /// No thread may access a page handed out since the last call any more (on `linux` it
    /// would touch unmapped memory).
    pub unsafe fn unmap_all<C: VmCore>(&mut self, core: &mut C) {
        for &s in &self.mapped {
            // SAFETY: a segment this allocator mapped through the driver; the caller
            // guarantees nobody uses its pages any more.
            unsafe { core.munmap(s, self.size) };
        }
        self.mapped.clear();
        self.next = 0;
        self.end = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::vm::{LinuxDriver, VmDriver};
    use super::*;

    #[test]
    fn pages_come_from_segments_of_the_configured_size_and_are_unmapped_at_the_end() {
        let mut core = LinuxDriver.attach();
        let mut segs = Segments::new(4 * PAGE);
        let pages: Vec<u64> = (0..6).map(|_| segs.alloc_page(&mut core)).collect();
        assert_eq!(segs.total_mapped(), 2);
        assert_eq!(segs.mapped.len(), 2);
        for (i, &p) in pages.iter().enumerate() {
            let seg = segs.mapped[i / 4];
            assert_eq!(p, seg + (i as u64 % 4) * PAGE, "page {i}");
            // SAFETY: a page of a segment this thread mapped.
            unsafe { core.write(p, &[i as u8; 8]) };
        }
        // SAFETY: nothing uses the pages afterwards.
        unsafe { segs.unmap_all(&mut core) };
        assert!(segs.mapped.is_empty());
        let p = segs.alloc_page(&mut core);
        assert_eq!(segs.total_mapped(), 3, "a fresh segment after unmap_all");
        // SAFETY: as above.
        unsafe { segs.unmap_all(&mut core) };
        let _ = p;
    }
}
