//! Access sessions ([`Session`]): many loads and stores of one core inside one access window,
//! at near-raw speed, for the users that access guest memory on every instruction (emulators,
//! interpreters, VMM device models).
//!
//! A `CoreHandle`'s `read`/`write`/`touch` each open and close an access window, and opening
//! one is a store, a `SeqCst` fence and a load (`shootdown.rs`): about 10 ns for an 8-byte
//! TLB hit against 1.5 ns for a plain load. A session opens the window once
//! ([`CoreHandle::session`]) and keeps it open until it is dropped; an access inside it is a
//! relaxed load of the core's own flush-request word (compared with the request it last acted
//! on), a soft-TLB lookup and one atomic load or store of the frame word. This is how QEMU's
//! multi-threaded TCG keeps its vCPUs fast: cross-CPU TLB flushes are taken at safe points
//! (`async_run_on_cpu`), not fenced against on every access.
//!
//! # Protocol
//!
//! (The full argument is in `shootdown.rs`, "Sessions".) A shooter that removed a translation
//! bumps the request word of every target core and waits for each target it finds inside a
//! window until that window ends. A session checks its request word at every access and at
//! [`Session::poll`]; when it sees a new request it *renews*: ends its window (which releases
//! the waiting shooter) and opens a new one, which flushes its TLB. A fault steps out the same
//! way: the window ends, the design's fault handler runs outside it (it takes locks and may
//! wait), a new window begins (also when the handler unwinds: `step_out`), and the access
//! retries. No access after `munmap` returned can
//! use the old frame: `munmap` returns only after the session's window that might hold the
//! translation ended, and every later window flushed first.
//!
//! # Latency contract
//!
//! **A shooter (`munmap`, a rights-removing `mprotect`, `madvise(DONTNEED)` on another core)
//! waits for a session at most until the session's next access or [`Session::poll`] after its
//! flush request became visible to the session's core** (the propagation delay of a store:
//! tens to hundreds of nanoseconds on an idle machine), plus one access (a TLB miss walks the
//! page tables; a fault steps out before it runs). A session that does not access memory and
//! does not poll (its thread computes, sleeps, blocks on I/O or is descheduled) holds every
//! shooter that targets its core, and with it whatever lock that shooter holds, until it does.
//! An idle core (no session open, no access running) is never waited for. So:
//! - call [`Session::poll`] in long loops that do not access memory, at least as often as a
//!   `munmap` elsewhere can afford to wait (an interpreter polls per basic block);
//! - never block with a session open: drop it first (dropping is one store);
//! - never call, from the thread that holds a session, an operation of *another* handle of the
//!   same space (`mmap`/`munmap`/..., or an access that faults): it may wait for a shooter that
//!   waits for this session, a self-deadlock like taking a lock twice. The session's own
//!   handle is borrowed mutably, so its operations cannot be called: a compile error.
//!
//! Which cores are targets depends on the design's shootdown policy (`shootdown.rs`,
//! "Targets"): under the targeted policy a session is only waited for by shooters that removed
//! a translation its core walked.
//!
//! # Memory rule
//!
//! Frame memory may be written by other cores at any time, so nothing here forms a `&[u8]` or
//! `&mut [u8]` over it: every access is an atomic access of the aligned 8-byte word holding it
//! (`frame_io.rs`). An aligned 8-byte access is one atomic load or store; a smaller or
//! unaligned access inside one word loads the word (a load) or replaces its bytes with a
//! compare-exchange loop (a store); an access spanning words or pages copies word by word like
//! `read`/`write`. For bulk work on one page without a copy, [`Session::page`] and
//! [`Session::page_mut`] lend a [`PageSlice`] (`page_slice.rs`) for as long as the session is
//! borrowed, so the window cannot be renewed under it.
//!
//! Values are little-endian (every supported host is).
//!
//! A leaked session (`mem::forget`) leaves its window open; the handle closes it at its next
//! call (`handle.rs`), and until then shooters wait, as for a session that does not poll.
//!
//! Not for: the per-call path (`handle.rs`) or the window protocol itself (`shootdown.rs`).

