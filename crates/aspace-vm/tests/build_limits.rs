//! Building a space under an address-space limit just above what the process uses is an error,
//! never a panic or an abort: the RCU reclaimer thread that cannot be spawned (its stack does
//! not fit) is refused with `ENOMEM` before the frame reservation is made. One test in its own
//! binary: it forks, and a forked child of a test binary running other tests in parallel
//! could inherit a lock another thread held.
#![cfg(not(loom))]

use aspace_vm::{Access, AddressSpace, Design, MapFlags, Prot, VmError};

/// The process's virtual size in bytes (`/proc/self/status`).
fn vm_size() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = s
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmSize in /proc/self/status");
    kb * 1024
}

/// Builds and uses a space: 0 worked, 2 refused with ENOMEM, 3 another error (exit codes).
fn attempt(design: Design) -> i32 {
    let space = match AddressSpace::builder()
        .design(design)
        .memory(4096)
        .max_cores(1)
        .build()
    {
        Ok(s) => s,
        Err(VmError::OutOfMemory(_)) => return 2,
        Err(_) => return 3,
    };
    let Ok(mut c) = space.attach() else {
        return 3;
    };
    if let Ok(x) = c.mmap(0, 4096, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS) {
        let _ = c.touch(x, Access::Write);
        let _ = c.munmap(x, 4096);
    }
    0
}

/// Regression (review of issue 17): `build()` panicked ("cannot spawn the reclaimer thread")
/// when the reclaimer's stack did not fit under `RLIMIT_AS`.
#[test]
fn build_under_an_address_space_limit_errors_and_never_panics() {
    let mut bad = Vec::new();
    for &design in Design::ALL {
        for extra_kib in [0u64, 64, 512, 1024, 2048, 4096, 16384] {
            let limit = vm_size() + extra_kib * 1024;
            // SAFETY: this binary runs this one test, so no other thread holds a lock the
            // child needs; the child only sets a limit, builds a space and exits.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let r = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                // SAFETY: plain system call on a local struct.
                unsafe { libc::setrlimit(libc::RLIMIT_AS, &r) };
                let code = std::panic::catch_unwind(|| attempt(design)).unwrap_or(99);
                // SAFETY: ends the child without running the parent's destructors.
                unsafe { libc::_exit(code) };
            }
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            let clean = libc::WIFEXITED(status) && [0, 2].contains(&libc::WEXITSTATUS(status));
            if !clean {
                bad.push((design, extra_kib, status));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "panicked (exit 99), failed otherwise or died under RLIMIT_AS: {bad:?}"
    );
}
