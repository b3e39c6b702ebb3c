//! Guest memory behind one trait ([`Memory`]), and its two backends: [`AspaceMemory`] (a core of
//! an `aspace_vm::AddressSpace`: Linux's mmap semantics, faults, threads sharing one space) and
//! [`VecMemory`] (a plain `Vec<u8>`, the baseline an emulator without an MMU would use: bounds
//! checks only).
//!
//! The interpreter is generic over the trait (monomorphized), so the two backends run the same
//! interpreter code and differ only in what a load, a store and a memory system call cost: the
//! comparison the `interp` benchmark makes.
//!
//! `VecMemory` is one thread's flat memory at a fixed base: `mmap` hands out page-aligned
//! ranges from a bump pointer, `munmap` and `mprotect` succeed and change nothing (a `Vec` has
//! no mappings or protections), and an access outside the vector is a `SEGV_MAPERR` fault. It
//! cannot share memory between threads; the benchmark gives each thread its own.
//!
//! Not for: the instruction set (`isa.rs`) or the interpreter (`machine.rs`).

use crate::isa::Width;
use aspace_vm::{Advice, CoreHandle, Fault, MapFlags, Prot, PAGE_SIZE};

/// A guest memory fault: what the guest's SIGSEGV (or SIGBUS) handler is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestFault {
    pub addr: u64,
    /// `SEGV_MAPERR` (1), `SEGV_ACCERR` (2), or 0 for a fault that is not a SIGSEGV (out of
    /// frames: the guest's SIGBUS).
    pub si_code: i32,
}

/// A guest thread's memory: loads, stores and the memory system calls, with Linux's return
/// conventions for the latter (an address or `-errno`).
pub trait Memory {
    /// A zero-extended load of `width` bytes at `addr` (little-endian guest).
    fn load(&mut self, addr: u64, width: Width) -> Result<u64, GuestFault>;
    /// Stores the low `width` bytes of `value` at `addr`.
    fn store(&mut self, addr: u64, width: Width, value: u64) -> Result<(), GuestFault>;
    fn mmap(&mut self, addr: u64, len: u64, prot: u64, flags: u64) -> i64;
    fn munmap(&mut self, addr: u64, len: u64) -> i64;
    fn mprotect(&mut self, addr: u64, len: u64, prot: u64) -> i64;
    fn madvise(&mut self, addr: u64, len: u64, advice: u64) -> i64;
}

/// One guest thread's view of an aspace: its own attached core.
#[derive(Debug)]
pub struct AspaceMemory {
    pub core: CoreHandle,
}

fn guest_fault(f: Fault) -> GuestFault {
    GuestFault {
        addr: f.addr(),
        si_code: f.si_code().unwrap_or(0),
    }
}

/// `0` or `-errno`, as the system call returns it.
fn ret(r: Result<(), aspace_vm::VmError>) -> i64 {
    r.map_or_else(|e| -i64::from(e.errno()), |()| 0)
}

impl Memory for AspaceMemory {
    #[inline]
    fn load(&mut self, addr: u64, width: Width) -> Result<u64, GuestFault> {
        let mut bytes = [0u8; 8];
        self.core
            .read(addr, &mut bytes[..width.bytes()])
            .map_err(guest_fault)?;
        Ok(u64::from_le_bytes(bytes))
    }

    #[inline]
    fn store(&mut self, addr: u64, width: Width, value: u64) -> Result<(), GuestFault> {
        self.core
            .write(addr, &value.to_le_bytes()[..width.bytes()])
            .map_err(guest_fault)
    }

    fn mmap(&mut self, addr: u64, len: u64, prot: u64, flags: u64) -> i64 {
        // Bits above 32 cannot be Linux's: pass a value that fails as Linux fails it.
        let prot = Prot::from_bits_retain(u32::try_from(prot).unwrap_or(u32::MAX));
        let flags = MapFlags::from_bits_retain(u32::try_from(flags).unwrap_or(u32::MAX));
        match self.core.mmap(addr, len, prot, flags) {
            Ok(a) => a as i64,
            Err(e) => -i64::from(e.errno()),
        }
    }

    fn munmap(&mut self, addr: u64, len: u64) -> i64 {
        ret(self.core.munmap(addr, len))
    }

    fn mprotect(&mut self, addr: u64, len: u64, prot: u64) -> i64 {
        let prot = Prot::from_bits_retain(u32::try_from(prot).unwrap_or(u32::MAX));
        ret(self.core.mprotect(addr, len, prot))
    }

    fn madvise(&mut self, addr: u64, len: u64, advice: u64) -> i64 {
        let advice = Advice::from_raw(i32::try_from(advice).unwrap_or(-1));
        ret(self.core.madvise(addr, len, advice))
    }
}

/// A flat memory of `bytes.len()` bytes at guest address `base`.
#[derive(Debug)]
pub struct VecMemory {
    base: u64,
    bytes: Vec<u8>,
    /// The next `mmap`'s offset into `bytes`.
    next: u64,
}

impl VecMemory {
    /// `size` zeroed bytes at `base`.
    pub fn new(base: u64, size: usize) -> VecMemory {
        VecMemory {
            base,
            bytes: vec![0; size],
            next: 0,
        }
    }

    /// The offset of `[addr, addr + n)` in the vector, if it lies inside.
    #[inline]
    fn offset(&self, addr: u64, n: usize) -> Result<usize, GuestFault> {
        addr.checked_sub(self.base)
            .and_then(|off| usize::try_from(off).ok())
            .filter(|&off| {
                off.checked_add(n)
                    .is_some_and(|end| end <= self.bytes.len())
            })
            .ok_or(GuestFault { addr, si_code: 1 })
    }
}

impl Memory for VecMemory {
    #[inline]
    fn load(&mut self, addr: u64, width: Width) -> Result<u64, GuestFault> {
        let n = width.bytes();
        let off = self.offset(addr, n)?;
        let mut bytes = [0u8; 8];
        bytes[..n].copy_from_slice(&self.bytes[off..off + n]);
        Ok(u64::from_le_bytes(bytes))
    }

    #[inline]
    fn store(&mut self, addr: u64, width: Width, value: u64) -> Result<(), GuestFault> {
        let n = width.bytes();
        let off = self.offset(addr, n)?;
        self.bytes[off..off + n].copy_from_slice(&value.to_le_bytes()[..n]);
        Ok(())
    }

    fn mmap(&mut self, _addr: u64, len: u64, _prot: u64, _flags: u64) -> i64 {
        let len = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        if len == 0 {
            return -i64::from(libc::EINVAL);
        }
        if self.next + len > self.bytes.len() as u64 {
            return -i64::from(libc::ENOMEM);
        }
        let addr = self.base + self.next;
        self.next += len;
        addr as i64
    }

    fn munmap(&mut self, _addr: u64, _len: u64) -> i64 {
        0
    }

    fn mprotect(&mut self, _addr: u64, _len: u64, _prot: u64) -> i64 {
        0
    }

    fn madvise(&mut self, _addr: u64, _len: u64, _advice: u64) -> i64 {
        0
    }
}
