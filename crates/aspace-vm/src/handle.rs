//! A core's handle ([`CoreHandle`]) and the access path (`read`, `write`, `touch`), shared by
//! every design; also [`AddressSpace::attach`], which makes handles.
//!
//! A [`CoreHandle`] is one attached thread's view of the space: its soft TLB, its free-frame
//! cache, its shootdown slot and its RCU reader (`core_state::Core`). It is `Send` (it may move
//! to another thread) but not `Sync` (one thread uses it at a time). Dropping it detaches the
//! core: its frame cache is drained to the global pool, its counters folded into the space's
//! totals, its shootdown slot released. In a forked child of the process that built the space,
//! dropping it leaks the whole core instead and touches no lock (`fork.rs`).
//!
//! # The access path
//!
//! ```text
//! loop {
//!     open an access window   (flushes the TLB if a shootdown was requested)
//!     for each page: translate (TLB, else a lock-free page-table walk under the RCU guard);
//!         none -> drop the window, call the design's fault handler OUTSIDE it (it takes
//!         locks), and retry
//!     copy the bytes (only after every page translated: a failing write copies nothing)
//!     drop the window
//! }
//! ```
//!
//! Translations gathered in one window stay usable in the next unless opening it flushed: a
//! shootdown that removed one of them either bumped our request before that window opened (we
//! flush and start over) or waits for the window to end before its caller frees the frame
//! (`shootdown.rs`). So a multi-page access that faults on page `k` keeps pages `0..k` and
//! resumes at `k`.
//!
//! Frame memory is shared with other cores, which may read and write the same page through
//! their own translations (like RAM under real CPUs). Bytes move in aligned atomic words
//! (`frame_io.rs`): a concurrent reader sees each aligned 8-byte word either before or after a
//! concurrent write of it, never torn.
//!
//! Not for: region rules or locks (`designs/`), validation (`semantics.rs`).

use crate::access::AccessWindow;
use crate::core_state::Core;
use crate::designs::DesignOps;
use crate::error::{Fault, VmError};
use crate::frame_io;
use crate::semantics;
use crate::space::{AddressSpace, Space};
use crate::types::{Access, Advice, MapFlags, Prot, PAGE_SIZE};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// One core's handle on an [`crate::AddressSpace`].
pub struct CoreHandle {
    space: Arc<Space>,
    /// Dropped by hand (see `Drop`): detached then dropped in the process that built the
    /// space, leaked whole in a forked child.
    core: ManuallyDrop<Core>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl std::fmt::Debug for CoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreHandle")
            .field("core", &self.core.id.index())
            .finish()
    }
}

impl AddressSpace {
    /// Attaches a new core: a handle through which one thread at a time maps, unmaps and
    /// accesses memory. The handle is `Send` (it may move to another thread), not `Sync`; use
    /// one per thread. Dropping it detaches the core.
    ///
    /// # Errors
    /// [`VmError::TooManyCores`] when `max_cores` handles are alive; [`VmError::ForkedChild`]
    /// in a forked child of the process that built the space.
    pub fn attach(&self) -> Result<CoreHandle, VmError> {
        if self.space.shared.in_forked_child() {
            return Err(VmError::ForkedChild);
        }
        let core = Core::attach(&self.space.shared)?;
        Ok(CoreHandle {
            space: Arc::clone(&self.space),
            core: ManuallyDrop::new(core),
            _not_sync: PhantomData,
        })
    }
}

impl CoreHandle {
    /// The space and this core, unless this is a forked child using its parent's space
    /// (`fork.rs`).
    #[inline]
    fn parts(&mut self) -> Result<(&Space, &mut Core), VmError> {
        if self.space.shared.in_forked_child() {
            return Err(VmError::ForkedChild);
        }
        close_leaked_session(&self.space.shared, &mut self.core);
        Ok((&self.space, &mut *self.core))
    }

    /// The space and this core for a session (`session.rs`), unless this is a forked child.
    pub(crate) fn session_parts(&mut self) -> Result<(&Space, &mut Core), VmError> {
        self.parts()
    }

    /// Maps `len` bytes (rounded up to pages) like `mmap(addr, len, prot, flags, -1, 0)`:
    /// `addr` is a hint (0 for none), or the exact place with `MAP_FIXED` (replacing what is
    /// there) or `MAP_FIXED_NOREPLACE` (`EEXIST` if anything is there). Returns the start.
    ///
    /// # Errors
    /// Linux's errno for the same call: `EINVAL`, `ENOMEM`, `EEXIST`, `EBADF`, `EOPNOTSUPP`,
    /// `EPERM` (see [`VmError`]).
    pub fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<u64, VmError> {
        let (Space { design, shared }, core) = self.parts()?;
        let req = semantics::check_mmap(addr, len, prot, flags, shared.bounds)?;
        let r = design.mmap(shared, core, req);
        // A `MAP_FIXED` over mapped pages freed their frames: zeroed here, outside its locks.
        core.release_freed(shared);
        r
    }

