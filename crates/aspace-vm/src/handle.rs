//! A core's handle and the access path (`read`, `write`, `touch`), shared by every design.
//!
//! A [`CoreHandle`] is one attached thread's view of the space: its soft TLB, its free-frame
//! cache, its shootdown slot and its RCU reader ([`Core`]). It is `Send` (it may move to another
//! thread) but not `Sync` (one thread uses it at a time). Dropping it detaches the core: its
//! frame cache is drained to the global pool, its counters folded into the space's totals, its
//! shootdown slot released.
//!
//! # The access path
//!
//! ```text
//! loop {
//!     begin_access            (odd access count; flushes the TLB if a shootdown was requested)
//!     for each page: TLB lookup, else a lock-free page-table walk under the RCU read guard;
//!         a present entry with the right -> TLB insert; otherwise -> end_access, call the
//!         design's fault handler OUTSIDE the window (it takes locks), and retry
//!     copy the bytes (only after every page translated: a failing write copies nothing)
//!     end_access
//! }
//! ```
//!
//! Translations gathered in one window stay usable in the next unless its `begin_access`
//! flushed: a shootdown that removed one of them either bumped our request before that
//! `begin_access` (we flush and start over) or waits for the window to end before its caller
//! frees the frame (`shootdown.rs`). So a multi-page access that faults on page `k` keeps pages
//! `0..k` and resumes at `k`.
//!
//! Frame memory is plain memory that other cores may read and write concurrently through their
//! own translations (like RAM under real CPUs); copies use raw pointer copies within the
//! access window, which is what keeps the frame from being freed or reused meanwhile.
//!
//! Not for: region rules or locks (`designs/`), validation (`semantics.rs`).

use crate::designs::DesignOps;
use crate::error::{Fault, VmError};
use crate::frames::{Frame, FrameCache};
use crate::semantics;
use crate::shootdown::CoreId;
use crate::space::Shared;
use crate::tlb::Tlb;
use crate::types::{Access, Advice, MapFlags, Prot, PAGE_SIZE};
use std::marker::PhantomData;
use std::sync::Arc;

/// A core's private state, lent to the design's operations.
pub(crate) struct Core {
    /// The shootdown slot (and index of the per-core arrays).
    pub(crate) id: CoreId,
    /// The last flush request this core acted on.
    pub(crate) seen: u64,
    /// The soft TLB.
    pub(crate) tlb: Tlb,
    /// The free-frame cache.
    pub(crate) cache: FrameCache,
    /// The RCU reader that protects page-table walks.
    pub(crate) reader: aspace_rcu::Reader,
    /// Scratch: frames removed by a clear, freed after the shootdown.
    pub(crate) freed: Vec<Frame>,
    /// Scratch: translated frame addresses of a multi-page access.
    pub(crate) pages: Vec<usize>,
    /// The next anon identity this core hands out, and the end of its block.
    pub(crate) anon_next: u64,
    pub(crate) anon_end: u64,
}

impl Core {
    /// A fresh anon identity from this core's block (a new block from `regions` when spent).
    pub(crate) fn fresh_anon(&mut self, regions: &crate::region::RegionSet) -> u64 {
        if self.anon_next == self.anon_end {
            self.anon_next = regions.fresh_anon_block();
            self.anon_end = self.anon_next + crate::region::ANON_BLOCK;
        }
        let id = self.anon_next;
        self.anon_next += 1;
        id
    }
}

/// One core's handle on an [`crate::AddressSpace`].
pub struct CoreHandle {
    shared: Arc<Shared>,
    core: Core,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl std::fmt::Debug for CoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreHandle")
            .field("core", &self.core.id.index())
            .finish()
    }
}

/// The page-table walk of one page inside an access window: the frame address if a present
/// entry allows `access` (and caches it in the TLB).
#[inline]
fn walk(sh: &Shared, core: &mut Core, va: u64, access: Access) -> Option<usize> {
    let pte = {
        let _guard = core.reader.read();
        sh.tables.lookup(va)?
    };
    if !pte.prot().allows(access) {
        return None;
    }
    let frame = sh.pool.ptr(pte.frame());
    core.tlb.insert(va, frame, pte.prot());
    Some(frame as usize)
}

