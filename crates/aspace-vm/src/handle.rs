//! SKELETON (the engine helper replaces every body and this line): a core's handle.
//!
//! A [`CoreHandle`] is one attached thread's view of the space: its soft TLB, its free-frame
//! cache, its shootdown slot and its RCU reader. It is `Send` (it may move to another thread) but
//! not `Sync` (one thread uses it at a time). Dropping it detaches the core.

use crate::error::{Fault, VmError};
use crate::types::{Access, Advice, MapFlags, Prot};
use std::marker::PhantomData;

/// One core's handle on an [`crate::AddressSpace`].
pub struct CoreHandle {
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl CoreHandle {
    /// Maps `len` bytes (rounded up to pages) like `mmap(addr, len, prot, flags, -1, 0)`:
    /// `addr` is a hint (0 for none), or the exact place with `MAP_FIXED` (replacing what is
    /// there) or `MAP_FIXED_NOREPLACE` (`EEXIST` if anything is there). Returns the start.
    ///
    /// # Errors
    /// Linux's errno for the same call: `EINVAL`, `ENOMEM`, `EEXIST`, `EBADF`, `EOPNOTSUPP`.
    pub fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<u64, VmError> {
        let _ = (addr, len, prot, flags);
        unimplemented!("engine helper")
    }

    /// Unmaps `[addr, addr + len)` like `munmap`: regions are split, unmapping nothing is fine.
    /// When it returns, no core can access the old pages and their frames may be reused.
    ///
    /// # Errors
    /// `EINVAL` for bad input; `ENOMEM` when a split would exceed `max_map_count`.
    pub fn munmap(&mut self, addr: u64, len: u64) -> Result<(), VmError> {
        let _ = (addr, len);
        unimplemented!("engine helper")
    }

    /// Changes the protection of `[addr, addr + len)` like `mprotect`.
    ///
    /// # Errors
    /// `EINVAL` for bad input or unknown bits; `ENOMEM` on a hole or when splits would exceed
    /// `max_map_count`.
    pub fn mprotect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), VmError> {
        let _ = (addr, len, prot);
        unimplemented!("engine helper")
    }

    /// Gives advice about `[addr, addr + len)` like `madvise`; `DONTNEED` drops the pages.
    ///
    /// # Errors
    /// `EINVAL` for bad input or unknown advice; `ENOMEM` when part of the range is unmapped.
    pub fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<(), VmError> {
        let _ = (addr, len, advice);
        unimplemented!("engine helper")
    }

    /// Copies `buf.len()` bytes starting at `addr` into `buf`, faulting pages in as needed.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be read.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let _ = (addr, buf);
        unimplemented!("engine helper")
    }

    /// Copies `buf` to memory starting at `addr`, faulting pages in as needed.
    ///
    /// # Errors
    /// The [`Fault`] of the first page that cannot be written.
    pub fn write(&mut self, addr: u64, buf: &[u8]) -> Result<(), Fault> {
        let _ = (addr, buf);
        unimplemented!("engine helper")
    }

    /// Performs one access of kind `access` at `addr` (faulting the page in as needed), like a
    /// load, store or instruction fetch by the CPU.
    ///
    /// # Errors
    /// The [`Fault`] the access raises.
    pub fn touch(&mut self, addr: u64, access: Access) -> Result<(), Fault> {
        let _ = (addr, access);
        unimplemented!("engine helper")
    }
}