    /// Unmaps `[addr, addr + len)` like `munmap`: regions are split, unmapping nothing is fine.
    /// When it returns, no core can access the old pages and their frames may be reused.
    ///
    /// # Errors
    /// `EINVAL` for bad input; `ENOMEM` when a split would exceed `max_map_count`.
    pub fn munmap(&mut self, addr: u64, len: u64) -> Result<(), VmError> {
        let (Space { design, shared }, core) = self.parts()?;
        let range = semantics::check_munmap(addr, len, shared.bounds)?;
        let r = design.munmap(shared, core, range);
        // The unmapped frames are zeroed here, outside the call's locks.
        core.release_freed(shared);
        r
    }

    /// Changes the protection of `[addr, addr + len)` like `mprotect`.
    ///
    /// # Errors
    /// `EINVAL` for bad input or unknown bits; `ENOMEM` on a hole (after changing the regions
    /// before it, like Linux) or when splits would exceed `max_map_count`.
    pub fn mprotect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), VmError> {
        let (Space { design, shared }, core) = self.parts()?;
        match semantics::check_mprotect(addr, len, prot)? {
            None => Ok(()),
            Some((range, prot)) => design.mprotect(shared, core, range, prot),
        }
    }

    /// Gives advice about `[addr, addr + len)` like `madvise`; `DONTNEED` drops the pages.
    ///
    /// # Errors
    /// `EINVAL` for bad input or unknown advice; `ENOMEM` when part of the range is unmapped
    /// (after applying the advice to the mapped parts, like Linux).
    pub fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<(), VmError> {
        let (Space { design, shared }, core) = self.parts()?;
        match semantics::check_madvise(addr, len, advice)? {
            None => Ok(()),
            Some((range, effect)) => {
                let r = design.madvise(shared, core, range, effect);
                // `DONTNEED`'s frames are zeroed here, outside the call's locks.
                core.release_freed(shared);
                r
            }
        }
    }

    /// Drops this core's own page tables, as a kernel does under memory pressure, and returns
    /// how many tables were freed (after a grace period). Only a design with per-core page
    /// tables ([`Design::Radix`](crate::Design::Radix)) has any to drop: its tables are
    /// copies of the design's per-page metadata, refilled by faults on the next accesses
    /// (RadixVM §3.3), and the empty tables of that metadata where no region lies are freed
    /// too; under the others (one shared tree whose entries own the frames) this
    /// returns 0 and changes nothing. Memory contents are unaffected either way.
    ///
    /// # Errors
    /// As every call of a handle: none except in a forked child.
    pub fn discard_page_tables(&mut self) -> Result<usize, VmError> {
        let (Space { design, shared }, core) = self.parts()?;
        let n = core.discard_tables(shared);
        // The design's own empty metadata tables go too (`radix`'s owner tree).
        design.reclaim_tables(shared, core);
        Ok(n)
    }

    /// Copies `buf.len()` bytes starting at `addr` into `buf`, faulting pages in as needed.
    /// Each aligned 8-byte word is read atomically (whole, never torn by a concurrent write).
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be read.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let len = buf.len() as u64;
        self.access(addr, len, Access::Read, |frame, off, n| {
            // SAFETY: `frame .. frame + n` lies inside one frame translated in the current
            // access window (so it is not freed or reused until the window ends), and every
            // access to frame memory goes through `frame_io`.
            unsafe { frame_io::read_from_frame(frame as *const u8, &mut buf[off..off + n]) }
        })
    }

    /// Copies `buf` to memory starting at `addr`, faulting pages in as needed. Each aligned
    /// 8-byte word is written atomically.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be written; nothing is written then.
    pub fn write(&mut self, addr: u64, buf: &[u8]) -> Result<(), Fault> {
        let len = buf.len() as u64;
        self.access(addr, len, Access::Write, |frame, off, n| {
            // SAFETY: as in `read`; the translation allows writes.
            unsafe { frame_io::write_to_frame(&buf[off..off + n], frame as *mut u8) }
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

    /// The access path (module doc), [`access_path`] on this handle's core.
    #[inline]
    fn access(
        &mut self,
        addr: u64,
        len: u64,
        access: Access,
        copy: impl FnMut(usize, usize, usize),
    ) -> Result<(), Fault> {
        if len == 0 {
            return Ok(());
        }
        if self.space.shared.in_forked_child() {
            return Err(Fault::ForkedChild { addr });
        }
        close_leaked_session(&self.space.shared, &mut self.core);
        access_path(self.space.as_ref(), &mut self.core, addr, len, access, copy)
    }
}

/// Closes the window of a session that was leaked (`mem::forget`) instead of dropped: its
/// borrow of the handle is over, so nothing uses the window any more, and leaving it open would
/// hold every shooter forever.
#[inline(always)]
fn close_leaked_session(sh: &crate::shared::Shared, core: &mut Core) {
    if core.in_session {
        core.in_session = false;
        sh.shootdown.end_access(core.id);
    }
}

/// The access path (module doc): translates every page of `[addr, addr + len)` (`len > 0`)
/// for `access`, handling faults outside the access window, then calls `copy(frame address,
/// offset into the access, bytes)` for each page piece inside one window. The core must not be
/// inside a window (a session steps out before calling this).
#[inline]
pub(crate) fn access_path(
    space: &Space,
    core: &mut Core,
    addr: u64,
    len: u64,
    access: Access,
    mut copy: impl FnMut(usize, usize, usize),
) -> Result<(), Fault> {
    let Space { design, shared: sh } = space;
    let in_page = (addr % PAGE_SIZE) as usize;
    let result = if in_page as u64 + len <= PAGE_SIZE {
        // One page: no scratch list.
        loop {
            let mut window = AccessWindow::open(sh, core);
            if let Some(frame) = window.translate(addr, access) {
                copy(frame + in_page, 0, len as usize);
                break Ok(());
            }
            drop(window);
            if let Err(f) = design.fault(sh, core, addr, access) {
                break Err(f);
            }
        }
    } else {
        CoreHandle::access_pages(space, core, addr, len, access, &mut copy)
    };
    sh.counters
        .of(core.id)
        .publish_tlb(core.tlb.hits(), core.tlb.misses());
    result
}

impl CoreHandle {
    /// The multi-page case of [`CoreHandle::access`].
    fn access_pages(
        space: &Space,
        core: &mut Core,
        addr: u64,
        len: u64,
        access: Access,
        copy: &mut impl FnMut(usize, usize, usize),
    ) -> Result<(), Fault> {
        let Space { design, shared: sh } = space;
        let first = addr & !(PAGE_SIZE - 1);
        // The last byte; an access running past 2^64 faults at the first unmapped page anyway
        // (nothing maps above max_addr), so clamp instead of overflowing.
        let last = addr.saturating_add(len - 1);
        let npages = ((last - first) / PAGE_SIZE + 1) as usize;
        let mut pages = std::mem::take(&mut core.pages);
        pages.clear();
        let result = 'outer: loop {
            let mut window = AccessWindow::open(sh, core);
            if window.flushed() {
                // Translations of earlier windows may be stale: start over.
                pages.clear();
            }
            while pages.len() < npages {
                let page = first + pages.len() as u64 * PAGE_SIZE;
                match window.translate(page, access) {
                    Some(frame) => pages.push(frame),
                    None => {
                        drop(window);
                        if let Err(f) = design.fault(sh, core, page.max(addr), access) {
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
            break Ok(());
        };
        core.pages = pages;
        result
    }
}

#[cfg(all(test, not(loom)))]
impl CoreHandle {
    /// This core's slot (tests that look at its shootdown state).
    pub(crate) fn core_id(&self) -> crate::shootdown::CoreId {
        self.core.id
    }
}

impl Drop for CoreHandle {
    fn drop(&mut self) {
        if self.space.shared.in_forked_child() {
            // The core's slots and the pools' locks belong to the parent's threads, which may
            // have held a lock at the fork: not only `detach` but the core's fields' own drops
            // take locks (the page-table cache gives its tables to the pool's lists, the RCU
            // reader leaves the domain's registry) or check what only `detach` ensures (the
            // frame cache's drained assertion). So the whole core is leaked, like the space
            // (`fork.rs`); dropping the `Arc` of the space touches no lock either.
            return;
        }
        close_leaked_session(&self.space.shared, &mut self.core);
        // The design's own empty metadata tables where no region lies go before the core does
        // (`radix`'s owner tree keeps the tables at the edges of what its windows held until a
        // reclaim; nothing to do for the other designs): after every core detached, the page
        // tables are back to the space's baseline (issue 21).
        self.space
            .design
            .reclaim_tables(&self.space.shared, &mut self.core);
        self.core.detach(&self.space.shared);
        // SAFETY: dropped once, here, and never used again (`self` is being dropped).
        unsafe { ManuallyDrop::drop(&mut self.core) };
    }
}
