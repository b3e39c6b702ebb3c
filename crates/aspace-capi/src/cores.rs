//! The core entry points: `aspace_attach`/`aspace_detach`, the system calls (`aspace_mmap`,
//! `aspace_munmap`, `aspace_mprotect`, `aspace_madvise`) and the accesses (`aspace_read_u8` ...
//! `aspace_write_u64`, `aspace_read`/`aspace_write` of byte buffers, `aspace_touch`), and
//! `aspace_last_fault`.
//!
//! Each looks its core up in the core table and works under that slot's lock ([`with_core`]):
//! one uncontended lock per call on top of the Rust call. System calls take Linux's arguments
//! (`PROT_*`, `MAP_*`, `MADV_*` bits, unknown bits passed through so that they fail as on
//! Linux) and return `-errno`; `aspace_mmap` returns the address or `-errno`, like the raw
//! system call. An access that fails records its fault in the core (`aspace_last_fault`).
//!
//! Typed accesses move the value in host byte order, as a load or store of that width on the
//! host would (little-endian on x86-64 and aarch64), and need no alignment: an access that
//! crosses a page boundary is checked against both pages and changes nothing if either faults.
//!
//! Access sessions (`sessions.rs`) plug in here: `aspace_session_run`
//! takes the slot lock once ([`with_core`]) for many accesses, and its `aspace_session_*`
//! functions are thin wrappers like these over the session's accesses.
//!
//! Not for: the space entry points (`spaces.rs`).

use crate::abi::{
    AspaceCore, AspaceFault, AspaceSpace, ASPACE_ACCESS_EXEC, ASPACE_ACCESS_READ,
    ASPACE_ACCESS_WRITE,
};
use crate::errno::{guard, guard_int, neg};
use crate::registry::{CoreEntry, CORES, SPACES};
use aspace_vm::{Access, Advice, Fault, MapFlags, Prot};
use std::ffi::c_void;

/// Runs `f` on the core `core` names, under its slot's lock (`-EDEADLK` inside a session
/// callback: `sessions.rs`).
pub(crate) fn with_core<R>(
    core: AspaceCore,
    f: impl FnOnce(&mut CoreEntry) -> Result<R, i32>,
) -> Result<R, i32> {
    crate::open_session::outside_session()?;
    CORES
        .with(core.raw, |e| f(e))
        .map_err(|e| e.errno())
        .and_then(|r| r)
}

/// Attaches a new core to `space` and stores its handle in `*out`. Attach one per thread.
///
/// Returns 0, `-EBADF`, `-EINVAL` (`out` NULL), `-EAGAIN` (the space's `max_cores` are
/// attached), `-EMFILE` (the process-wide core table is full) or `-ENOTRECOVERABLE`.
///
/// # Safety
/// `out` is NULL or points to a writable `AspaceCore`.
#[no_mangle]
pub unsafe extern "C" fn aspace_attach(space: AspaceSpace, out: *mut AspaceCore) -> i32 {
    guard_int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        crate::open_session::outside_session()?;
        let raw = SPACES
            .with(space.raw, |entry| {
                let core = entry.space.attach().map_err(|e| e.errno())?;
                let core = Box::new(CoreEntry {
                    core,
                    space: space.raw,
                    last_fault: AspaceFault::default(),
                });
                // Lock order: this space's slot, then the core table (`table.rs`).
                let raw = CORES.insert(core).map_err(|(e, _)| e.errno())?;
                entry.cores.push(raw);
                Ok::<u64, i32>(raw)
            })
            .map_err(|e| e.errno())??;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write_unaligned(AspaceCore { raw }) };
        Ok(())
    })
}

