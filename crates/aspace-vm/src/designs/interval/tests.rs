//! Unit tests of the `interval` design's internals after concurrent use: the skiplist's own
//! invariants, Linux's region invariants (no overlap, no unmerged mergeable neighbours), and
//! the region counter equal to the number of regions (so the limit it enforces is exact).

use super::IntervalDesign;
use crate::config::Arenas;
use crate::designs::Designs;
use crate::types::{Access, MapFlags, Prot, PAGE_SIZE as P};
use crate::{AddressSpace, CoreHandle, Design};
use aspace_map::IntervalMap;

fn design(space: &AddressSpace) -> &IntervalDesign {
    match &*space.space.design {
        Designs::Interval(d) => d,
        other => panic!("not the interval design: {other:?}"),
    }
}

/// Checks every invariant of the design at rest (`Windowed::check`).
pub(crate) fn check(d: &IntervalDesign) {
    d.check();
}

#[test]
fn concurrent_mmaps_edits_and_faults_keep_every_invariant_and_the_count_exact() {
    let base = 0x40_0000;
    let space = AddressSpace::builder()
        .design(Design::Interval)
        .arenas(Arenas::Layout {
            count: 2,
            size: 128 * P,
            base,
        })
        .address_range(base, base + 1024 * P)
        .memory(512 * P)
        .max_cores(3)
        .build()
        .unwrap();
    let pa = MapFlags::PRIVATE_ANONYMOUS;
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let mut h = space.attach().unwrap();
            s.spawn(move || {
                let shared = base + 512 * P;
                for i in 0..400u64 {
                    // The space fills up (half the mappings stay): ENOMEM is fine then.
                    if let Ok(a) = h.mmap(0, (1 + i % 3) * P, Prot::READ_WRITE, pa) {
                        h.write(a, &[1]).unwrap();
                        if i % 2 == 0 {
                            h.munmap(a, P).unwrap();
                        }
                    }
                    let off = ((i * 7 + t) % 24) * P;
                    let _ = h.mmap(shared + off, 2 * P, Prot::READ_WRITE, pa | MapFlags::FIXED);
                    let _ = h.mprotect(shared + off + P, P, Prot::READ);
                    let _ = h.write(shared + off, &[2]);
                    if i % 5 == 0 {
                        let _ = h.munmap(shared + off, 3 * P);
                    }
                }
            });
        }
    });
    check(design(&space));
    let mut h = space.attach().unwrap();
    h.munmap(base, 1024 * P).unwrap();
    check(design(&space));
    assert_eq!(design(&space).map.len(), 0);
    assert_eq!(space.stats().page_tables, 1);
}

#[test]
fn auto_arenas_are_aligned_so_that_no_page_table_serves_two() {
    for cores in [1, 2, 4, 64, 128, 256] {
        let config = crate::Config {
            max_cores: cores,
            ..crate::Config::default()
        };
        let l =
            crate::designs::placement::arena_layout(&config).expect("the default range has arenas");
        let raw = (config.max_addr - config.min_addr) / 32 / l.count as u64;
        // 8 GiB: a line of level-3 entries (the default range gives 128 arenas >= 24 GiB).
        let align: u64 = 8 << 30;
        assert_eq!(l.base % align, 0, "{cores} cores: base {:#x}", l.base);
        assert_eq!(l.size % align, 0, "{cores} cores: size {:#x}", l.size);
        assert!(
            l.size * 3 >= raw * 2,
            "{cores} cores: alignment cost over a third"
        );
        assert!(l.base + l.count as u64 * l.size <= config.max_addr);
    }
    // A small range: aligned to leaves (2 MiB) or pages, never off when 64 pages fit.
    let config = crate::Config {
        max_cores: 4,
        min_addr: 0x1_0000,
        max_addr: 1 << 34,
        ..crate::Config::default()
    };
    let l = crate::designs::placement::arena_layout(&config).unwrap();
    assert_eq!((l.base % (2 << 20), l.size % (2 << 20)), (0, 0));
}

/// What a probing core reports while an edit is stopped before its commit.
enum Probe<T> {
    /// Its fault went to stage 2 (it will wait for the edit's window).
    Stage2,
    /// It finished with this result.
    Done(T),
}

