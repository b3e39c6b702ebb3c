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

/// Review (issue 19): `faultlock` resolves a hint or `mmap(NULL)` into a `MAP_FIXED_NOREPLACE`
/// of the address its read-side search chose, where `coarse` places and maps in one step
/// (`placement::map_placed_locked`). One history run on both must give the same answers and
/// the same `maps()` after every call (bad mapping types, populate, writes that give regions
/// their anon identity and so decide merges, hints on, beside and past mappings included).
#[test]
fn faultlock_places_and_answers_exactly_like_coarse_in_one_history() {
    same_history_as_coarse(Design::FaultLock);
}

/// The same for `interval` with arenas off (its `mmap(NULL)` and hints go through
/// `placement::choose` over lock-free scans, taken as `MAP_FIXED_NOREPLACE` under a window).
#[test]
fn interval_without_arenas_places_and_answers_exactly_like_coarse_in_one_history() {
    same_history_as_coarse(Design::Interval);
}

fn same_history_as_coarse(design: Design) {
    let lo = 0x10_0000;
    let hi = lo + 256 * P;
    let build = |d| {
        AddressSpace::builder()
            .design(d)
            .address_range(lo, hi)
            .memory(512 * P)
            .max_map_count(24)
            .arenas(aspace_vm::Arenas::Off)
            .build()
            .unwrap()
    };
    let (c, f) = (build(Design::Coarse), build(design));
    let (mut hc, mut hf) = (c.attach().unwrap(), f.attach().unwrap());
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let (mut placed, mut merged_writes) = (0, 0);
    for step in 0..20_000 {
        let addr = lo - 4 * P + next(264) * P;
        let len = (1 + next(12)) * P;
        let prot = [Prot::NONE, Prot::READ, Prot::READ_WRITE][next(3) as usize];
        let mut flags = [
            MapFlags::PRIVATE_ANONYMOUS,
            MapFlags::SHARED | MapFlags::ANONYMOUS,
            MapFlags::ANONYMOUS, // no type: EINVAL after placement
        ][(next(10) / 4) as usize];
        let op = next(9);
        if op < 4 && next(4) == 0 {
            flags = flags | MapFlags::POPULATE;
        }
        let (rc, rf) = match op {
            0 => (
                format!("{:?}", hc.mmap(0, len, prot, flags)),
                format!("{:?}", hf.mmap(0, len, prot, flags)),
            ),
            1 => (
                format!("{:?}", hc.mmap(addr, len, prot, flags)),
                format!("{:?}", hf.mmap(addr, len, prot, flags)),
            ),
            2 => {
                let fl = flags | MapFlags::FIXED;
                (
                    format!("{:?}", hc.mmap(addr, len, prot, fl)),
                    format!("{:?}", hf.mmap(addr, len, prot, fl)),
                )
            }
            3 => {
                let fl = flags | MapFlags::FIXED_NOREPLACE;
                (
                    format!("{:?}", hc.mmap(addr, len, prot, fl)),
                    format!("{:?}", hf.mmap(addr, len, prot, fl)),
                )
            }
            4 => (
                format!("{:?}", hc.munmap(addr, len)),
                format!("{:?}", hf.munmap(addr, len)),
            ),
            5 => (
                format!("{:?}", hc.mprotect(addr, len, prot)),
                format!("{:?}", hf.mprotect(addr, len, prot)),
            ),
            6 => (
                format!("{:?}", hc.madvise(addr, len, aspace_vm::Advice::DONTNEED)),
                format!("{:?}", hf.madvise(addr, len, aspace_vm::Advice::DONTNEED)),
            ),
            _ => (
                format!("{:?}", hc.write(addr, &[step as u8])),
                format!("{:?}", hf.write(addr, &[step as u8])),
            ),
        };
        assert_eq!(rc, rf, "step {step}, op {op}, addr {addr:#x}, len {len:#x}");
        placed += usize::from(op < 2 && rc.starts_with("Ok"));
        merged_writes += usize::from(op >= 7 && rc.starts_with("Ok"));
        assert_eq!(c.maps(), f.maps(), "step {step}, op {op}");
    }
    assert!(
        placed > 500 && merged_writes > 500,
        "{placed} {merged_writes}"
    );
    let (sc, sf) = (c.stats(), f.stats());
    assert_eq!(
        (sc.regions, sc.frames_in_use),
        (sf.regions, sf.frames_in_use)
    );
}