/// Detaches a core: its handle becomes stale and its cached frames return to the space.
///
/// Returns 0 or `-EBADF` (not a live core: detaching twice, or after its space was
/// destroyed).
#[no_mangle]
pub extern "C" fn aspace_detach(core: AspaceCore) -> i32 {
    guard_int(|| {
        crate::open_session::outside_session()?;
        let entry = CORES.remove(core.raw).map_err(|e| e.errno())?;
        // The space may be gone (destroyed after we took the core): nothing to strike then.
        let _ = SPACES.with(entry.space, |s| s.cores.retain(|&c| c != core.raw));
        drop(entry);
        Ok(())
    })
}

/// Maps `len` bytes at `addr` (a hint unless `MAP_FIXED`/`MAP_FIXED_NOREPLACE`), like Linux's
/// `mmap(addr, len, prot, flags, -1, 0)`: anonymous memory only (`MAP_ANONYMOUS` is required,
/// `-EBADF` without it, as Linux without a file).
///
/// Returns the mapping's address, or `-errno` (`EINVAL`, `ENOMEM`, `EEXIST`, `EPERM`,
/// `EOPNOTSUPP`, `EBADF`, `ENOTRECOVERABLE`), like the raw system call.
#[no_mangle]
pub extern "C" fn aspace_mmap(core: AspaceCore, addr: u64, len: u64, prot: i32, flags: i32) -> i64 {
    guard(i64::from, || {
        let r = with_core(core, |e| {
            e.core
                .mmap(
                    addr,
                    len,
                    Prot::from_bits_retain(prot as u32),
                    MapFlags::from_bits_retain(flags as u32),
                )
                .map_err(|err| err.errno())
        });
        match r {
            // Addresses are below 2^48, so positive as an i64.
            Ok(a) => a as i64,
            Err(errno) => i64::from(neg(errno)),
        }
    })
}

/// Unmaps `[addr, addr + len)` like Linux's `munmap`. Returns 0 or `-errno`.
#[no_mangle]
pub extern "C" fn aspace_munmap(core: AspaceCore, addr: u64, len: u64) -> i32 {
    guard_int(|| {
        with_core(core, |e| {
            e.core.munmap(addr, len).map_err(|err| err.errno())
        })
    })
}

/// Changes the protection of `[addr, addr + len)` like Linux's `mprotect`. Returns 0 or
/// `-errno`.
#[no_mangle]
pub extern "C" fn aspace_mprotect(core: AspaceCore, addr: u64, len: u64, prot: i32) -> i32 {
    guard_int(|| {
        with_core(core, |e| {
            e.core
                .mprotect(addr, len, Prot::from_bits_retain(prot as u32))
                .map_err(|err| err.errno())
        })
    })
}

/// Advises on `[addr, addr + len)` like Linux's `madvise` (`MADV_DONTNEED` drops private pages:
/// they read back as zero). Returns 0 or `-errno`.
#[no_mangle]
pub extern "C" fn aspace_madvise(core: AspaceCore, addr: u64, len: u64, advice: i32) -> i32 {
    guard_int(|| {
        with_core(core, |e| {
            e.core
                .madvise(addr, len, Advice::from_raw(advice))
                .map_err(|err| err.errno())
        })
    })
}

/// The errno of a fault, after recording it as the core's last.
fn record(entry: &mut CoreEntry, fault: Fault) -> i32 {
    entry.last_fault = AspaceFault {
        addr: fault.addr(),
        si_code: fault.si_code().unwrap_or(0),
        error: neg(fault.errno()),
    };
    fault.errno()
}

/// Reads `buf.len()` bytes at `addr` through `core`.
fn read_bytes(core: AspaceCore, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
    with_core(core, |e| e.core.read(addr, buf).map_err(|f| record(e, f)))
}

fn write_bytes(core: AspaceCore, addr: u64, buf: &[u8]) -> Result<(), i32> {
    with_core(core, |e| e.core.write(addr, buf).map_err(|f| record(e, f)))
}

