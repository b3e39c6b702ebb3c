//! rust-vmm's `vm_memory::Bytes<GuestAddress>` over an aspace ([`GuestBytes`], cargo feature
//! `vm-memory`): device-model code written for rust-vmm (Firecracker's and Cloud Hypervisor's
//! virtio devices, vhost-user backends), which reads and writes guest memory through `Bytes`
//! (`read_obj`, `write_obj`, `read_slice`, `write_slice`, `load`, `store`, the volatile I/O
//! helpers), runs unchanged over a shared, concurrently changing address space.
//!
//! `Bytes` takes `&self`; a [`Session`] needs `&mut self` (it owns its core's TLB and window).
//! So `GuestBytes` holds the session in a `RefCell`: one device thread, one core, one session,
//! no fence per access. It is `!Sync` like the session: each device thread attaches its own
//! core and wraps its own session. A reentrant use (an I/O source that itself accesses the
//! same `GuestBytes`) cannot happen through these methods, which never hold the borrow while
//! calling out; should it happen anyway it is an `IOError`, not a panic.
//!
//! Semantics: guest addresses are the space's virtual addresses. A fault is
//! `GuestMemoryError::InvalidGuestAddress` of the first byte that could not be accessed.
//! `read`/`write` transfer the prefix before a faulting page and return its length (as
//! `Read::read`); `read_slice`/`write_slice` transfer all or fail (a write that faults writes
//! nothing). `load`/`store` need natural alignment (else `InvalidBackendAddress`, as
//! vm-memory's `Misaligned`); an aligned value of up to 8 bytes lies in one aligned word, which
//! the session reads or writes in one atomic access; the ordering is given by fences around
//! it.
//!
//! # Why not `GuestMemory`
//!
//! `GuestMemory` describes guest memory as a fixed collection of regions, each a contiguous
//! run of host memory with stable host addresses (`get_host_address`, `get_slice`,
//! `to_region_addr`); its users take host pointers and slices and keep them. An aspace has no
//! such regions: consecutive pages are backed by arbitrary frames, a translation may change at
//! any `munmap`/`mprotect`/`madvise` of another core, and a host pointer is only valid inside
//! the access window that translated it (a shooter frees the frame once the window ends). An
//! implementation would have to report every page as its own region and hand out pointers that
//! outlive their window: unsound. `Bytes` (and [`Session::page`] for zero-copy work on one
//! page) is the interface that fits.
//!
//! # Instead of `GuestMemoryAtomic`
//!
//! rust-vmm's `GuestMemoryAtomic` changes the memory map by building a new `GuestMemory`
//! (every region) and swapping it in whole (`ArcSwap`); readers keep the old map as long as
//! they hold its guard, so a removed region's memory must stay mapped until the last guard
//! goes, and every change costs a copy of the map. An aspace gives such users the map's
//! changes as system calls (`mmap`, `munmap`, `mprotect`, `madvise` on any core, concurrently
//! with accesses), each costing what Linux's does, and a guarantee the swapped map does not
//! give: when `munmap` returns, no device thread can access the old memory (its session took
//! the shootdown at its next access; the latency contract is in `session.rs`).
//!
//! Not for: the session itself (`session.rs`).

use crate::error::Fault;
use crate::session::Session;
use crate::types::{Access, PAGE_SIZE};
use std::cell::{RefCell, RefMut};
use std::sync::atomic::{fence, Ordering};
use vm_memory::{
    AtomicAccess, Bytes, GuestAddress, GuestMemoryError, ReadVolatile, VolatileSlice, WriteVolatile,
};

/// A [`Session`] as rust-vmm's `Bytes<GuestAddress>` (module doc).
pub struct GuestBytes<'h> {
    session: RefCell<Session<'h>>,
}

impl std::fmt::Debug for GuestBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestBytes").finish_non_exhaustive()
    }
}

impl<'h> GuestBytes<'h> {
    /// Wraps `session`.
    pub fn new(session: Session<'h>) -> GuestBytes<'h> {
        GuestBytes {
            session: RefCell::new(session),
        }
    }

    /// The session back.
    pub fn into_inner(self) -> Session<'h> {
        self.session.into_inner()
    }