use crate::access;
use crate::core_state::Core;
use crate::designs::DesignOps;
use crate::error::{Fault, VmError};
use crate::frame_io;
use crate::handle::{access_path, CoreHandle};
use crate::page_slice::PageSlice;
use crate::shared::Shared;
use crate::shootdown;
use crate::space::Space;
use crate::sync::AtomicU64;
use crate::types::{Access, PAGE_SIZE};
use std::marker::PhantomData;

/// An open access session of one core (module doc): typed and slice accesses without a fence
/// each, shootdown requests taken at accesses and [`Session::poll`]. Dropping it closes the
/// window.
pub struct Session<'h> {
    space: &'h Space,
    core: &'h mut Core,
    /// The core's own flush-request word, checked at every access.
    request: &'h AtomicU64,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("core", &self.core.id.index())
            .finish()
    }
}

impl CoreHandle {
    /// Opens an access session on this core (module `session`): its accesses cost no fence
    /// each; shootdown requests are taken at its accesses and at [`Session::poll`]. The handle
    /// is borrowed until the session is dropped. Read the latency contract (module doc) before
    /// holding one across work that does not access memory.
    ///
    /// # Errors
    /// [`VmError::ForkedChild`] in a forked child of the process that built the space.
    pub fn session(&mut self) -> Result<Session<'_>, VmError> {
        let (space, core) = self.session_parts()?;
        let sh = &space.shared;
        sh.shootdown
            .begin_access(core.id, &mut core.seen, &mut core.tlb);
        core.in_session = true;
        let request = sh.shootdown.request_word(core.id);
        Ok(Session {
            space,
            core,
            request,
            _not_sync: PhantomData,
        })
    }
}

impl<'h> Session<'h> {
    /// Takes a pending shootdown request, if one reached this core: ends the window (a shooter
    /// waiting for it returns) and opens a new one, flushing the TLB. Costs one relaxed load
    /// when there is none. Call it in loops that do not access memory (module doc, latency
    /// contract); every access does it too.
    #[inline(always)]
    pub fn poll(&mut self) {
        if shootdown::requested(self.request, self.core.seen) {
            self.renew();
        }
    }

    #[cold]
    #[inline(never)]
    fn renew(&mut self) {
        let core = &mut *self.core;
        self.space
            .shared
            .shootdown
            .renew(core.id, &mut core.seen, &mut core.tlb);
    }

    /// The address of the byte at `addr` in the frame backing its page, translated for
    /// `access` inside the current window (after a poll), faulting the page in if needed.
    #[inline(always)]
    fn byte(&mut self, addr: u64, access: Access) -> Result<*mut u8, Fault> {
        self.poll();
        match self.core.tlb.lookup(addr, access) {
            // The in-page offset of a pointer into the frame: wrapping_add keeps it a plain
            // address computation (the pointer is used only through `frame_io`).
            Some(frame) => Ok(frame.wrapping_add((addr % PAGE_SIZE) as usize)),
            None => self.byte_slow(addr, access),
        }
    }

    /// The TLB-miss half of [`Session::byte`]: a walk inside the window, else the fault,
    /// handled with the session stepped out of its window.
    #[cold]
    #[inline(never)]
    fn byte_slow(&mut self, addr: u64, access: Access) -> Result<*mut u8, Fault> {
        let Space { design, shared: sh } = self.space;
        if sh.in_forked_child() {
            return Err(Fault::ForkedChild { addr });
        }
        loop {
            if let Some(frame) = access::walk(sh, self.core, addr, access) {
                return Ok((frame + (addr % PAGE_SIZE) as usize) as *mut u8);
            }
            step_out(sh, self.core, |core| design.fault(sh, core, addr, access))?;
        }
    }