/// The body of the `aspace_read_uN` functions: reads `N` bytes at `addr`, converts them with
/// `from_ne` and stores the value in `*out` (only on success).
///
/// # Safety
/// `out` is NULL or points to a writable `T` (any alignment).
unsafe fn read_typed<const N: usize, T>(
    core: AspaceCore,
    addr: u64,
    out: *mut T,
    from_ne: fn([u8; N]) -> T,
) -> i32 {
    guard_int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let mut bytes = [0u8; N];
        read_bytes(core, addr, &mut bytes)?;
        // SAFETY: non-null and writable by the caller's contract; an unaligned write.
        unsafe { out.write_unaligned(from_ne(bytes)) };
        Ok(())
    })
}

/// Reads a `uint8_t` at `addr` into `*out`.
///
/// Returns 0, `-EFAULT` (the access faulted: `aspace_last_fault`), `-ENOMEM` (out of frames),
/// `-EBADF`, `-EINVAL` (`out` NULL) or `-ENOTRECOVERABLE`. `*out` is written only on success.
///
/// # Safety
/// `out` is NULL or points to a writable `uint8_t`.
#[no_mangle]
pub unsafe extern "C" fn aspace_read_u8(core: AspaceCore, addr: u64, out: *mut u8) -> i32 {
    // SAFETY: `out` as this function's contract says.
    unsafe { read_typed(core, addr, out, u8::from_ne_bytes) }
}

/// Reads a `uint16_t` at `addr` into `*out` (host byte order, any alignment); returns as
/// `aspace_read_u8`.
///
/// # Safety
/// `out` is NULL or points to a writable `uint16_t` (any alignment).
#[no_mangle]
pub unsafe extern "C" fn aspace_read_u16(core: AspaceCore, addr: u64, out: *mut u16) -> i32 {
    // SAFETY: `out` as this function's contract says.
    unsafe { read_typed(core, addr, out, u16::from_ne_bytes) }
}

/// Reads a `uint32_t` at `addr` into `*out` (host byte order, any alignment); returns as
/// `aspace_read_u8`.
///
/// # Safety
/// `out` is NULL or points to a writable `uint32_t` (any alignment).
#[no_mangle]
pub unsafe extern "C" fn aspace_read_u32(core: AspaceCore, addr: u64, out: *mut u32) -> i32 {
    // SAFETY: `out` as this function's contract says.
    unsafe { read_typed(core, addr, out, u32::from_ne_bytes) }
}

/// Reads a `uint64_t` at `addr` into `*out` (host byte order, any alignment); returns as
/// `aspace_read_u8`.
///
/// # Safety
/// `out` is NULL or points to a writable `uint64_t` (any alignment).
#[no_mangle]
pub unsafe extern "C" fn aspace_read_u64(core: AspaceCore, addr: u64, out: *mut u64) -> i32 {
    // SAFETY: `out` as this function's contract says.
    unsafe { read_typed(core, addr, out, u64::from_ne_bytes) }
}

/// Writes the `uint8_t` `value` at `addr`.
///
/// Returns 0, `-EFAULT` (the access faulted: `aspace_last_fault`; nothing was written),
/// `-ENOMEM`, `-EBADF` or `-ENOTRECOVERABLE`.
#[no_mangle]
pub extern "C" fn aspace_write_u8(core: AspaceCore, addr: u64, value: u8) -> i32 {
    guard_int(|| write_bytes(core, addr, &value.to_ne_bytes()))
}

/// Writes the `uint16_t` `value` at `addr` (host byte order, any alignment; a value that
/// crosses into a page that faults is not written at all); returns as `aspace_write_u8`.
#[no_mangle]
pub extern "C" fn aspace_write_u16(core: AspaceCore, addr: u64, value: u16) -> i32 {
    guard_int(|| write_bytes(core, addr, &value.to_ne_bytes()))
}

/// Writes the `uint32_t` `value` at `addr` (host byte order, any alignment); returns as
/// `aspace_write_u8`.
#[no_mangle]
pub extern "C" fn aspace_write_u32(core: AspaceCore, addr: u64, value: u32) -> i32 {
    guard_int(|| write_bytes(core, addr, &value.to_ne_bytes()))
}

