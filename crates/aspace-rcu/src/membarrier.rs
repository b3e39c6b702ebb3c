//! The one audited module that issues the raw `membarrier(2)` system call.
//!
//! At the first `memb` domain creation the process asks the kernel which commands it supports
//! (`MEMBARRIER_CMD_QUERY`) and, if `MEMBARRIER_CMD_PRIVATE_EXPEDITED` is among them, registers
//! the process for it (`MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`). Registration is
//! process-wide and permanent, so the outcome is computed once and cached.
//!
//! [`force_mb_in_threads`] is the thesis' FORCE-MB-IN-THREADS (§4.4): after it returns, every
//! thread of this process that was running during the call has executed a full memory barrier
//! (the kernel IPIs the CPUs running our threads; threads not running pass through the
//! scheduler, which is a full barrier). The caller itself is also ordered by the syscall.
//!
//! Loom stand-in: under `--cfg loom` there is no system call. The model gives every reader a
//! `fence(SeqCst)` at barriers L and U (see `sync::reader_light_barrier`) and makes
//! `force_mb_in_threads` a `fence(SeqCst)` in the writer. This is the exact stand-in, not an
//! approximation in the protocol's favour: what membarrier guarantees is that, for each reader,
//! the reader's compiler barrier at L or U behaves as a full barrier with respect to the
//! writer's F-L / F-U, i.e. that the SeqCst fence order places the reader's barrier either
//! before or after the writer's forced barrier. A reader with a real SeqCst fence at L and U
//! gives precisely that total order and nothing more (it does not add ordering between two
//! accesses inside one read section, which membarrier does not provide either).
//!
//! Not for: anything but the `memb` flavor's writer side.

