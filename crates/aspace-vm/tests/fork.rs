//! A space used in a forked child fails with a clear error instead of hanging on locks or
//! access windows frozen by the fork (README, hazards).
//!
//! The parent keeps a second thread mapping, touching and unmapping (so at the moment of the
//! fork the space lock or an access window may be held by a thread that does not exist in the
//! child). The child checks every entry point, drops its handles and the space, and reports
//! through its exit status; an `alarm` kills it if anything hangs.
//!
//! A second test forks while another parent thread holds the locks a core's detach takes (the
//! frame pool's and the page-table pool's, through a testing hook) and checks that the child's
//! drop of its handle and space leaks them without touching any lock: the parent waits for the
//! child with a bounded wait and kills it if it hangs.

#![cfg(not(loom))]

use aspace_vm::{Access, AddressSpace, Design, Fault, MapFlags, Prot, VmError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Exit codes of the child: which check failed.
const OK: i32 = 0;

fn child_checks(space: AddressSpace, mut core: aspace_vm::CoreHandle, a: u64) -> i32 {
    let e = VmError::ForkedChild;
    if core.mmap(0, 4096, Prot::READ, MapFlags::PRIVATE_ANONYMOUS) != Err(e.clone()) {
        return 10;
    }
    if core.munmap(a, 4096) != Err(e.clone()) {
        return 11;
    }
    if core.mprotect(a, 4096, Prot::READ) != Err(e.clone()) {
        return 12;
    }
    if core.madvise(a, 4096, aspace_vm::Advice::DONTNEED) != Err(e.clone()) {
        return 13;
    }
    let mut b = [0u8; 8];
    if core.read(a, &mut b) != Err(Fault::ForkedChild { addr: a }) {
        return 14;
    }
    if core.touch(a, Access::Write) != Err(Fault::ForkedChild { addr: a }) {
        return 15;
    }
    if space.attach().err() != Some(e.clone()) {
        return 16;
    }
    if e.errno() != libc::ENOTRECOVERABLE {
        return 17;
    }
    let s = space.clone();
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || s.maps())).is_ok() {
        return 18;
    }
    // A space of the child's own works.
    let own = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(1 << 20)
        .build()
        .unwrap();
    let mut c = own.attach().unwrap();
    let x = c
        .mmap(0, 4096, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
        .unwrap();
    if c.write(x, &[1]).is_err() {
        return 19;
    }
    drop(c);
    drop(own);
    // Dropping the parent's handle and space must not hang.
    drop(core);
    drop(space);
    OK
}

/// A `coarse` space, a core of it, and a page of it the core wrote (7).
fn space_with_a_written_page() -> (AddressSpace, aspace_vm::CoreHandle, u64) {
    let space = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(4 << 20)
        .build()
        .unwrap();
    let mut core = space.attach().unwrap();
    let a = core
        .mmap(0, 4096, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
        .unwrap();
    core.write(a, &[7]).unwrap();
    (space, core, a)
}

#[test]
fn a_space_used_in_a_forked_child_fails_with_forked_child() {
    let (space, mut core, a) = space_with_a_written_page();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let busy = s.spawn(|| {
            let mut c = space.attach().unwrap();
            while !stop.load(Ordering::Relaxed) {
                let x = c
                    .mmap(0, 8192, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
                    .unwrap();
                c.write(x, &[1; 8192]).unwrap();
                c.munmap(x, 8192).unwrap();
            }
        });
        // SAFETY: fork in a test process; the child only runs the checks below and leaves with
        // `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: plain libc calls in the child.
            unsafe { libc::alarm(20) };
            let space = space.clone();
            // SAFETY: the child's copy of `core` is moved into the checks; the original is never
            // used or dropped in the child (it leaves with `_exit`).
            let core = unsafe { std::ptr::read(&core) };
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                child_checks(space, core, a)
            }))
            .unwrap_or(99);
            // SAFETY: leave the child without running the parent's destructors or harness.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
        assert_eq!(rc, pid);
        assert!(
            libc::WIFEXITED(status),
            "the child did not exit (status {status:#x}: killed by the alarm = it hung)"
        );
        assert_eq!(libc::WEXITSTATUS(status), OK, "child check failed");
    });
    // The parent's space is unaffected.
    let mut b = [0u8];
    core.read(a, &mut b).unwrap();
    assert_eq!(b, [7]);
}

/// Waits for child `pid` to exit, at most `limit`: its wait status, or `None` after killing it
/// (it hung). Blocks in `poll` on a pidfd (woken by the child's exit); on kernels without
/// `pidfd_open` it polls `waitpid(WNOHANG)` every 10 ms instead (a timeout, not a
/// synchronization: the outcome does not depend on the interval).
fn wait_bounded(pid: libc::pid_t, limit: Duration) -> Option<libc::c_int> {
    let deadline = Instant::now() + limit;
    // SAFETY: `pidfd_open` on our own child; the result is a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    let status = loop {
        let mut status = 0;
        // SAFETY: a non-blocking wait for our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(rc >= 0, "waitpid failed");
        if rc == pid {
            break Some(status);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // SAFETY: kills and reaps our own child, which has not been reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            break None;
        }
        if pidfd >= 0 {
            let mut fd = libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, 1_000) as libc::c_int;
            // SAFETY: polls one valid descriptor we own.
            unsafe { libc::poll(&mut fd, 1, ms) };
        } else {
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
    };
    if pidfd >= 0 {
        // SAFETY: closes the descriptor opened above, once.
        unsafe { libc::close(pidfd) };
    }
    status
}

#[test]
fn a_forked_childs_drop_of_handle_and_space_takes_no_lock_a_parent_thread_held() {
    // Faulting a page in fills the core's frame cache (the rest of its first batch) and
    // installs page tables from its table cache.
    let (space, mut core, a) = space_with_a_written_page();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let status = std::thread::scope(|s| {
        let shared = &space;
        let locker = s.spawn(move || {
            shared.hold_pool_locks_for_testing(|| {
                held_tx.send(()).unwrap();
                // Holds the locks until the parent has seen the child end (or killed it).
                release_rx.recv().unwrap();
            })
        });
        held_rx.recv().unwrap();
        // SAFETY: fork in a test process; the child only drops its copies of the handle and
        // the space and leaves with `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: the child takes over its bitwise copies of `core` and `space` (the last
            // references to the space in the child: the locker thread does not exist here);
            // the originals are never used or dropped in the child (it leaves with `_exit`).
            let (core, space) = unsafe { (std::ptr::read(&core), std::ptr::read(&space)) };
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                drop(core);
                drop(space);
            }))
            .map_or(99, |()| OK);
            // SAFETY: leave the child without running the parent's destructors or harness.
            unsafe { libc::_exit(code) };
        }
        let status = wait_bounded(pid, Duration::from_secs(20));
        release_tx.send(()).unwrap();
        locker.join().unwrap();
        status
    });
    let status = status.expect("the child hung dropping its handle or space (killed after 20 s)");
    assert!(
        libc::WIFEXITED(status),
        "the child did not exit normally (status {status:#x})"
    );
    assert_eq!(
        libc::WEXITSTATUS(status),
        OK,
        "the child's drop panicked (99)"
    );
    // The parent's space is unaffected and its locks were released.
    let mut b = [0u8];
    core.read(a, &mut b).unwrap();
    assert_eq!(b, [7]);
    core.munmap(a, 4096).unwrap();
}
