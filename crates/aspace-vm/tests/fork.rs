//! A space used in a forked child fails with a clear error instead of hanging on locks or
//! access windows frozen by the fork (README, hazards).
//!
//! The parent keeps a second thread mapping, touching and unmapping (so at the moment of the
//! fork the space lock or an access window may be held by a thread that does not exist in the
//! child). The child checks every entry point, drops its handles and the space, and reports
//! through its exit status; an `alarm` kills it if anything hangs.

#![cfg(not(loom))]

use aspace_vm::{Access, AddressSpace, Fault, MapFlags, Prot, VmError};
use std::sync::atomic::{AtomicBool, Ordering};

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
    let own = AddressSpace::builder().memory(1 << 20).build().unwrap();
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

#[test]
fn a_space_used_in_a_forked_child_fails_with_forked_child() {
    let space = AddressSpace::builder().memory(4 << 20).build().unwrap();
    let mut core = space.attach().unwrap();
    let a = core
        .mmap(0, 4096, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
        .unwrap();
    core.write(a, &[7]).unwrap();
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