/// Translates `va` inside an access window: TLB, then walk.
#[inline(always)]
fn translate(sh: &Shared, core: &mut Core, va: u64, access: Access) -> Option<usize> {
    match core.tlb.lookup(va, access) {
        Some(p) => Some(p as usize),
        None => walk(sh, core, va, access),
    }
}

impl CoreHandle {
    pub(crate) fn new(shared: Arc<Shared>, core: Core) -> CoreHandle {
        CoreHandle {
            shared,
            core,
            _not_sync: PhantomData,
        }
    }

    /// Maps `len` bytes (rounded up to pages) like `mmap(addr, len, prot, flags, -1, 0)`:
    /// `addr` is a hint (0 for none), or the exact place with `MAP_FIXED` (replacing what is
    /// there) or `MAP_FIXED_NOREPLACE` (`EEXIST` if anything is there). Returns the start.
    ///
    /// # Errors
    /// Linux's errno for the same call: `EINVAL`, `ENOMEM`, `EEXIST`, `EBADF`, `EOPNOTSUPP`,
    /// `EPERM` (see `semantics.rs` for every rule).
    pub fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<u64, VmError> {
        let sh = &*self.shared;
        let req = semantics::check_mmap(addr, len, prot, flags, sh.bounds)?;
        sh.design.mmap(sh, &mut self.core, req)
    }

    /// Unmaps `[addr, addr + len)` like `munmap`: regions are split, unmapping nothing is fine.
    /// When it returns, no core can access the old pages and their frames may be reused.
    ///
    /// # Errors
    /// `EINVAL` for bad input; `ENOMEM` when a split would exceed `max_map_count`.
    pub fn munmap(&mut self, addr: u64, len: u64) -> Result<(), VmError> {
        let sh = &*self.shared;
        let range = semantics::check_munmap(addr, len, sh.bounds)?;
        sh.design.munmap(sh, &mut self.core, range)
    }

