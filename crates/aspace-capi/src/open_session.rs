//! The thread's open C session: its record, and the check every other
//! entry point makes first (`outside_session`). Apart from `sessions.rs` so that `cores.rs` and
//! `spaces.rs` can check it without importing the sessions' entry points, which use theirs.

use crate::abi::AspaceFault;
use std::cell::Cell;
use std::ffi::c_void;

/// The thread's open session: its token, the session (lifetime erased) and its core's
/// last-fault record.
#[derive(Clone, Copy)]
pub(crate) struct Open {
    pub(crate) token: u64,
    pub(crate) session: *mut c_void,
    pub(crate) last_fault: *mut AspaceFault,
}

thread_local! {
    pub(crate) static OPEN: Cell<Option<Open>> = const { Cell::new(None) };
    pub(crate) static NEXT_TOKEN: Cell<u64> = const { Cell::new(1) };
}

/// `Err(EDEADLK)` while this thread has a session open: every entry point but the session's
/// own calls this first (`cores::with_core`, `spaces.rs`).
pub(crate) fn outside_session() -> Result<(), i32> {
    match OPEN.with(Cell::get) {
        Some(_) => Err(libc::EDEADLK),
        None => Ok(()),
    }
}

/// Closes the thread's record of the session when `aspace_session_run` returns or unwinds.
pub(crate) struct Close;

impl Drop for Close {
    fn drop(&mut self) {
        OPEN.with(|o| o.set(None));
    }
}
