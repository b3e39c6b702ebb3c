//! `coarse`'s space lock across its upgrade (issue 22, `designs/coarse.rs`): one core runs in the
//! light mode while others attach mid-run (each attach of a second core upgrades the lock),
//! and every core checks its data and the space's region invariants as it goes.

#![cfg(not(loom))]

use aspace_vm::{AddressSpace, Design, MapFlags, Prot, PAGE_SIZE};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;
const P: u64 = PAGE_SIZE;

/// The conformance suite's at-rest invariants on `maps()`: sorted, non-overlapping, non-empty,
/// page-aligned.
fn check_maps(s: &AddressSpace) {
    let maps = s.maps();
    for r in &maps {
        assert!(
            r.start < r.end && r.start % P == 0 && r.end % P == 0,
            "{r:?}"
        );
    }
    for w in maps.windows(2) {
        assert!(w[0].end <= w[1].start, "overlap or disorder: {w:?}");
    }
}

/// Sets the progress counter past every threshold when dropped.
struct Done<'a>(&'a AtomicU64);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.store(u64::MAX, SeqCst);
    }
}

/// One core's work: `iters` rounds of mmap, write a tag into every page, read it back, a
/// second mapping's `mprotect`, munmap; thread 0 counts its rounds in `progress`.
fn churn(s: &AddressSpace, t: u64, iters: u64, progress: &AtomicU64, start_after: u64) {
    while progress.load(SeqCst) < start_after {
        std::hint::spin_loop();
    }
    // Thread 0 marks its end (or its panic) so that no waiter spins forever.
    let _done = (t == 0).then(|| Done(progress));
    let mut c = s.attach().unwrap();
    // A region kept for the whole run, written at the start and checked at the end.
    let keep = c.mmap(0, 2 * P, Prot::READ_WRITE, PA).unwrap();
    c.write(keep, &t.to_le_bytes()).unwrap();
    for i in 0..iters {
        let pages = 1 + (i + t) % 3;
        let a = c.mmap(0, pages * P, Prot::READ_WRITE, PA).unwrap();
        for p in 0..pages {
            let tag = (t << 48) | (i << 8) | p;
            c.write(a + p * P + 8, &tag.to_le_bytes()).unwrap();
        }
        for p in 0..pages {
            let mut buf = [0u8; 8];
            c.read(a + p * P + 8, &mut buf).unwrap();
            assert_eq!(
                u64::from_le_bytes(buf),
                (t << 48) | (i << 8) | p,
                "core {t} round {i}"
            );
        }
        c.mprotect(a, P, Prot::READ).unwrap();
        c.munmap(a, pages * P).unwrap();
        if i % 64 == 0 {
            check_maps(s);
        }
        if t == 0 {
            progress.fetch_add(1, SeqCst);
        }
    }
    let mut buf = [0u8; 8];
    c.read(keep, &mut buf).unwrap();
    assert_eq!(u64::from_le_bytes(buf), t, "core {t}'s kept region");
    c.munmap(keep, 2 * P).unwrap();
}

/// Thread 0 attaches first and runs light; thread `k` attaches after thread 0's
/// `joins[k - 1]`-th round (the second attach upgrades the lock mid-run, the third finds it
/// upgraded). Every round checks its data; at the end no region and no frame is left and the
/// region count of `stats()` (the lock-free copy) agrees with `maps()`.
fn run(joins: &[u64], iters: u64) {
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(4 << 20)
        .build()
        .unwrap();
    let progress = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| churn(&s, 0, iters, &progress, 0));
        for (k, &after) in joins.iter().enumerate() {
            let (s, progress) = (&s, &progress);
            scope.spawn(move || churn(s, k as u64 + 1, iters, progress, after));
        }
    });
    check_maps(&s);
    let stats = s.stats();
    assert_eq!(stats.regions, s.maps().len() as u64);
    assert_eq!(stats.regions, 0);
    assert_eq!(stats.frames_in_use, 0);
    assert_eq!(stats.cores, 0);
}