    /// [`Session::poll`]: call it where a device loop does not access memory for a while.
    pub fn poll(&self) {
        if let Ok(mut s) = self.session.try_borrow_mut() {
            s.poll();
        }
    }

    /// Faults in every page of `[addr, addr + len)` for `access`; the first that cannot be
    /// accessed is the error.
    fn probe(&self, addr: u64, len: usize, access: Access) -> Result<(), GuestMemoryError> {
        let mut s = self.session()?;
        let mut done = 0;
        while done < len {
            let (at, n) = piece(addr, done, len)?;
            s.touch(at, access).map_err(fault)?;
            done += n;
        }
        Ok(())
    }

    fn session(&self) -> Result<RefMut<'_, Session<'h>>, GuestMemoryError> {
        self.session.try_borrow_mut().map_err(|_| {
            GuestMemoryError::IOError(std::io::Error::other("GuestBytes used reentrantly"))
        })
    }
}

/// The error of a fault.
fn fault(f: Fault) -> GuestMemoryError {
    GuestMemoryError::InvalidGuestAddress(GuestAddress(f.addr()))
}

/// The piece of `[addr + done, addr + count)` that lies in one page: its address and length
/// (`done < count`). An address past the end of the address space is the guest's error.
fn piece(addr: u64, done: usize, count: usize) -> Result<(u64, usize), GuestMemoryError> {
    let at = addr
        .checked_add(done as u64)
        .ok_or(GuestMemoryError::InvalidGuestAddress(GuestAddress(addr)))?;
    let room = (PAGE_SIZE - at % PAGE_SIZE) as usize;
    Ok((at, room.min(count - done)))
}

/// How many bytes from `addr` precede the faulting byte `f` (0 when it faults at once).
fn prefix(addr: u64, f: &Fault, len: usize) -> usize {
    (f.addr().saturating_sub(addr) as usize).min(len)
}