/// Which reader-side barrier mode a `memb` domain runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembMode {
    /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` is registered: readers use compiler fences only.
    Membarrier,
    /// membarrier is unavailable: readers issue full fences (slower reads, same guarantees).
    FenceFallback,
}

/// Why the membarrier mode is not available (the domain then runs in fence-fallback mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MembarrierError {
    /// The query command failed (kernel without membarrier, or a sandbox that filters it).
    #[error("membarrier(MEMBARRIER_CMD_QUERY) failed with errno {0}")]
    QueryFailed(i32),
    /// The kernel does not offer `MEMBARRIER_CMD_PRIVATE_EXPEDITED`.
    #[error("membarrier(2) does not support MEMBARRIER_CMD_PRIVATE_EXPEDITED")]
    PrivateExpeditedUnsupported,
    /// Registering for private expedited barriers failed.
    #[error("membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) failed with errno {0}")]
    RegisterFailed(i32),
    /// Not a Linux target.
    #[error("membarrier(2) is Linux-only")]
    NotLinux,
}

#[cfg(all(target_os = "linux", not(loom)))]
mod sys {
    //! Raw command numbers from `<linux/membarrier.h>` (the libc crate does not export them).
    pub const CMD_QUERY: libc::c_int = 0;
    pub const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    pub const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    /// `membarrier(cmd, 0, 0)`; `Err(errno)` on failure.
    pub fn membarrier(cmd: libc::c_int) -> Result<libc::c_long, i32> {
        // SAFETY: membarrier takes only integer arguments (cmd, flags = 0, cpu_id = 0) and
        // touches no memory of ours; any failure is reported through the return value.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_int,
                0 as libc::c_int,
            )
        };
        if ret < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(ret)
        }
    }
}

/// Queries and registers (once per process); the mode every `memb` domain then uses.
pub(crate) fn init() -> Result<(), MembarrierError> {
    #[cfg(loom)]
    {
        // The loom build models membarrier with fences (module doc); nothing to register.
        Ok(())
    }
    #[cfg(all(target_os = "linux", not(loom)))]
    {
        use std::sync::atomic::Ordering::{Acquire, Release};
        // No once-cell: a cell held "running" across these system calls would be inherited in
        // that state by a child forked meanwhile, whose own first space would then wait forever
        // for a thread that does not exist there (review of issue 17). The commands are
        // idempotent, so racing first callers each run them and store the same answer.
        // Acquire: pairs with the Release store below (the registration happened before).
        if let Some(known) = decode(STATE.load(Acquire)) {
            return known;
        }
        let result = register();
        // Release: publishes that this process is registered.
        STATE.store(encode(result), Release);
        result
    }
    #[cfg(all(not(target_os = "linux"), not(loom)))]
    {
        Err(MembarrierError::NotLinux)
    }
}

/// [`init`]'s answer: 0 unknown, 1 registered, else an error ([`encode`]).
#[cfg(all(target_os = "linux", not(loom)))]
static STATE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Queries, registers and proves the private expedited command.
#[cfg(all(target_os = "linux", not(loom)))]
fn register() -> Result<(), MembarrierError> {
    let supported = sys::membarrier(sys::CMD_QUERY).map_err(MembarrierError::QueryFailed)?;
    if supported & libc::c_long::from(sys::CMD_PRIVATE_EXPEDITED) == 0 {
        return Err(MembarrierError::PrivateExpeditedUnsupported);
    }
    #[cfg(test)]
    tests::registering();
    sys::membarrier(sys::CMD_REGISTER_PRIVATE_EXPEDITED)
        .map_err(MembarrierError::RegisterFailed)?;
    // Prove the command works before any reader relies on it.
    sys::membarrier(sys::CMD_PRIVATE_EXPEDITED).map_err(MembarrierError::RegisterFailed)?;
    Ok(())
}

/// [`STATE`]'s word for `r` (never 0).
#[cfg(all(target_os = "linux", not(loom)))]
fn encode(r: Result<(), MembarrierError>) -> u64 {
    let errno = |e: i32| u64::from(e as u32);
    match r {
        Ok(()) => 1,
        Err(MembarrierError::QueryFailed(e)) => 2 | errno(e) << 8,
        Err(MembarrierError::PrivateExpeditedUnsupported) => 3,
        Err(MembarrierError::RegisterFailed(e)) => 4 | errno(e) << 8,
        Err(MembarrierError::NotLinux) => 5,
    }
}

/// The answer [`encode`] stored, `None` for 0 (not known yet).
#[cfg(all(target_os = "linux", not(loom)))]
fn decode(w: u64) -> Option<Result<(), MembarrierError>> {
    let errno = (w >> 8) as u32 as i32;
    match w & 0xff {
        0 => None,
        1 => Some(Ok(())),
        2 => Some(Err(MembarrierError::QueryFailed(errno))),
        3 => Some(Err(MembarrierError::PrivateExpeditedUnsupported)),
        4 => Some(Err(MembarrierError::RegisterFailed(errno))),
        _ => Some(Err(MembarrierError::NotLinux)),
    }
}

/// The mode a new domain gets: `Membarrier` when [`init`] succeeded and it is not forced off.
pub(crate) fn mode(force_fallback: bool) -> MembMode {
    if !force_fallback && init().is_ok() {
        MembMode::Membarrier
    } else {
        MembMode::FenceFallback
    }
}

/// FORCE-MB-IN-THREADS (thesis §4.4, lines 11 and 20 of RCU-SYNCHRONIZE: F-L and F-U).
///
/// In fallback mode the readers issue real fences, so the writer only needs its own fence.
pub(crate) fn force_mb_in_threads(mode: MembMode) {
    use crate::sync::fence;
    use std::sync::atomic::Ordering::SeqCst;
    // SeqCst: orders the writer's preceding accesses before the forced reader barriers (and,
    // in fallback mode, is the writer's half of the fence pairs with readers' L/U fences).
    fence(SeqCst);
    #[cfg(all(target_os = "linux", not(loom)))]
    if mode == MembMode::Membarrier {
        // Registration succeeded in init() (the only way to get this mode), after which the
        // command fails only if the kernel refuses it to this thread (a seccomp filter added
        // later, ENOMEM). Then no grace period can be proven, and unwinding is no way out: the
        // writer has already advanced the grace-period counter, so a concurrent synchronize()
        // waiting on the writer mutex would take the early exit with no grace period elapsed
        // and free memory readers still hold (review of issue 17). Abort, loudly.
        if let Err(errno) = sys::membarrier(sys::CMD_PRIVATE_EXPEDITED) {
            eprintln!(
                "aspace-rcu: membarrier(PRIVATE_EXPEDITED) failed after registration (errno                  {errno}): no grace period can be proven; aborting"
            );
            std::process::abort();
        }
    }
    #[cfg(any(not(target_os = "linux"), loom))]
    let _ = mode;
    // SeqCst: orders the writer's following accesses (reads of reader words, frees) after the
    // forced reader barriers.
    fence(SeqCst);
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// What a thread runs when it reaches the pause point inside a registration.
    type Pause = Box<dyn FnOnce()>;

    thread_local! {
        /// The pause point inside the first registration (between the query and the register
        /// command), armed per thread.
        static AT_REGISTER: RefCell<Option<Pause>> = const { RefCell::new(None) };
    }

    /// Runs this thread's armed pause, if any.
    pub(super) fn registering() {
        if let Some(f) = AT_REGISTER.with(|c| c.borrow_mut().take()) {
            f();
        }
    }

    /// Regression (review of issue 17): a child forked while another thread ran the first
    /// registration inherited a once-cell in its "running" state and hung in its own first
    /// `init()` (so in `Domain::new`, so in building an address space).
    #[test]
    fn a_child_forked_during_the_first_registration_registers_on_its_own() {
        use std::sync::atomic::Ordering::Relaxed;
        STATE.store(0, Relaxed); // As in a process that never registered.
        let (at_register, stopped) = std::sync::mpsc::channel::<()>();
        let (go_on, resume) = std::sync::mpsc::channel::<()>();
        let first = std::thread::spawn(move || {
            AT_REGISTER.with(|c| {
                *c.borrow_mut() = Some(Box::new(move || {
                    at_register.send(()).unwrap();
                    resume.recv().unwrap();
                }))
            });
            init()
        });
        stopped.recv().unwrap(); // The first registration is under way.
                                 // SAFETY: the child only calls `init` (system calls and atomics, no lock another
                                 // thread could hold: that is what the test checks) and `_exit`.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            // A bound, not a synchronization: the bug made this wait forever.
            // SAFETY: async-signal-safe calls only.
            unsafe { libc::alarm(20) };
            let code = if init().is_ok() { 0 } else { 1 };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        go_on.send(()).unwrap();
        first.join().unwrap().unwrap();
        assert_eq!(waited, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's first init() hung or failed (status {status:#x}: SIGALRM means hung)"
        );
    }
}