#[test]
fn cores_attaching_mid_run_upgrade_coarse_without_losing_data() {
    for joins in [[0, 0], [10, 300], [150, 150], [400, 5]] {
        run(&joins, 400);
    }
}

#[test]
fn a_lone_core_stays_consistent_with_maps_and_stats_called_from_another_thread() {
    // `maps()` from a thread without a core joins the lock's group for the call: with a core
    // attached that upgrades the lock (designs/coarse.rs); `stats()` does not.
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(1 << 20)
        .build()
        .unwrap();
    let progress = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| churn(&s, 0, 300, &progress, 0));
        scope.spawn(|| {
            while progress.load(SeqCst) < 300 {
                let st = s.stats();
                assert!(st.regions <= 2, "{st:?}");
                check_maps(&s);
                std::thread::yield_now();
            }
        });
    });
    assert_eq!(s.stats().regions, 0);
}

/// No read of a page after its `munmap` returned sees a frame, across the light mode and the
/// upgrade (review of issue 22: the light sections send no shootdown). Thread 0 attaches
/// first and runs light: it maps one page at a fresh address each round (`MAP_FIXED`, never
/// reused), writes the round's tag, publishes the page as mapped, then unmaps it and
/// publishes it as unmapped. Other threads attach mid-run (the first upgrades the lock) and
/// read the page last published mapped (it must hold its tag or fault: any other content is a
/// frame read through a stale translation, freed and reused) and the page last published
/// unmapped (it must fault).
#[test]
fn no_core_reads_a_frame_after_munmap_returned_across_the_light_mode() {
    const ROUNDS: u64 = 3000;
    const TOP: u64 = 0x10_0000 + ROUNDS * P;
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .address_range(0x10_0000, TOP + P)
        .memory(1 << 20)
        .build()
        .unwrap();
    let at = |i: u64| TOP - i * P; // round i's page, never reused
    let tag = |i: u64| (0xa5 << 56) | i;
    let mapped = AtomicU64::new(u64::MAX); // the round whose page is mapped now (or none)
    let unmapped = AtomicU64::new(u64::MAX); // the last round whose munmap returned
    let progress = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let _done = Done(&progress);
            let mut c = s.attach().unwrap();
            for i in 1..ROUNDS {
                let a = c
                    .mmap(at(i), P, Prot::READ_WRITE, PA | MapFlags::FIXED)
                    .unwrap();
                c.write(a + 8, &tag(i).to_le_bytes()).unwrap();
                mapped.store(i, SeqCst);
                // The writer's own read fills its TLB: its munmap must drop it.
                let mut b = [0u8; 8];
                c.read(a + 8, &mut b).unwrap();
                assert_eq!(u64::from_le_bytes(b), tag(i));
                c.munmap(a, P).unwrap();
                unmapped.store(i, SeqCst);
                assert!(
                    c.read(a + 8, &mut b).is_err(),
                    "round {i}: own read after munmap"
                );
                progress.store(i, SeqCst);
            }
        });
        for (k, after) in [5u64, 200, 1500].into_iter().enumerate() {
            let (s, mapped, unmapped, progress) = (&s, &mapped, &unmapped, &progress);
            scope.spawn(move || {
                while progress.load(SeqCst) < after {
                    std::hint::spin_loop();
                }
                let mut c = s.attach().unwrap();
                let mut b = [0u8; 8];
                while progress.load(SeqCst) < ROUNDS - 1 {
                    let u = unmapped.load(SeqCst);
                    if u != u64::MAX {
                        let r = c.read(at(u) + 8, &mut b);
                        assert!(r.is_err(), "reader {k}: round {u} read {b:x?} after munmap");
                    }
                    let m = mapped.load(SeqCst);
                    if m != u64::MAX && c.read(at(m) + 8, &mut b).is_ok() {
                        assert_eq!(u64::from_le_bytes(b), tag(m), "reader {k}: round {m}");
                    }
                }
            });
        }
    });
    assert_eq!(s.stats().regions, 0);
}
