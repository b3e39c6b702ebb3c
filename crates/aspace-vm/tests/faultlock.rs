//! Tests of the `faultlock` design beyond the shared suites: the one step of its own.
//!
//! `faultlock`'s `mmap(NULL)` chooses its gap under the fault lock's *read* side (beside the
//! faults) and maps it later under the write side; the choice stays valid only because every
//! edit holds the space mutex across both (`designs/faultlock.rs`). Without it two concurrent
//! `mmap`s choose the same gap and the second fails with `EEXIST`: this test fails then (it did
//! when the mutex was removed from `mmap`; the conformance stress test is too short to see it).
//! Faulting threads run beside the mappers, so the read side is shared while the gaps are chosen.

#![cfg(not(loom))]

use aspace_vm::{AddressSpace, Design, MapFlags, Prot, PAGE_SIZE};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

/// Counts a mapper as done when it ends, by return or by panic (so the faulter stops and the
/// panic is reported instead of a hang).
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

const P: u64 = PAGE_SIZE;
const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;
const MAPPERS: usize = 3;
const ROUNDS: usize = 20_000;

#[test]
fn concurrent_anywhere_mmaps_each_get_their_own_gap_while_faults_run() {
    let space = AddressSpace::builder()
        .design(Design::FaultLock)
        .address_range(0x10_0000, 0x10_0000 + 4096 * P)
        .memory(256 * P)
        .max_cores(MAPPERS + 2)
        .build()
        .unwrap();
    let mut owner = space.attach().unwrap();
    let faulted = owner.mmap(0, 8 * P, Prot::READ_WRITE, PA).unwrap();
    let barrier = Barrier::new(MAPPERS + 1);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..MAPPERS {
            s.spawn(|| {
                let _done = Done(&done);
                let mut h = space.attach().unwrap();
                barrier.wait();
                for _ in 0..ROUNDS {
                    let a = h
                        .mmap(0, P, Prot::READ_WRITE, PA)
                        .expect("mmap(NULL) gets a gap of its own");
                    h.write(a, &[1]).unwrap();
                    h.munmap(a, P).unwrap();
                }
            });
        }
        s.spawn(|| {
            let mut h = space.attach().unwrap();
            barrier.wait();
            let mut buf = [0u8; 1];
            while done.load(Ordering::Relaxed) < MAPPERS {
                for p in 0..8 {
                    h.write(faulted + p * P, &[2]).unwrap();
                }
                h.madvise(faulted, 8 * P, aspace_vm::Advice::DONTNEED)
                    .unwrap();
                h.read(faulted, &mut buf).unwrap();
                assert_eq!(buf, [0], "DONTNEED dropped the private page");
            }
        });
    });
    owner.munmap(faulted, 8 * P).unwrap();
    let st = space.stats();
    assert_eq!((st.regions, st.frames_in_use), (0, 0), "{st:?}");
}