/// Writes the `uint64_t` `value` at `addr` (host byte order, any alignment); returns as
/// `aspace_write_u8`.
#[no_mangle]
pub extern "C" fn aspace_write_u64(core: AspaceCore, addr: u64, value: u64) -> i32 {
    guard_int(|| write_bytes(core, addr, &value.to_ne_bytes()))
}

/// Checks a C buffer: NULL is allowed only with length 0; a length is at most `isize::MAX`.
fn check_buffer(ptr: *const c_void, len: usize) -> Result<(), i32> {
    if (ptr.is_null() && len > 0) || len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// Reads `len` bytes at `addr` into `buf`. A read that faults partway writes nothing into
/// `buf` past what earlier pages gave (its contents are then unspecified) and returns the
/// fault.
///
/// Returns 0, `-EFAULT`, `-ENOMEM`, `-EBADF`, `-EINVAL` (`buf` NULL with `len` > 0, `len` >
/// `PTRDIFF_MAX`) or `-ENOTRECOVERABLE`.
///
/// # Safety
/// `buf` is NULL (with `len` 0) or points to `len` writable bytes that nothing else accesses
/// during the call.
#[no_mangle]
pub unsafe extern "C" fn aspace_read(
    core: AspaceCore,
    addr: u64,
    buf: *mut c_void,
    len: usize,
) -> i32 {
    guard_int(|| {
        check_buffer(buf.cast_const(), len)?;
        if len == 0 {
            return with_core(core, |_| Ok(()));
        }
        // SAFETY: non-null, `len <= isize::MAX`, writable and unaliased by the caller's contract.
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        read_bytes(core, addr, buf)
    })
}

/// Writes the `len` bytes at `buf` to `addr`; a write that faults on any page writes nothing.
///
/// Returns 0, `-EFAULT`, `-ENOMEM`, `-EBADF`, `-EINVAL` or `-ENOTRECOVERABLE`.
///
/// # Safety
/// `buf` is NULL (with `len` 0) or points to `len` readable bytes that nothing writes during
/// the call.
#[no_mangle]
pub unsafe extern "C" fn aspace_write(
    core: AspaceCore,
    addr: u64,
    buf: *const c_void,
    len: usize,
) -> i32 {
    guard_int(|| {
        check_buffer(buf, len)?;
        if len == 0 {
            return with_core(core, |_| Ok(()));
        }
        // SAFETY: non-null, `len <= isize::MAX`, readable and not written during the call by
        // the caller's contract.
        let buf = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        write_bytes(core, addr, buf)
    })
}

/// Makes one access of kind `access` (`ASPACE_ACCESS_READ`, `_WRITE`, `_EXEC`) to `addr`
/// without moving data: faults the page in, or reports the fault.
///
/// Returns 0, `-EFAULT`, `-ENOMEM`, `-EBADF`, `-EINVAL` (an unknown access kind) or
/// `-ENOTRECOVERABLE`.
#[no_mangle]
pub extern "C" fn aspace_touch(core: AspaceCore, addr: u64, access: i32) -> i32 {
    guard_int(|| {
        let access = match access {
            ASPACE_ACCESS_READ => Access::Read,
            ASPACE_ACCESS_WRITE => Access::Write,
            ASPACE_ACCESS_EXEC => Access::Exec,
            _ => return Err(libc::EINVAL),
        };
        with_core(core, |e| {
            e.core.touch(addr, access).map_err(|f| record(e, f))
        })
    })
}

/// Writes the core's last failed access into `*out` (all zero if none failed yet).
///
/// Returns 0, `-EBADF` or `-EINVAL` (`out` NULL).
///
/// # Safety
/// `out` is NULL or points to a writable `AspaceFault`.
#[no_mangle]
pub unsafe extern "C" fn aspace_last_fault(core: AspaceCore, out: *mut AspaceFault) -> i32 {
    guard_int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let fault = with_core(core, |e| Ok(e.last_fault))?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write_unaligned(fault) };
        Ok(())
    })
}