    /// Changes the protection of `[addr, addr + len)` like `mprotect`.
    ///
    /// # Errors
    /// `EINVAL` for bad input or unknown bits; `ENOMEM` on a hole (after changing the regions
    /// before it, like Linux) or when splits would exceed `max_map_count`.
    pub fn mprotect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), VmError> {
        let sh = &*self.shared;
        match semantics::check_mprotect(addr, len, prot)? {
            None => Ok(()),
            Some((range, prot)) => sh.design.mprotect(sh, &mut self.core, range, prot),
        }
    }

    /// Gives advice about `[addr, addr + len)` like `madvise`; `DONTNEED` drops the pages.
    ///
    /// # Errors
    /// `EINVAL` for bad input or unknown advice; `ENOMEM` when part of the range is unmapped
    /// (after applying the advice to the mapped parts, like Linux).
    pub fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<(), VmError> {
        let sh = &*self.shared;
        match semantics::check_madvise(addr, len, advice)? {
            None => Ok(()),
            Some((range, effect)) => sh.design.madvise(sh, &mut self.core, range, effect),
        }
    }

    /// Copies `buf.len()` bytes starting at `addr` into `buf`, faulting pages in as needed.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be read.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let len = buf.len();
        let dst = buf.as_mut_ptr() as usize;
        self.access(addr, len as u64, Access::Read, |frame, off, n| {
            // SAFETY: `frame + off .. + n` lies inside one frame translated in the current
            // access window (so it is not freed or reused until the window ends), `dst + off`
            // inside `buf`; the two cannot overlap (frames are the pool's reservation).
            unsafe {
                std::ptr::copy_nonoverlapping(frame as *const u8, (dst + off) as *mut u8, n);
            }
        })
    }

    /// Copies `buf` to memory starting at `addr`, faulting pages in as needed.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be written; nothing is written then.
    pub fn write(&mut self, addr: u64, buf: &[u8]) -> Result<(), Fault> {
        let len = buf.len();
        let src = buf.as_ptr() as usize;
        self.access(addr, len as u64, Access::Write, |frame, off, n| {
            // SAFETY: as in `read`, with the roles of frame and buffer swapped; the translation
            // allows writes.
            unsafe {
                std::ptr::copy_nonoverlapping((src + off) as *const u8, frame as *mut u8, n);
            }
        })
    }

    /// Performs one access of kind `access` at `addr` (faulting the page in as needed), like a
    /// load, store or instruction fetch by the CPU.
    ///
    /// # Errors
    /// The [`Fault`] the access raises.
    pub fn touch(&mut self, addr: u64, access: Access) -> Result<(), Fault> {
        self.access(addr, 1, access, |_, _, _| {})
    }

    /// The access path (module doc): translates every page of `[addr, addr + len)` for
    /// `access`, handling faults outside the access window, then calls `copy(frame address,
    /// offset into the access, bytes)` for each page piece inside one window.
    #[inline]
    fn access(
        &mut self,
        addr: u64,
        len: u64,
        access: Access,
        mut copy: impl FnMut(usize, usize, usize),
    ) -> Result<(), Fault> {
        if len == 0 {
            return Ok(());
        }
        let sh = &*self.shared;
        let core = &mut self.core;
        let in_page = (addr % PAGE_SIZE) as usize;
        let result = if in_page as u64 + len <= PAGE_SIZE {
            // One page: no scratch list.
            loop {
                sh.shootdown
                    .begin_access(core.id, &mut core.seen, &mut core.tlb);
                match translate(sh, core, addr, access) {
                    Some(frame) => {
                        copy(frame + in_page, 0, len as usize);
                        sh.shootdown.end_access(core.id);
                        break Ok(());
                    }
                    None => {
                        sh.shootdown.end_access(core.id);
                        if let Err(f) = sh.design.fault(sh, core, addr, access) {
                            break Err(f);
                        }
                    }
                }
            }
        } else {
            Self::access_pages(sh, core, addr, len, access, &mut copy)
        };
        sh.counters(core.id)
            .publish_tlb(core.tlb.hits(), core.tlb.misses());
        result
    }

    /// The multi-page case of [`CoreHandle::access`].
    fn access_pages(
        sh: &Shared,
        core: &mut Core,
        addr: u64,
        len: u64,
        access: Access,
        copy: &mut impl FnMut(usize, usize, usize),
    ) -> Result<(), Fault> {
        let first = addr & !(PAGE_SIZE - 1);
        // The last byte; an access running past 2^64 faults at the first unmapped page anyway
        // (nothing maps above max_addr), so clamp instead of overflowing.
        let last = addr.saturating_add(len - 1);
        let npages = ((last - first) / PAGE_SIZE + 1) as usize;
        let mut pages = std::mem::take(&mut core.pages);
        pages.clear();
        let result = 'outer: loop {
            if sh
                .shootdown
                .begin_access(core.id, &mut core.seen, &mut core.tlb)
            {
                // Translations of earlier windows may be stale: start over.
                pages.clear();
            }
            while pages.len() < npages {
                let i = pages.len();
                let page = first + i as u64 * PAGE_SIZE;
                match translate(sh, core, page, access) {
                    Some(frame) => pages.push(frame),
                    None => {
                        sh.shootdown.end_access(core.id);
                        let va = page.max(addr);
                        if let Err(f) = sh.design.fault(sh, core, va, access) {
                            break 'outer Err(f);
                        }
                        continue 'outer;
                    }
                }
            }
            let mut off = 0usize;
            for (i, &frame) in pages.iter().enumerate() {
                let start = if i == 0 { (addr - first) as usize } else { 0 };
                let n = (PAGE_SIZE as usize - start).min(len as usize - off);
                copy(frame + start, off, n);
                off += n;
            }
            sh.shootdown.end_access(core.id);
            break Ok(());
        };
        core.pages = pages;
        result
    }
}