    /// Runs the per-call access path (`handle.rs`) with the session stepped out of its window:
    /// for accesses that span pages (they must translate every page before copying any).
    #[cold]
    #[inline(never)]
    fn stepped_out(
        &mut self,
        addr: u64,
        len: u64,
        access: Access,
        copy: impl FnMut(usize, usize, usize),
    ) -> Result<(), Fault> {
        let sh = &self.space.shared;
        if sh.in_forked_child() {
            return Err(Fault::ForkedChild { addr });
        }
        let space = self.space;
        step_out(sh, self.core, |core| {
            access_path(space, core, addr, len, access, copy)
        })
    }

    /// Whether `[addr, addr + len)` lies inside one page.
    #[inline(always)]
    fn in_one_page(addr: u64, len: usize) -> bool {
        (addr % PAGE_SIZE) as usize + len <= PAGE_SIZE as usize
    }

    /// Copies `buf.len()` bytes starting at `addr` into `buf` (like [`CoreHandle::read`]: each
    /// aligned 8-byte word whole), faulting pages in as needed.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be read.
    #[inline]
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Fault> {
        if buf.is_empty() {
            return Ok(());
        }
        if Self::in_one_page(addr, buf.len()) {
            let p = self.byte(addr, Access::Read)?;
            // SAFETY: `p .. p + len` lies in one frame translated for reading in the current
            // window (which stays open during the copy), accessed only through `frame_io`.
            unsafe { frame_io::read_from_frame(p, buf) };
            return Ok(());
        }
        let len = buf.len() as u64;
        self.stepped_out(addr, len, Access::Read, |frame, off, n| {
            // SAFETY: as in `CoreHandle::read` (a frame translated in the path's window).
            unsafe { frame_io::read_from_frame(frame as *const u8, &mut buf[off..off + n]) }
        })
    }

    /// Copies `buf` to memory starting at `addr` (like [`CoreHandle::write`]: nothing is
    /// written when a page faults), faulting pages in as needed.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be written; nothing is written then.
    #[inline]
    pub fn write(&mut self, addr: u64, buf: &[u8]) -> Result<(), Fault> {
        if buf.is_empty() {
            return Ok(());
        }
        if Self::in_one_page(addr, buf.len()) {
            let p = self.byte(addr, Access::Write)?;
            // SAFETY: as in `read`; the translation allows writes.
            unsafe { frame_io::write_to_frame(buf, p) };
            return Ok(());
        }
        let len = buf.len() as u64;
        self.stepped_out(addr, len, Access::Write, |frame, off, n| {
            // SAFETY: as in `CoreHandle::write`.
            unsafe { frame_io::write_to_frame(&buf[off..off + n], frame as *mut u8) }
        })
    }

    /// Performs one access of kind `access` at `addr` (faulting the page in as needed), like
    /// [`CoreHandle::touch`].
    ///
    /// # Errors
    /// The [`Fault`] the access raises.
    #[inline]
    pub fn touch(&mut self, addr: u64, access: Access) -> Result<(), Fault> {
        self.byte(addr, access).map(|_| ())
    }