/// Stops core `e`'s `edit` before its window commits, then runs `probe` on core `a` in another
/// thread and lets the edit go on once the probe finished or went to stage 2 (where it waits
/// for the edit); returns the probe's result.
fn probe_before_commit<T: Send + 'static>(
    mut e: CoreHandle,
    mut a: CoreHandle,
    edit: impl FnOnce(&mut CoreHandle) + Send,
    probe: impl FnOnce(&mut CoreHandle) -> T + Send,
) -> T {
    let (at_commit, stopped) = std::sync::mpsc::channel::<()>();
    let (go_on, resume) = std::sync::mpsc::channel::<()>();
    let (report, reported) = std::sync::mpsc::channel::<Probe<T>>();
    std::thread::scope(|s| {
        s.spawn(move || {
            crate::fault_inject::WINDOW_BEFORE_COMMIT.arm(move || {
                at_commit.send(()).unwrap();
                resume.recv().unwrap();
            });
            edit(&mut e);
        });
        stopped.recv().unwrap();
        let at_stage2 = report.clone();
        s.spawn(move || {
            crate::fault_inject::STAGE2_BEFORE_WINDOW.arm(move || {
                at_stage2.send(Probe::Stage2).unwrap();
            });
            let r = probe(&mut a);
            report.send(Probe::Done(r)).unwrap();
        });
        let mut out = None;
        for event in reported.iter() {
            match event {
                Probe::Stage2 => go_on.send(()).unwrap(),
                Probe::Done(r) => {
                    out = Some(r);
                    break;
                }
            }
        }
        let _ = go_on.send(()); // If the probe never waited for the edit.
        out.expect("the probe reports its result")
    })
}

fn interval_space(frames: u64) -> AddressSpace {
    let base = 0x4000_0000;
    AddressSpace::builder()
        .design(Design::Interval)
        .arenas(Arenas::Off)
        .address_range(base, base + 4096 * P)
        .memory(frames * P)
        .max_cores(3)
        .build()
        .unwrap()
}

#[test]
fn stage1_never_refuses_a_page_beside_one_an_mprotect_already_upgraded() {
    let space = interval_space(512);
    let x = 0x4000_0000 + 512 * P;
    let mut e = space.attach().unwrap();
    let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
    e.mmap(x, 2 * P, Prot::READ_WRITE, fixed).unwrap();
    e.write(x, &[1; 8]).unwrap(); // The anon identity; page 0 mapped.
    e.mprotect(x, 2 * P, Prot::READ).unwrap();
    let a = space.attach().unwrap();
    // The mprotect upgrades page 0's entry before its commit: core A's write of page 0 goes
    // through it, so its write of page 1 must not be refused by the old region.
    let (first, second) = probe_before_commit(
        e,
        a,
        |e| e.mprotect(x, 2 * P, Prot::READ_WRITE).unwrap(),
        |a| (a.write(x, &[2; 8]), a.write(x + P, &[3; 8])),
    );
    assert_eq!(
        first,
        Ok(()),
        "page 0's entry is upgraded before the commit"
    );
    assert_eq!(
        second,
        Ok(()),
        "a write of page 1 was refused after a write of page 0 went through the new protection"
    );
    check(design(&space));
}

#[test]
fn stage1_never_reports_unmapped_beside_a_populated_page() {
    // Fewer frames than pages: the populate stops early (and the mmap succeeds, as in Linux),
    // so the mapping's last page has no entry.
    let space = interval_space(64);
    let x = 0x4000_0000 + 512 * P;
    let e = space.attach().unwrap();
    let a = space.attach().unwrap();
    let flags = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED | MapFlags::POPULATE;
    let (first, last) = probe_before_commit(
        e,
        a,
        |e| {
            e.mmap(x, 200 * P, Prot::READ, flags).unwrap();
        },
        |a| {
            let mut b = [0u8; 1];
            (a.read(x, &mut b), a.touch(x + 199 * P, Access::Read))
        },
    );
    assert!(
        !(first.is_ok() && last.is_err()),
        "page 0 of a mapping was readable, then page 199 of it {last:?}"
    );
    check(design(&space));
}

#[test]
fn a_commit_out_of_memory_changes_no_region_and_gives_back_the_regions_it_reserved() {
    let space = interval_space(64);
    let x = 0x4000_0000 + 512 * P;
    let mut e = space.attach().unwrap();
    let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
    e.mmap(x, 3 * P, Prot::READ_WRITE, fixed).unwrap();
    let before = space.maps();
    // A split reserves one region; its commit cannot allocate the skiplist's nodes.
    design(&space).map.fail_allocations_after(Some(0));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.munmap(x + P, P)));
    design(&space).map.fail_allocations_after(None);
    assert!(
        r.is_err(),
        "out of memory at the commit panics (a stated departure)"
    );
    assert_eq!(
        space.maps(),
        before,
        "the failed commit changed the region list"
    );
    check(design(&space)); // The region counter is exact: the reservation was given back.
                           // The space goes on working: the same edit succeeds now.
    e.munmap(x + P, P).unwrap();
    assert_eq!(space.maps().len(), 2);
    check(design(&space));
}
