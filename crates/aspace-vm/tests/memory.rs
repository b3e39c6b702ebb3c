//! Spaces built in a shared `Memory` (`Builder::build_in`), for every design: one frame budget
//! for several spaces and files, frames that go back to the memory when a space goes (its
//! exit unmaps everything), and a full memory that a fault reports as out of memory.

#![cfg(not(loom))]

use aspace_vm::{AddressSpace, Design, Fault, File, MapFlags, Memory, Prot, VmError, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

fn space(design: Design, memory: &Memory) -> AddressSpace {
    AddressSpace::builder()
        .design(design)
        .max_cores(4)
        .build_in(memory)
        .unwrap()
}

/// Maps `pages` populated private pages and writes a byte to each; returns the start.
fn populate(space: &AddressSpace, pages: u64) -> u64 {
    let mut h = space.attach().unwrap();
    let a = h
        .mmap(0, pages * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
        .unwrap();
    for i in 0..pages {
        h.write(a + i * P, &[(i as u8).wrapping_add(1)]).unwrap();
    }
    a
}

#[test]
fn a_space_gives_its_frames_back_to_a_shared_memory_when_it_goes() {
    for &design in Design::ALL {
        let m = Memory::new(1024 * P).unwrap();
        let a = space(design, &m);
        let b = space(design, &m);
        populate(&a, 100);
        let kept = populate(&b, 50);
        assert_eq!(
            m.frames_in_use(),
            150,
            "{design:?}: both spaces draw on one memory"
        );
        assert_eq!(
            a.stats().frames_in_use,
            150,
            "{design:?}: stats show the memory's frames"
        );
        drop(a);
        assert_eq!(
            m.frames_in_use(),
            50,
            "{design:?}: the dropped space's frames came back"
        );
        let mut h = b.attach().unwrap();
        let mut byte = [0];
        h.read(kept + 49 * P, &mut byte).unwrap();
        assert_eq!(byte, [50], "{design:?}: the other space is untouched");
        drop(h);
        drop(b);
        assert_eq!(m.frames_in_use(), 0, "{design:?}");
    }
}

#[test]
fn spaces_and_files_share_one_budget() {
    for &design in Design::ALL {
        // 256 frames; a core's cache takes 64 at a time.
        let m = Memory::new(256 * P).unwrap();
        let f = File::create(&m, 0).unwrap();
        assert_eq!(
            f.write_at(0, &vec![7; 100 * P as usize]).unwrap(),
            100 * P as usize
        );
        let s = space(design, &m);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, 200 * P, Prot::READ_WRITE, PA).unwrap();
        let mut failed_at = None;
        for i in 0..200 {
            match h.write(a + i * P, &[1]) {
                Ok(()) => {}
                Err(Fault::OutOfMemory { addr }) => {
                    failed_at = Some((i, addr));
                    break;
                }
                Err(e) => panic!("{design:?}: {e:?}"),
            }
        }
        let (i, addr) = failed_at.expect("the memory cannot hold 300 pages");
        assert_eq!(addr, a + i * P, "{design:?}");
        // The file's 100 pages (taken from the pool one by one, no cache) and the space's 156
        // fill the memory exactly.
        assert_eq!(i, 156, "{design:?}");
        // The file's truncation frees frames the space can use.
        f.set_len(0).unwrap();
        h.write(a + i * P, &[1]).unwrap();
        drop(h);
        drop(s);
        assert_eq!(m.frames_in_use(), 0, "{design:?}");
        drop(f);
    }
}

#[test]
fn a_memory_outlives_its_handle_while_spaces_use_it() {
    let m = Memory::new(64 * P).unwrap();
    let s = space(Design::Coarse, &m);
    let watcher = m.clone();
    drop(m);
    populate(&s, 10);
    assert_eq!(watcher.frames_in_use(), 10);
    drop(s);
    assert_eq!(watcher.frames_in_use(), 0);
}

/// Frames a file gave back (truncation, or its last handle's drop) wait in the memory's file
/// I/O cache, which keeps up to `2 * batch` (128) of them until the `Memory` itself goes and
/// is never raided: a space in the same memory then faults out of memory while
/// `frames_in_use` reports the memory empty. A memory of 100 frames: a file fills it, goes,
/// and a space cannot take a single page of the 100 said to be free.
#[test]
fn frames_a_file_gave_back_serve_a_space_in_the_same_memory() {
    for &design in Design::ALL {
        let m = Memory::new(100 * P).unwrap();
        let f = File::create(&m, 0).unwrap();
        assert_eq!(
            f.write_at(0, &vec![7; 100 * P as usize]).unwrap(),
            100 * P as usize
        );
        drop(f);
        assert_eq!(
            m.frames_in_use(),
            0,
            "{design:?}: the file's frames are free"
        );
        let s = space(design, &m);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, 50 * P, Prot::READ_WRITE, PA).unwrap();
        let mut touched = 0;
        for i in 0..50 {
            if h.write(a + i * P, &[1]).is_err() {
                break;
            }
            touched += 1;
        }
        assert_eq!(
            touched, 50,
            "{design:?}: a space in a memory reported empty could touch only {touched} of 50 pages"
        );
    }
}