    /// Loads the 8 bytes at `addr` (little-endian). Aligned, it is one atomic load.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be read.
    #[inline(always)]
    pub fn read_u64(&mut self, addr: u64) -> Result<u64, Fault> {
        if addr % 8 == 0 {
            let p = self.byte(addr, Access::Read)?;
            // SAFETY: `p` is 8-byte aligned (frames are page aligned) inside a frame
            // translated for reading in the current window.
            return Ok(u64::from_le(unsafe { frame_io::load_word(p) }));
        }
        let mut b = [0; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Stores the 8 bytes of `v` at `addr` (little-endian). Aligned, it is one atomic store.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be written; nothing is written then.
    #[inline(always)]
    pub fn write_u64(&mut self, addr: u64, v: u64) -> Result<(), Fault> {
        if addr % 8 == 0 {
            let p = self.byte(addr, Access::Write)?;
            // SAFETY: as in `read_u64`; the translation allows writes.
            unsafe { frame_io::store_word(p, v.to_le()) };
            return Ok(());
        }
        self.write(addr, &v.to_le_bytes())
    }

    /// Lends the bytes of the page containing `addr`, from `addr` to the end of the page, for
    /// zero-copy reads (faulting the page in for reading). The slice borrows the session, so
    /// the window stays open (and the frame valid) while it lives.
    ///
    /// # Errors
    /// The [`Fault`] of the page.
    pub fn page(&mut self, addr: u64) -> Result<PageSlice<'_>, Fault> {
        let p = self.byte(addr, Access::Read)?;
        let len = (PAGE_SIZE - addr % PAGE_SIZE) as usize;
        // SAFETY: `p .. p + len` is the rest of a frame translated for reading in the current
        // window; the slice's lifetime borrows the session mutably, so the window is neither
        // renewed nor closed while it lives.
        Ok(unsafe { PageSlice::new(p, len, false) })
    }

    /// As [`Session::page`], for reads and writes (faulting the page in for writing, which
    /// also breaks copy-on-write sharing).
    ///
    /// # Errors
    /// The [`Fault`] of the page.
    pub fn page_mut(&mut self, addr: u64) -> Result<PageSlice<'_>, Fault> {
        let p = self.byte(addr, Access::Write)?;
        let len = (PAGE_SIZE - addr % PAGE_SIZE) as usize;
        // SAFETY: as in `page`; the translation allows writes.
        Ok(unsafe { PageSlice::new(p, len, true) })
    }
}

/// The narrow typed accesses: one aligned word load (read) or a one-word compare-exchange
/// (write) when the value lies inside one aligned 8-byte word, else the slice path.
macro_rules! narrow {
    ($($ty:ident $read:ident $write:ident),*) => {$(
        impl Session<'_> {
            #[doc = concat!("Loads the `", stringify!($ty), "` at `addr` (little-endian).")]
            ///
            /// # Errors
            /// The [`Fault`] of the first page that cannot be read.
            #[inline]
            pub fn $read(&mut self, addr: u64) -> Result<$ty, Fault> {
                let mut b = [0; std::mem::size_of::<$ty>()];
                self.read(addr, &mut b)?;
                Ok(<$ty>::from_le_bytes(b))
            }

            #[doc = concat!("Stores the `", stringify!($ty), "` `v` at `addr` (little-endian).")]
            ///
            /// # Errors
            /// The [`Fault`] of the first page that cannot be written; nothing is written then.
            #[inline]
            pub fn $write(&mut self, addr: u64, v: $ty) -> Result<(), Fault> {
                self.write(addr, &v.to_le_bytes())
            }
        }
    )*};
}

narrow!(u8 read_u8 write_u8, u16 read_u16 write_u16, u32 read_u32 write_u32);

/// Runs `f` (a fault handler, or the per-call access path) with the session's core stepped out
/// of its window: ends the window, runs `f`, and begins a new one, **also when `f` unwinds**.
/// A panic in the fault handler (a bug, an assertion) may be caught by the session's user
/// (`catch_unwind` is safe) who then goes on accessing through the session, or unwind through
/// [`Session`]'s drop, which ends the window: either way the window must be open again, or the
/// session's TLB hits would run outside any window (shooters would not wait for them) and its
/// drop would end the window twice (leaving the core's counter odd while idle and even inside
/// its later windows: review of issue 24).
#[inline]
fn step_out<R>(sh: &Shared, core: &mut Core, f: impl FnOnce(&mut Core) -> R) -> R {
    /// Begins the core's window again when dropped (at the end of `f`, or during unwinding).
    struct StepIn<'a> {
        sh: &'a Shared,
        core: &'a mut Core,
    }
    impl Drop for StepIn<'_> {
        fn drop(&mut self) {
            let core = &mut *self.core;
            self.sh
                .shootdown
                .begin_access(core.id, &mut core.seen, &mut core.tlb);
        }
    }
    sh.shootdown.end_access(core.id);
    let step_in = StepIn { sh, core };
    f(&mut *step_in.core)
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let sh = &self.space.shared;
        let core = &mut *self.core;
        core.in_session = false;
        sh.shootdown.end_access(core.id);
        sh.counters
            .of(core.id)
            .publish_tlb(core.tlb.hits(), core.tlb.misses());
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
