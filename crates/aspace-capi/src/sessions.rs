//! Access sessions in C.
//!
//! A session is many accesses of one core inside one access window, without a fence each
//! (`aspace_vm::Session`). Its Rust form borrows the core's handle for its lifetime, which a C
//! handle cannot express, so the C form is *scoped*: `aspace_session_run(core, fn, ctx)` opens
//! a session, calls `fn(session, ctx)`, and closes it when `fn` returns. Inside `fn`,
//! `aspace_session_read_u64(session, ...)` and the other `aspace_session_*` functions access
//! memory through it, and `aspace_session_poll(session)` takes pending shootdown requests.
//!
//! **Latency contract** (`aspace_vm::Session`'s): a thread that unmaps or protects memory
//! elsewhere waits for this session until its next access or poll. So inside `fn`: access or
//! poll at least as often as a `munmap` elsewhere can afford to wait (an interpreter polls per
//! basic block), never block (I/O, a lock, a sleep), and never `longjmp` out.
//!
//! **What `fn` may call**: only the `aspace_session_*` functions of its own session. Any other
//! entry point on that thread returns `-EDEADLK` while the session is open: an operation of the
//! same space could wait for a shooter that waits for this session (the Rust API makes that a
//! borrow error); the core's own functions would wait for the slot lock the session holds.
//!
//! The session token is a per-thread counter checked against the thread's open session: a token
//! used after its `fn` returned, or on another thread, is `-EBADF`.
//!
//! Not for: the protocol (`aspace_vm`'s `session.rs` and `shootdown.rs`).

use crate::abi::{AspaceCore, AspaceFault};
use crate::cores::with_core;
use crate::errno::{guard, guard_int, neg};
use crate::open_session::{Close, Open, NEXT_TOKEN, OPEN};
use aspace_vm::{Fault, Session};
use std::cell::Cell;
use std::ffi::c_void;

/// A session's token, valid inside the `aspace_session_run` callback that received it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AspaceSession {
    pub raw: u64,
}

/// The callback `aspace_session_run` calls with the open session.
pub type AspaceSessionFn =
    Option<unsafe extern "C" fn(session: AspaceSession, ctx: *mut c_void) -> i32>;

/// Opens a session on `core`, calls `f(session, ctx)`, closes the session; returns what `f`
/// returned, or `-EBADF`, `-EINVAL` (`f` NULL), `-EDEADLK` (a session is already open on this
/// thread) or `-ENOTRECOVERABLE` if no session could be opened.
///
/// # Safety
/// `f` is a function that may be called with `ctx`; it does not unwind or `longjmp` out.
#[no_mangle]
pub unsafe extern "C" fn aspace_session_run(
    core: AspaceCore,
    f: AspaceSessionFn,
    ctx: *mut c_void,
) -> i32 {
    guard(
        |e| e,
        || {
            let Some(f) = f else {
                return neg(libc::EINVAL);
            };
            let rc = with_core(core, |entry| {
                let mut session = entry.core.session().map_err(|e| e.errno())?;
                let token = NEXT_TOKEN.with(|n| {
                    let t = n.get();
                    n.set(t.wrapping_add(1).max(1));
                    t
                });
                OPEN.with(|o| {
                    o.set(Some(Open {
                        token,
                        session: (&mut session as *mut Session<'_>).cast(),
                        last_fault: &mut entry.last_fault,
                    }))
                });
                let _close = Close;
                // SAFETY: `f` may be called with `ctx` by the caller's contract.
                Ok(unsafe { f(AspaceSession { raw: token }, ctx) })
            });
            rc.unwrap_or_else(neg)
        },
    )
}

/// Runs `op` on the thread's open session if `s` is its token.
fn with_session<R>(
    s: AspaceSession,
    op: impl FnOnce(&mut Session<'_>) -> Result<R, Fault>,
) -> Result<R, i32> {
    let open = OPEN
        .with(Cell::get)
        .filter(|o| o.token == s.raw)
        .ok_or(libc::EBADF)?;
    // SAFETY: `open` is this thread's open session: `aspace_session_run` set it to a session on
    // its stack frame, which is alive (we run inside its callback, on its thread: `OPEN` is
    // thread-local and cleared when the frame ends), and nothing else borrows the session
    // while the callback runs (the callback is the only code that runs, and it reaches the
    // session only through these functions, one at a time).
    let session = unsafe { &mut *open.session.cast::<Session<'_>>() };
    op(session).map_err(|f| {
        // SAFETY: the core entry's record, alive and unborrowed as the session is (above).
        unsafe {
            *open.last_fault = AspaceFault {
                addr: f.addr(),
                si_code: f.si_code().unwrap_or(0),
                error: neg(f.errno()),
            }
        };
        f.errno()
    })
}

/// Takes pending shootdown requests (closes and reopens the window if one is pending).
/// Returns 0 or `-EBADF`.
#[no_mangle]
pub extern "C" fn aspace_session_poll(s: AspaceSession) -> i32 {
    guard_int(|| {
        with_session(s, |session| {
            session.poll();
            Ok(())
        })
    })
}

/// Reads a `uint64_t` at `addr` through the session; returns as `aspace_read_u64`.
///
/// # Safety
/// `out` is NULL or points to a writable `uint64_t` (any alignment).
#[no_mangle]
pub unsafe extern "C" fn aspace_session_read_u64(
    s: AspaceSession,
    addr: u64,
    out: *mut u64,
) -> i32 {
    guard_int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let v = with_session(s, |session| session.read_u64(addr))?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write_unaligned(v) };
        Ok(())
    })
}

/// Writes the `uint64_t` `value` at `addr` through the session; returns as
/// `aspace_write_u64`.
#[no_mangle]
pub extern "C" fn aspace_session_write_u64(s: AspaceSession, addr: u64, value: u64) -> i32 {
    guard_int(|| with_session(s, |session| session.write_u64(addr, value)))
}

/// Reads `len` bytes at `addr` into `buf` through the session; returns as `aspace_read`.
///
/// # Safety
/// As `aspace_read`.
#[no_mangle]
pub unsafe extern "C" fn aspace_session_read(
    s: AspaceSession,
    addr: u64,
    buf: *mut c_void,
    len: usize,
) -> i32 {
    guard_int(|| {
        if (buf.is_null() && len > 0) || len > isize::MAX as usize {
            return Err(libc::EINVAL);
        }
        if len == 0 {
            return with_session(s, |_| Ok(()));
        }
        // SAFETY: non-null, `len <= isize::MAX`, writable and unaliased (caller's contract).
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        with_session(s, |session| session.read(addr, buf))
    })
}

/// Writes the `len` bytes at `buf` to `addr` through the session; returns as `aspace_write`.
///
/// # Safety
/// As `aspace_write`.
#[no_mangle]
pub unsafe extern "C" fn aspace_session_write(
    s: AspaceSession,
    addr: u64,
    buf: *const c_void,
    len: usize,
) -> i32 {
    guard_int(|| {
        if (buf.is_null() && len > 0) || len > isize::MAX as usize {
            return Err(libc::EINVAL);
        }
        if len == 0 {
            return with_session(s, |_| Ok(()));
        }
        // SAFETY: non-null, `len <= isize::MAX`, readable and not written during the call.
        let buf = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        with_session(s, |session| session.write(addr, buf))
    })
}