impl Bytes<GuestAddress> for GuestBytes<'_> {
    type E = GuestMemoryError;

    fn write(&self, buf: &[u8], addr: GuestAddress) -> Result<usize, Self::E> {
        let mut s = self.session()?;
        match s.write(addr.0, buf) {
            Ok(()) => Ok(buf.len()),
            Err(f) => {
                let k = prefix(addr.0, &f, buf.len());
                if k == 0 {
                    return Err(fault(f));
                }
                s.write(addr.0, &buf[..k]).map_err(fault)?;
                Ok(k)
            }
        }
    }

    fn read(&self, buf: &mut [u8], addr: GuestAddress) -> Result<usize, Self::E> {
        let mut s = self.session()?;
        match s.read(addr.0, buf) {
            Ok(()) => Ok(buf.len()),
            Err(f) => {
                let k = prefix(addr.0, &f, buf.len());
                if k == 0 {
                    return Err(fault(f));
                }
                s.read(addr.0, &mut buf[..k]).map_err(fault)?;
                Ok(k)
            }
        }
    }

    fn write_slice(&self, buf: &[u8], addr: GuestAddress) -> Result<(), Self::E> {
        self.session()?.write(addr.0, buf).map_err(fault)
    }

    fn read_slice(&self, buf: &mut [u8], addr: GuestAddress) -> Result<(), Self::E> {
        self.session()?.read(addr.0, buf).map_err(fault)
    }

    fn read_volatile_from<F>(
        &self,
        addr: GuestAddress,
        src: &mut F,
        count: usize,
    ) -> Result<usize, Self::E>
    where
        F: ReadVolatile,
    {
        // Page by page through a bounce buffer (no host slice over frame memory: module doc
        // of `page_slice.rs`; the session is not borrowed while `src` runs). Each page is
        // probed for writing before `src` is read, so no byte is taken from `src` that the
        // guest memory cannot hold (unless another core unmaps the page in between: an
        // error then, with those bytes consumed).
        let mut page = [0u8; PAGE_SIZE as usize];
        let mut done = 0;
        while done < count {
            let (at, n) = piece(addr.0, done, count)?;
            if let Err(f) = self.session()?.touch(at, Access::Write) {
                return if done == 0 { Err(fault(f)) } else { Ok(done) };
            }
            let got = src.read_volatile(&mut VolatileSlice::from(&mut page[..n]))?;
            if got > n {
                // A source that claims more than it was given (safe code may): the bounce
                // buffer past `n` holds no byte of it, and past `count` is not ours to write.
                return Err(GuestMemoryError::IOError(std::io::Error::other(
                    "the source returned more bytes than it was asked for",
                )));
            }
            self.write_slice(&page[..got], GuestAddress(at))?;
            done += got;
            if got < n {
                break;
            }
        }
        Ok(done)
    }

    fn read_exact_volatile_from<F>(
        &self,
        addr: GuestAddress,
        src: &mut F,
        count: usize,
    ) -> Result<(), Self::E>
    where
        F: ReadVolatile,
    {
        // Every page probed for writing first: a range with a hole fails before `src` is read.
        self.probe(addr.0, count, Access::Write)?;
        let mut page = [0u8; PAGE_SIZE as usize];
        let mut done = 0;
        while done < count {
            let (at, n) = piece(addr.0, done, count)?;
            src.read_exact_volatile(&mut VolatileSlice::from(&mut page[..n]))?;
            self.write_slice(&page[..n], GuestAddress(at))?;
            done += n;
        }
        Ok(())
    }

    fn write_volatile_to<F>(
        &self,
        addr: GuestAddress,
        dst: &mut F,
        count: usize,
    ) -> Result<usize, Self::E>
    where
        F: WriteVolatile,
    {
        let mut page = [0u8; PAGE_SIZE as usize];
        let mut done = 0;
        while done < count {
            let (at, n) = piece(addr.0, done, count)?;
            if let Err(e) = self.read_slice(&mut page[..n], GuestAddress(at)) {
                return if done == 0 { Err(e) } else { Ok(done) };
            }
            // At most `n`: a destination that claims more (safe code may) took only `n`.
            let put = dst
                .write_volatile(&VolatileSlice::from(&mut page[..n]))?
                .min(n);
            done += put;
            if put < n {
                break;
            }
        }
        Ok(done)
    }

    fn write_all_volatile_to<F>(
        &self,
        addr: GuestAddress,
        dst: &mut F,
        count: usize,
    ) -> Result<(), Self::E>
    where
        F: WriteVolatile,
    {
        // Every page probed for reading first: a range with a hole fails before `dst` is
        // written.
        self.probe(addr.0, count, Access::Read)?;
        let mut page = [0u8; PAGE_SIZE as usize];
        let mut done = 0;
        while done < count {
            let (at, n) = piece(addr.0, done, count)?;
            self.read_slice(&mut page[..n], GuestAddress(at))?;
            dst.write_all_volatile(&VolatileSlice::from(&mut page[..n]))?;
            done += n;
        }
        Ok(())
    }

    fn store<T: AtomicAccess>(
        &self,
        val: T,
        addr: GuestAddress,
        order: Ordering,
    ) -> Result<(), Self::E> {
        if addr.0 % std::mem::size_of::<T>() as u64 != 0 {
            return Err(GuestMemoryError::InvalidBackendAddress);
        }
        // The store itself is one atomic word access (an aligned value of at most 8 bytes lies
        // in one aligned word); the fences give it `order` (a Release fence before a relaxed
        // store makes it a release store; SeqCst adds one after, for later loads).
        match order {
            Ordering::Relaxed => {}
            Ordering::SeqCst => fence(Ordering::SeqCst),
            _ => fence(Ordering::Release),
        }
        self.write_obj(val, addr)?;
        if order == Ordering::SeqCst {
            fence(Ordering::SeqCst);
        }
        Ok(())
    }

    fn load<T: AtomicAccess>(&self, addr: GuestAddress, order: Ordering) -> Result<T, Self::E> {
        if addr.0 % std::mem::size_of::<T>() as u64 != 0 {
            return Err(GuestMemoryError::InvalidBackendAddress);
        }
        if order == Ordering::SeqCst {
            fence(Ordering::SeqCst);
        }
        let v = self.read_obj(addr)?;
        // An Acquire fence after a relaxed load makes it an acquire load.
        match order {
            Ordering::Relaxed => {}
            Ordering::SeqCst => fence(Ordering::SeqCst),
            _ => fence(Ordering::Acquire),
        }
        Ok(v)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