impl Drop for CoreHandle {
    fn drop(&mut self) {
        let sh = &*self.shared;
        self.core.cache.drain(&sh.pool);
        sh.counters(self.core.id)
            .publish_tlb(self.core.tlb.hits(), self.core.tlb.misses());
        sh.retire_counters(self.core.id);
        sh.shootdown.unregister(self.core.id);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{Access, AddressSpace, Advice, Fault, Limit, MapFlags, Prot, VmError, PAGE_SIZE};

    const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;
    const P: u64 = PAGE_SIZE;

    fn space(memory: u64) -> AddressSpace {
        AddressSpace::builder().memory(memory).build().unwrap()
    }

    #[test]
    fn write_then_read_round_trips_across_pages() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 3 * P, Prot::READ_WRITE, PA).unwrap();
        let data: Vec<u8> = (0..2 * P as usize + 100).map(|i| i as u8).collect();
        c.write(a + 50, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        c.read(a + 50, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(s.stats().frames_in_use, 3);
        assert_eq!(s.stats().fills, 3);
    }

    #[test]
    fn write_only_page_is_readable_before_its_first_write_like_x86() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, P, Prot::WRITE, PA).unwrap();
        let mut buf = [1u8; 8];
        c.read(a, &mut buf).unwrap();
        assert_eq!(buf, [0; 8]);
        c.touch(a, Access::Read).unwrap();
        assert_eq!(c.touch(a, Access::Exec), Err(Fault::Protection { addr: a }));
        c.write(a, &[9; 8]).unwrap();
        c.read(a, &mut buf).unwrap();
        assert_eq!(buf, [9; 8]);
    }

    #[test]
    fn written_region_made_read_only_stays_apart_from_a_fresh_read_only_neighbour() {
        // Linux: VM_ACCOUNT survives mprotect(PROT_READ) once the region has an anon_vma.
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let fixed = PA | MapFlags::FIXED;
        let a = c.mmap(0x10_0000, 2 * P, Prot::READ_WRITE, fixed).unwrap();
        c.write(a, &[1]).unwrap();
        c.mprotect(a, 2 * P, Prot::READ).unwrap();
        c.mmap(a + 2 * P, P, Prot::READ, fixed).unwrap();
        assert_eq!(s.maps().len(), 2);
        // Never written: mprotect drops VM_ACCOUNT and the neighbours merge.
        let b = c.mmap(0x20_0000, 2 * P, Prot::READ_WRITE, fixed).unwrap();
        c.mprotect(b, 2 * P, Prot::READ).unwrap();
        c.mmap(b + 2 * P, P, Prot::READ, fixed).unwrap();
        assert!(s.maps().iter().any(|r| r.start == b && r.end == b + 3 * P));
    }

    #[test]
    fn fresh_pages_read_as_zero() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 2 * P, Prot::READ, PA).unwrap();
        let mut buf = vec![1u8; 2 * P as usize];
        c.read(a, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn read_after_munmap_faults_and_frames_are_returned() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
        c.write(a, &[7; 4 * 4096]).unwrap();
        c.munmap(a, 4 * P).unwrap();
        assert_eq!(c.touch(a, Access::Read), Err(Fault::Unmapped { addr: a }));
        let st = s.stats();
        assert_eq!(st.frames_in_use, 0);
        assert_eq!(st.page_tables, 1, "tables freed with the neighbouring gaps");
        assert_eq!(st.regions, 0);
        assert!(st.shootdowns_sent >= 1);
    }

    #[test]
    fn protection_faults_are_accerr_and_unmapped_are_maperr() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, P, Prot::READ, PA).unwrap();
        let e = c.write(a + 8, &[1]).unwrap_err();
        assert_eq!(e, Fault::Protection { addr: a + 8 });
        assert_eq!(e.si_code(), Some(2));
        assert_eq!(c.touch(a, Access::Exec), Err(Fault::Protection { addr: a }));
        let none = c.mmap(0, P, Prot::NONE, PA).unwrap();
        assert_eq!(
            c.touch(none, Access::Read),
            Err(Fault::Protection { addr: none })
        );
        let e = c.touch(0x10_0000, Access::Read).unwrap_err();
        assert_eq!(e.si_code(), Some(1));
    }

    #[test]
    fn a_failing_multi_page_write_writes_nothing() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 2 * P, Prot::READ_WRITE, PA).unwrap();
        c.mprotect(a + P, P, Prot::READ).unwrap();
        let e = c.write(a + P - 4, &[9; 8]).unwrap_err();
        assert_eq!(e, Fault::Protection { addr: a + P });
        let mut b = [1u8; 4];
        c.read(a + P - 4, &mut b).unwrap();
        assert_eq!(b, [0; 4]);
    }

    #[test]
    fn mprotect_downgrade_is_seen_through_the_tlb() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
        c.write(a, &[5]).unwrap();
        c.write(a, &[6]).unwrap(); // TLB hit
        c.mprotect(a, P, Prot::READ).unwrap();
        assert_eq!(c.write(a, &[7]), Err(Fault::Protection { addr: a }));
        let mut b = [0];
        c.read(a, &mut b).unwrap();
        assert_eq!(b, [6]);
        c.mprotect(a, P, Prot::READ_WRITE).unwrap();
        c.write(a, &[8]).unwrap();
        c.read(a, &mut b).unwrap();
        assert_eq!(b, [8]);
    }

    #[test]
    fn mprotect_over_a_hole_applies_the_prefix_then_fails() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 3 * P, Prot::READ_WRITE, PA).unwrap();
        c.munmap(a + P, P).unwrap();
        assert_eq!(
            c.mprotect(a, 3 * P, Prot::READ),
            Err(VmError::OutOfMemory(Limit::Hole))
        );
        let m = s.maps();
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].start, m[0].prot), (a, Prot::READ));
        assert_eq!((m[1].start, m[1].prot), (a + 2 * P, Prot::READ_WRITE));
        assert_eq!(
            c.mprotect(a + P, P, Prot::READ).unwrap_err().errno(),
            libc::ENOMEM
        );
    }

    #[test]
    fn madvise_dontneed_zeroes_private_pages_even_across_a_hole() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 3 * P, Prot::READ_WRITE, PA).unwrap();
        c.write(a, &[1]).unwrap();
        c.write(a + 2 * P, &[2]).unwrap();
        c.munmap(a + P, P).unwrap();
        assert_eq!(
            c.madvise(a, 3 * P, Advice::DONTNEED),
            Err(VmError::OutOfMemory(Limit::Hole))
        );
        let mut b = [9];
        c.read(a, &mut b).unwrap();
        assert_eq!(b, [0]);
        c.read(a + 2 * P, &mut b).unwrap();
        assert_eq!(b, [0]);
        assert_eq!(s.stats().frames_in_use, 2, "two fresh zero pages");
    }

    #[test]
    fn madvise_dontneed_keeps_shared_contents() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let flags = MapFlags::SHARED | MapFlags::ANONYMOUS;
        let a = c.mmap(0, P, Prot::READ_WRITE, flags).unwrap();
        c.write(a, &[7]).unwrap();
        c.madvise(a, P, Advice::DONTNEED).unwrap();
        let mut b = [0];
        c.read(a, &mut b).unwrap();
        assert_eq!(b, [7]);
    }

    #[test]
    fn fixed_replaces_and_noreplace_fails_with_eexist() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0x20_0000, 2 * P, Prot::READ_WRITE, PA).unwrap();
        assert_eq!(a, 0x20_0000, "a free hint is honoured");
        c.write(a, &[3]).unwrap();
        assert_eq!(
            c.mmap(a, P, Prot::READ, PA | MapFlags::FIXED_NOREPLACE),
            Err(VmError::Exists)
        );
        assert_eq!(c.mmap(a, P, Prot::READ, PA | MapFlags::FIXED).unwrap(), a);
        let mut b = [9];
        c.read(a, &mut b).unwrap();
        assert_eq!(b, [0], "the replaced page's contents are gone");
        assert_eq!(s.maps().len(), 2);
        // An occupied hint is moved elsewhere.
        let h = c.mmap(a, P, Prot::READ, PA).unwrap();
        assert_ne!(h, a);
    }

    #[test]
    fn adjacent_mappings_merge_in_maps() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
        let b = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
        assert_eq!(b + P, a, "top-down placement directly below");
        let m = s.maps();
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].start, m[0].end), (b, a + P));
    }

    #[test]
    fn map_count_limit_is_enomem_with_nothing_changed() {
        let s = AddressSpace::builder()
            .memory(1 << 20)
            .max_map_count(2)
            .build()
            .unwrap();
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
        c.mprotect(a, P, Prot::READ).unwrap();
        assert_eq!(s.maps().len(), 2);
        let before = s.maps();
        assert_eq!(
            c.mprotect(a + 2 * P, P, Prot::READ),
            Err(VmError::OutOfMemory(Limit::MapCount))
        );
        assert_eq!(
            c.munmap(a + 2 * P, P),
            Err(VmError::OutOfMemory(Limit::MapCount))
        );
        assert_eq!(
            c.mmap(0, P, Prot::NONE, PA).unwrap_err(),
            VmError::OutOfMemory(Limit::MapCount)
        );
        // A mapping that merges with its neighbour needs no new region.
        c.mmap(0, P, Prot::READ, PA).unwrap();
        assert_eq!(s.maps().len(), 2);
        c.munmap(a - P, P).unwrap();
        assert_eq!(s.maps(), before);
    }

    #[test]
    fn frame_exhaustion_is_enomem_and_changes_nothing() {
        let s = AddressSpace::builder()
            .memory(4 * P)
            .frame_batch(2)
            .build()
            .unwrap();
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 8 * P, Prot::READ_WRITE, PA).unwrap();
        for i in 0..4 {
            c.write(a + i * P, &[1]).unwrap();
        }
        let before = s.stats();
        assert_eq!(
            c.write(a + 4 * P, &[1]),
            Err(Fault::OutOfMemory { addr: a + 4 * P })
        );
        let after = s.stats();
        assert_eq!(after.frames_in_use, before.frames_in_use);
        assert_eq!(s.maps().len(), 1);
        c.munmap(a, P).unwrap();
        c.write(a + 4 * P, &[1]).unwrap();
    }

    #[test]
    fn populate_fills_every_page() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        c.mmap(0, 5 * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
            .unwrap();
        assert_eq!(s.stats().frames_in_use, 5);
        assert_eq!(s.stats().faults, 0);
    }

    #[test]
    fn detach_returns_cached_frames_and_frees_the_slot() {
        let s = AddressSpace::builder()
            .memory(1 << 20)
            .max_cores(1)
            .build()
            .unwrap();
        let mut c = s.attach().unwrap();
        assert_eq!(s.attach().unwrap_err(), VmError::TooManyCores(1));
        let a = c.mmap(0, 8 * P, Prot::READ_WRITE, PA).unwrap();
        c.write(a, &[1; 8 * 4096]).unwrap();
        c.munmap(a, 8 * P).unwrap();
        drop(c);
        let st = s.stats();
        assert_eq!(st.cores, 0);
        assert_eq!(st.frames_in_use, 0);
        assert_eq!(st.fills, 8, "counters survive the detach");
        let c2 = s.attach().unwrap();
        drop(c2);
    }

    #[test]
    fn a_handle_moves_to_another_thread() {
        let s = space(1 << 20);
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
        c.write(a, &[4]).unwrap();
        let mut c = std::thread::spawn(move || {
            let mut b = [0];
            c.read(a, &mut b).unwrap();
            assert_eq!(b, [4]);
            c
        })
        .join()
        .unwrap();
        c.munmap(a, P).unwrap();
    }

    #[test]
    fn two_cores_see_each_others_writes_and_unmaps() {
        let s = space(1 << 20);
        let mut c1 = s.attach().unwrap();
        let mut c2 = s.attach().unwrap();
        let a = c1.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
        c1.write(a, &[1]).unwrap();
        let mut b = [0];
        c2.read(a, &mut b).unwrap(); // c2 caches the translation
        assert_eq!(b, [1]);
        c1.munmap(a, P).unwrap();
        assert_eq!(c2.read(a, &mut b), Err(Fault::Unmapped { addr: a }));
        assert!(s.stats().shootdowns_received >= 1);
    }
}
