//! Error codes at the C boundary: every entry point returns `0` (or a value) on success and a
//! negative Linux errno on failure, and no panic crosses into C.
//!
//! [`guard`] runs an entry point's body under `catch_unwind` and turns a panic (a bug in aspace,
//! never a consequence of C's arguments: those are checked first) into `-EIO`. The values:
//!
//! | code | meaning |
//! |---|---|
//! | `-EBADF` | a handle that is not live: stale (after `aspace_destroy`/`aspace_detach`), forged, of the other kind, or `0` |
//! | `-EINVAL` | a null pointer where one is required, a length that does not fit, an unknown design name, or the system call's own `EINVAL` |
//! | `-EFAULT` | an access faulted: the guest's SIGSEGV (`aspace_last_fault` gives the address and `si_code`) |
//! | `-ENOMEM` | out of frames (an access) or Linux's `ENOMEM` (a system call) |
//! | `-EMFILE` | the handle table is full |
//! | `-ENOTRECOVERABLE` | the space was built before `fork()` and used in the child |
//! | `-EIO` | a panic inside aspace was caught (a bug): the call's effect is unknown |
//!
//! plus every errno the system calls return as Linux does (`EEXIST`, `EPERM`, `EOPNOTSUPP`,
//! `EAGAIN` for too many cores, ...).
//!
//! Not for: the handle checks themselves (`table.rs`).

use crate::table::TableError;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `-errno` as the entry points return it.
pub(crate) fn neg(errno: i32) -> i32 {
    -errno
}

impl TableError {
    /// The errno C sees.
    pub(crate) fn errno(self) -> i32 {
        match self {
            TableError::BadHandle => libc::EBADF,
            TableError::Full => libc::EMFILE,
        }
    }
}

/// Runs `body`, returning `-EIO` (converted by `from_errno`) if it panics.
pub(crate) fn guard<R>(from_errno: impl FnOnce(i32) -> R, body: impl FnOnce() -> R) -> R {
    // AssertUnwindSafe: after a caught panic the caller gets `-EIO` and the values the body
    // touched stay in their tables; aspace-vm keeps a space consistent when a call unwinds
    // (CONVENTIONS, "Panic safety"), and a core's slot lock is released by its guard.
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| from_errno(neg(libc::EIO)))
}

/// [`guard`] for the `int` entry points.
pub(crate) fn guard_int(body: impl FnOnce() -> Result<(), i32>) -> i32 {
    guard(|e| e, || body().map_or_else(neg, |()| 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_eio() {
        let r = guard_int(|| panic!("inside"));
        assert_eq!(r, -libc::EIO);
        assert_eq!(guard_int(|| Ok(())), 0);
        assert_eq!(guard_int(|| Err(libc::EBADF)), -libc::EBADF);
    }
}