/// Stats of a space in a shared memory read the memory's counters while files use it.
#[test]
fn stats_of_a_space_in_a_shared_memory_count_file_pages() {
    let m = Memory::new(256 * P).unwrap();
    let f = File::create(&m, 0).unwrap();
    f.write_at(0, &vec![1; 10 * P as usize]).unwrap();
    let s = space(Design::Coarse, &m);
    populate(&s, 5);
    let st = s.stats();
    assert_eq!((st.frames_in_use, st.frames_total), (15, 256));
    drop(s);
    assert_eq!(m.frames_in_use(), 10);
    f.set_len(0).unwrap();
    assert_eq!(m.frames_in_use(), 0);
}

/// A `Memory` with files, used and dropped in a forked child: its page cache's RCU domain
/// joins a reclaimer thread that does not exist in the child, and std's `join` panicked
/// ("threads should not terminate unexpectedly"; exit status 99 below) where it did not hang
/// (review of issue 23). Now the child's calls refuse with `ForkedChild` and the drops leak, as
/// spaces do (`fork.rs`). The child leaves by `alarm` if it hangs.
#[test]
fn a_memory_with_files_dropped_in_a_forked_child_does_not_hang() {
    let m = Memory::new(16 * P).unwrap();
    let f = File::create(&m, 0).unwrap();
    f.write_at(0, b"parent").unwrap();
    // SAFETY: the child only uses its copies of `m` and `f` and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: plain libc call in the child.
        unsafe { libc::alarm(10) };
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut buf = [0u8; 6];
            // Refused like a space's calls (its locks and reclaimer are the parent's threads').
            let ok = f.read_at(0, &mut buf) == Err(VmError::ForkedChild)
                && f.write_at(0, b"child") == Err(VmError::ForkedChild)
                && f.set_len(0) == Err(VmError::ForkedChild)
                && File::create(&m, 0).unwrap_err() == VmError::ForkedChild;
            drop(f);
            drop(m);
            if ok {
                0
            } else {
                3
            }
        }))
        .unwrap_or(99);
        // SAFETY: leaves the child without the harness.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child panicked (exit 99), hung (killed by SIGALRM: {}) or failed: status {status:#x}",
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM
    );
}

/// Every design, a space of one core slot in a shared memory: pages faulted on several threads
/// (per-core page tables map them on each), the `AddressSpace` dropped first so that the last
/// `CoreHandle`, on another thread, runs the teardown (its attach needs the slot that handle
/// just left). Every frame comes back and the memory serves a new space.
#[test]
fn the_teardown_runs_from_the_last_core_handle_and_frees_every_design_s_frames() {
    for &design in Design::ALL {
        for cores in [1usize, 3] {
            let m = Memory::new(1024 * P).unwrap();
            let s = AddressSpace::builder()
                .design(design)
                .max_cores(cores)
                .build_in(&m)
                .unwrap();
            let mut h = s.attach().unwrap();
            let a = h
                .mmap(0, 64 * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
                .unwrap();
            std::thread::scope(|sc| {
                for t in 1..cores {
                    let s = &s;
                    sc.spawn(move || {
                        let mut h = s.attach().unwrap();
                        for i in 0..64 {
                            h.write(a + i * P, &[t as u8]).unwrap();
                        }
                    });
                }
            });
            for i in 0..64 {
                h.write(a + i * P, &[9]).unwrap();
            }
            assert_eq!(m.frames_in_use(), 64, "{design:?}/{cores}");
            drop(s);
            std::thread::spawn(move || drop(h)).join().unwrap();
            assert_eq!(
                m.frames_in_use(),
                0,
                "{design:?}/{cores}: frames left in use"
            );
            let s2 = space(design, &m);
            populate(&s2, 1000);
            drop(s2);
            assert_eq!(m.frames_in_use(), 0, "{design:?}/{cores}");
        }
    }
}
