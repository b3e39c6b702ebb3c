//! Adversarial review of the `radix` design (review-radixvm): lock-free faults against new
//! edit shapes, per-core copies after frames were freed and reused, table freeing at the
//! space's bounds, huge lengths, and out-of-memory at the window's commit.

use super::RadixDesign;
use crate::config::Arenas;
use crate::designs::Designs;
use crate::types::{Access, Advice, MapFlags, Prot, PAGE_SIZE as P};
use crate::{AddressSpace, CoreHandle, Design, Fault};

const BASE: u64 = 0x4000_0000;

fn design(space: &AddressSpace) -> &RadixDesign {
    match &*space.space.design {
        Designs::Radix(d) => d,
        other => panic!("not the radix design: {other:?}"),
    }
}

/// Tables linked in the owner tree (its root included).
fn owner_tables(space: &AddressSpace) -> u64 {
    space.space.shared.tables.owner_table_count()
}

fn radix_space(cores: usize, pages: u64) -> AddressSpace {
    AddressSpace::builder()
        .design(Design::Radix)
        .arenas(Arenas::Off)
        .address_range(BASE, BASE + pages * P)
        .memory(256 * P)
        .max_cores(cores)
        .build()
        .unwrap()
}

fn fixed() -> MapFlags {
    MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED
}

fn read_u64(h: &mut CoreHandle, x: u64) -> u64 {
    let mut b = [0u8; 8];
    h.read(x, &mut b).unwrap();
    u64::from_le_bytes(b)
}

/// Frames and tables at rest after every core discarded its tree.
fn at_rest(space: &AddressSpace, hs: &mut [&mut CoreHandle]) -> crate::Stats {
    for h in hs.iter_mut() {
        h.discard_page_tables().unwrap();
    }
    space.stats()
}

/// Regions A r, B rw (written), C r in one leaf; core F stops a fault on B (`access`) between
/// its lock-free query and its owner-leaf lock; E runs `edit`; F goes on.
fn stopped_on_b(
    access: Access,
    edit: impl FnOnce(&mut CoreHandle, u64) + Send,
) -> (Result<(), Fault>, AddressSpace, CoreHandle, CoreHandle, u64) {
    let space = radix_space(2, 4096);
    let x = BASE + 512 * P;
    let mut e = space.attach().unwrap();
    e.mmap(x, P, Prot::READ, fixed()).unwrap();
    e.mmap(x + P, 2 * P, Prot::READ_WRITE, fixed()).unwrap();
    e.mmap(x + 3 * P, P, Prot::READ, fixed()).unwrap();
    e.write(x + P, &7u64.to_le_bytes()).unwrap();
    e.write(x + 2 * P, &9u64.to_le_bytes()).unwrap();
    let mut f = space.attach().unwrap();
    let (at_query, stopped) = std::sync::mpsc::channel::<()>();
    let (go_on, resume) = std::sync::mpsc::channel::<()>();
    let (r, f) = std::thread::scope(|s| {
        let fault = s.spawn(move || {
            crate::fault_inject::STAGE1_BEFORE_FILL.arm(move || {
                at_query.send(()).unwrap();
                resume.recv().unwrap();
            });
            let r = f.touch(x + 2 * P, access);
            (r, f)
        });
        stopped.recv().unwrap();
        edit(&mut e, x);
        go_on.send(()).unwrap();
        fault.join().unwrap()
    });
    (r, space, e, f, x)
}

/// An edit of A only: the radix window holds a page on each side, so B (held, unchanged) is
/// republished as a copy by `commit_span`; then `munmap` of B. The stopped read holds B's
/// first record (neither edit touched it as an edit).
#[test]
fn review_stopped_read_after_neighbour_edit_then_munmap() {
    for access in [Access::Read, Access::Write] {
        let (r, space, mut e, mut f, x) = stopped_on_b(access, |e, x| {
            e.mprotect(x, P, Prot::READ_WRITE | Prot::EXEC).unwrap();
            e.munmap(x + P, 2 * P).unwrap();
        });
        assert_eq!(r, Err(Fault::Unmapped { addr: x + 2 * P }), "{access:?}");
        assert_eq!(
            f.touch(x + 2 * P, Access::Read),
            Err(Fault::Unmapped { addr: x + 2 * P }),
            "{access:?}: F's own tree kept a copy after munmap"
        );
        e.munmap(x, 4 * P).unwrap();
        let st = at_rest(&space, &mut [&mut e, &mut f]);
        assert_eq!(st.frames_in_use, 0, "{access:?}: {st:?}");
        design(&space).check();
    }
}

/// `munmap` of C (B republished unchanged), then `mprotect(B, NONE)`: a stopped read must not
/// leave a readable copy in F's tree.
#[test]
fn review_stopped_read_after_neighbour_munmap_then_prot_none() {
    let (r, space, mut e, mut f, x) = stopped_on_b(Access::Read, |e, x| {
        e.munmap(x + 3 * P, P).unwrap();
        e.mprotect(x + P, 2 * P, Prot::NONE).unwrap();
    });
    assert_eq!(r, Err(Fault::Protection { addr: x + 2 * P }));
    assert_eq!(
        f.touch(x + 2 * P, Access::Read),
        Err(Fault::Protection { addr: x + 2 * P })
    );
    e.munmap(x, 4 * P).unwrap();
    let st = at_rest(&space, &mut [&mut e, &mut f]);
    assert_eq!(st.frames_in_use, 0, "{st:?}");
    design(&space).check();
}

/// DONTNEED of B while F's read is stopped, then E writes a new value: F must read a value
/// the page had after its fault began (0 or the new one), never a frame freed by the zap.
#[test]
fn review_stopped_read_across_dontneed_and_rewrite() {
    let (r, space, mut e, mut f, x) = stopped_on_b(Access::Read, |e, x| {
        e.madvise(x + P, 2 * P, Advice::DONTNEED).unwrap();
        e.write(x + 2 * P, &5u64.to_le_bytes()).unwrap();
    });
    assert_eq!(r, Ok(()));
    assert_eq!(
        read_u64(&mut f, x + 2 * P),
        5,
        "F reads the page E wrote last"
    );
    e.write(x + 2 * P, &6u64.to_le_bytes()).unwrap();
    assert_eq!(read_u64(&mut f, x + 2 * P), 6);
    e.munmap(x, 4 * P).unwrap();
    let st = at_rest(&space, &mut [&mut e, &mut f]);
    assert_eq!(st.frames_in_use, 0, "{st:?}");
}

/// Copies of freed frames (per-core trees and TLBs): F and G copy x; E frees/reuses it by
/// DONTNEED, MAP_FIXED over, mprotect down, munmap + remap; F and G must see the new state.
#[test]
fn review_copies_never_outlive_their_frame() {
    let space = radix_space(3, 4096);
    let x = BASE + 1024 * P;
    let mut e = space.attach().unwrap();
    let mut f = space.attach().unwrap();
    let mut g = space.attach().unwrap();
    e.mmap(x, 4 * P, Prot::READ_WRITE, fixed()).unwrap();
    for round in 0..50u64 {
        e.write(x, &(round + 1).to_le_bytes()).unwrap();
        assert_eq!(read_u64(&mut f, x), round + 1);
        assert_eq!(read_u64(&mut g, x), round + 1);
        match round % 4 {
            0 => e.madvise(x, P, Advice::DONTNEED).unwrap(),
            1 => {
                e.mmap(x, P, Prot::READ_WRITE, fixed()).unwrap();
            }
            2 => {
                e.mprotect(x, P, Prot::READ).unwrap();
                assert_eq!(
                    f.touch(x, Access::Write),
                    Err(Fault::Protection { addr: x })
                );
                e.mprotect(x, P, Prot::READ_WRITE).unwrap();
                e.madvise(x, P, Advice::DONTNEED).unwrap();
            }
            _ => {
                e.munmap(x, P).unwrap();
                assert_eq!(f.touch(x, Access::Read), Err(Fault::Unmapped { addr: x }));
                e.mmap(x, P, Prot::READ_WRITE, fixed()).unwrap();
            }
        }
        // A new frame: E writes something else into a reused frame first.
        e.write(x + P, &0xdead_u64.to_le_bytes()).unwrap();
        e.madvise(x + P, P, Advice::DONTNEED).unwrap();
        assert_eq!(
            read_u64(&mut f, x),
            0,
            "round {round}: F read a freed frame"
        );
        assert_eq!(
            read_u64(&mut g, x),
            0,
            "round {round}: G read a freed frame"
        );
        f.write(x, &[0]).unwrap();
    }
    e.munmap(x, 4 * P).unwrap();
    let st = at_rest(&space, &mut [&mut e, &mut f, &mut g]);
    assert_eq!(st.frames_in_use, 0, "{st:?}");
    assert_eq!(st.page_tables, 3, "roots of the three trees: {st:?}");
    design(&space).check();
}

/// Table freeing at the bounds (`beyond_bounds`): regions at min_addr and at max_addr - P,
/// copied by another core, then unmapped by a munmap whose window reaches the bound: every table of
/// the owner tree and of both trees goes without a discard (the gap reaches a bound).
#[test]
fn review_tables_at_the_bounds_are_freed_by_munmap() {
    let pages = 3 * 512;
    let space = radix_space(2, pages);
    let mut e = space.attach().unwrap();
    let mut f = space.attach().unwrap();
    let lo = BASE;
    let hi = BASE + pages * P - P;
    let fresh = space.stats();
    e.mmap(lo, P, Prot::READ_WRITE, fixed()).unwrap();
    e.mmap(hi, P, Prot::READ_WRITE, fixed()).unwrap();
    e.write(lo, &[1]).unwrap();
    e.write(hi, &[2]).unwrap();
    let mut b = [0u8; 1];
    f.read(lo, &mut b).unwrap();
    f.read(hi, &mut b).unwrap();
    // Unmapping the whole space: the window holds everything, the gap reaches both bounds.
    e.munmap(lo, pages * P).unwrap();
    let st = space.stats();
    assert_eq!(st.frames_in_use, 0, "{st:?}");
    assert_eq!(st.page_tables, 2, "only the two cores' roots: {st:?}");
    assert_eq!(
        owner_tables(&space),
        1,
        "owner tree back to its root: {st:?}"
    );
    let _ = fresh;
    design(&space).check();
}

/// The owner tree's tables of small unmapped ranges: the per-core trees' can be discarded
/// (`discard_page_tables`), the owner tree's cannot; they stay until a larger munmap covers
/// them. Touch one page in each of 64 leaves, unmap each page alone, discard every tree: the
/// metadata should return to what a fresh space reports.
/// Fixed: `discard_page_tables` also frees the design's empty metadata tables where no region
/// lies (`Windowed::reclaim_tables`); before, 67 owner tables stayed linked.
#[test]
fn review_owner_tables_of_small_munmaps_are_reclaimed() {
    let pages = 128 * 512;
    let space = AddressSpace::builder()
        .design(Design::Radix)
        .arenas(Arenas::Off)
        .address_range(BASE, BASE + pages * P)
        .memory(256 * P)
        .max_cores(1)
        .build()
        .unwrap();
    let mut e = space.attach().unwrap();
    let fresh = space.stats();
    for i in 0..64u64 {
        let x = BASE + (2 * i + 1) * 512 * P + 7 * P;
        e.mmap(x, P, Prot::READ_WRITE, fixed()).unwrap();
        e.write(x, &[1]).unwrap();
        e.munmap(x, P).unwrap();
    }
    e.discard_page_tables().unwrap();
    let st = space.stats();
    assert_eq!(st.frames_in_use, 0, "{st:?}");
    assert_eq!(st.page_tables, 1, "{st:?}");
    let _ = fresh;
    assert_eq!(
        owner_tables(&space),
        1,
        "owner-tree tables stayed linked after every mapping went and every tree was discarded: {} linked ({st:?})",
        owner_tables(&space)
    );
}

/// Huge lengths and addresses near the top of the key space: errors, never a panic.
#[test]
fn review_huge_lengths_never_panic() {
    let space = radix_space(1, 4096);
    let mut e = space.attach().unwrap();
    let top = u64::MAX - (P - 1);
    for (addr, len) in [
        (0, u64::MAX - P + 1),
        (BASE, u64::MAX - P + 1),
        (top, P),
        (top - P, 2 * P),
        (BASE, (1 << 63)),
        (1 << 62, 1 << 62),
    ] {
        let _ = e.mmap(addr, len, Prot::READ, MapFlags::PRIVATE_ANONYMOUS);
        let _ = e.mmap(addr, len, Prot::READ, fixed());
        let _ = e.munmap(addr, len);
        let _ = e.mprotect(addr, len, Prot::READ);
        let _ = e.madvise(addr, len, Advice::DONTNEED);
        let _ = e.touch(addr, Access::Read);
    }
    // A hint outside the bounds is placed inside them (not a finding): clear everything.
    e.munmap(BASE, 4096 * P).unwrap();
    let st = space.stats();
    assert_eq!((st.regions, st.frames_in_use), (0, 0), "{st:?}");
    design(&space).check();
}

/// Arena placement (`alloc_padded`) with the radix map out of memory: ENOMEM, nothing changed.
#[test]
fn review_arena_alloc_out_of_memory_is_enomem() {
    let space = AddressSpace::builder()
        .design(Design::Radix)
        .arenas(Arenas::Layout {
            count: 2,
            size: 128 * P,
            base: BASE,
        })
        .address_range(BASE, BASE + 1024 * P)
        .memory(256 * P)
        .max_cores(2)
        .build()
        .unwrap();
    let mut e = space.attach().unwrap();
    for n in 0..6 {
        design(&space).map.fail_allocations_after(Some(n));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.mmap(0, 3 * P, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
        }));
        design(&space).map.fail_allocations_after(None);
        let r = r.unwrap_or_else(|_| panic!("n={n}: mmap panicked on OOM"));
        if let Ok(x) = r {
            e.write(x, &[1]).unwrap();
            e.munmap(x, 3 * P).unwrap();
        }
        design(&space).check();
    }
    assert_eq!(space.maps().len(), 0);
}

/// A commit out of memory (the design's stated panic) in each edit shape: afterwards the
/// region list is what it was, the count exact, the space usable, and a lock-free fault on a
/// region whose entries the panicked body cleared refills it instead of reading a freed frame.
#[test]
fn review_commit_out_of_memory_leaves_a_usable_space() {
    type Edit = fn(&mut CoreHandle, u64) -> Result<(), crate::VmError>;
    let edits: [(&str, Edit); 4] = [
        ("munmap split", |e, x| e.munmap(x + P, P)),
        ("mprotect split", |e, x| e.mprotect(x + P, P, Prot::READ)),
        ("map fixed", |e, x| {
            e.mmap(x + P, P, Prot::READ, fixed()).map(|_| ())
        }),
        ("munmap all", |e, x| e.munmap(x, 3 * P)),
    ];
    for (name, edit) in edits {
        let space = radix_space(2, 4096);
        let x = BASE + 512 * P;
        let mut e = space.attach().unwrap();
        let mut f = space.attach().unwrap();
        e.mmap(x, 3 * P, Prot::READ_WRITE, fixed()).unwrap();
        e.write(x + P, &3u64.to_le_bytes()).unwrap();
        assert_eq!(read_u64(&mut f, x + P), 3);
        let before = space.maps();
        design(&space).map.fail_allocations_after(Some(0));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| edit(&mut e, x)));
        design(&space).map.fail_allocations_after(None);
        assert!(
            r.is_err(),
            "{name}: the commit OOM panics (stated departure)"
        );
        assert_eq!(space.maps(), before, "{name}: the list changed");
        design(&space).check();
        // The page the body cleared: whatever it reads, it must be the same on both cores.
        let (a, b) = (read_u64(&mut e, x + P), read_u64(&mut f, x + P));
        assert_eq!(
            a, b,
            "{name}: cores disagree on one page after the failed commit"
        );
        e.munmap(x, 3 * P).unwrap();
        let st = at_rest(&space, &mut [&mut e, &mut f]);
        assert_eq!(st.frames_in_use, 0, "{name}: {st:?}");
        design(&space).check();
    }
}

/// Stress: E edits a shared range while F and G fault, copy and discard their trees; the
/// frames and tables must all come back and every read sees a value E wrote or zero.
#[test]
fn review_discards_and_copies_against_edits() {
    let space = AddressSpace::builder()
        .design(Design::Radix)
        .arenas(Arenas::Off)
        .address_range(BASE, BASE + 8192 * P)
        .memory(4096 * P)
        .max_cores(3)
        .build()
        .unwrap();
    let x = BASE + 2048 * P;
    let n = 1024u64; // Two leaves.
    let mut e = space.attach().unwrap();
    e.mmap(x, n * P, Prot::READ_WRITE, fixed()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut others: Vec<CoreHandle> = (0..2).map(|_| space.attach().unwrap()).collect();
    std::thread::scope(|s| {
        for (k, h) in others.iter_mut().enumerate() {
            let stop = &stop;
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let page = x + ((i * 37 + k as u64 * 11) % n) * P;
                    let mut b = [0u8; 8];
                    match h.read(page, &mut b) {
                        Ok(()) => {
                            let v = u64::from_le_bytes(b);
                            assert!(v == 0 || v == page, "read {v:#x} at {page:#x}");
                        }
                        Err(Fault::Unmapped { .. } | Fault::Protection { .. }) => {}
                        Err(other) => panic!("{other:?}"),
                    }
                    if i % 97 == 0 {
                        h.discard_page_tables().unwrap();
                    }
                    i += 1;
                }
            });
        }
        for round in 0..300u64 {
            let at = x + ((round * 13) % (n - 8)) * P;
            for p in 0..8 {
                let _ = e.write(at + p * P, &(at + p * P).to_le_bytes());
            }
            match round % 5 {
                0 => e.munmap(at, 8 * P).unwrap(),
                1 => e.madvise(at, 8 * P, Advice::DONTNEED).unwrap(),
                2 => e.mprotect(at, 4 * P, Prot::NONE).unwrap(),
                3 => {
                    e.mmap(at, 8 * P, Prot::READ_WRITE, fixed()).unwrap();
                }
                _ => e.mprotect(x, n * P, Prot::READ_WRITE).unwrap(),
            }
            if round % 5 == 0 {
                e.mmap(at, 8 * P, Prot::READ_WRITE, fixed()).unwrap();
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    e.munmap(x, n * P).unwrap();
    let mut refs: Vec<&mut CoreHandle> = others.iter_mut().collect();
    refs.push(&mut e);
    let st = at_rest(&space, &mut refs);
    assert_eq!(st.frames_in_use, 0, "{st:?}");
    assert_eq!(st.page_tables, 3, "{st:?}");
    design(&space).check();
}

/// Q3: a lock-free query must never miss a page that stays mapped while splits and merges of
/// its region (mprotect, madvise) are republished around it (`MISS_IS_UNMAPPED` is true for
/// the radix map: a miss answers `Unmapped` without a retry). F and G discard their trees on
/// every read so every read faults through `query`; `maps()` must always cover the range.
#[test]
fn review_query_never_misses_a_page_through_splits_and_merges() {
    let space = AddressSpace::builder()
        .design(Design::Radix)
        .arenas(Arenas::Off)
        .address_range(BASE, BASE + 8192 * P)
        .memory(4096 * P)
        .max_cores(4)
        .build()
        .unwrap();
    // Straddles a 2 MiB boundary and spans folded slots: 3 leaves' worth.
    let x = BASE + 1000 * P;
    let n = 1200u64;
    let mut e = space.attach().unwrap();
    e.mmap(x, n * P, Prot::READ_WRITE, fixed()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut others: Vec<CoreHandle> = (0..2).map(|_| space.attach().unwrap()).collect();
    let mut m = space.attach().unwrap();
    std::thread::scope(|s| {
        for (k, h) in others.iter_mut().enumerate() {
            let stop = &stop;
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let page = x + ((i * 131 + k as u64 * 7) % n) * P;
                    h.discard_page_tables().unwrap();
                    let r = h.touch(page, Access::Read);
                    assert_eq!(r, Ok(()), "read of a page that stays mapped, iteration {i}");
                    i += 1;
                }
            });
        }
        {
            let stop = &stop;
            let space = &space;
            let m = &mut m;
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let maps = space.maps();
                    let mut at = x;
                    for r in maps.iter().filter(|r| r.end > x && r.start < x + n * P) {
                        assert_eq!(r.start.max(x), at, "maps() has a hole: {maps:?}");
                        at = r.end;
                    }
                    assert!(at >= x + n * P, "maps() ends early: {maps:?}");
                    let _ = m.touch(x, Access::Read);
                }
            });
        }
        for round in 0..3000u64 {
            let at = x + ((round * 61) % (n - 600)) * P;
            let len = (1 + round % 590) * P;
            match round % 4 {
                0 => e.mprotect(at, len, Prot::READ).unwrap(),
                1 => e.mprotect(x, n * P, Prot::READ_WRITE).unwrap(),
                2 => e.madvise(at, len, Advice::RANDOM).unwrap(),
                _ => e.madvise(x, n * P, Advice::SEQUENTIAL).unwrap(),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    design(&space).check();
}

/// Q5: a page-table allocation failing at each step of a fault (the owner tree's tables, the
/// copy's tables in the core's own tree), first touch and copy of a page another core filled,
/// read and write: the fault reports `OutOfMemory` or succeeds, a retry succeeds with the data
/// the page holds, and every frame and table comes back after `munmap` and a discard.
#[test]
fn review_table_allocation_failure_in_fills_and_copies() {
    for nth in 1..=6u64 {
        for access in [Access::Read, Access::Write] {
            for first in [false, true] {
                let space = radix_space(2, 4096);
                let x = BASE + 1536 * P;
                let mut e = space.attach().unwrap();
                let mut f = space.attach().unwrap();
                e.mmap(x, 2 * P, Prot::READ_WRITE, fixed()).unwrap();
                if !first {
                    e.write(x, &11u64.to_le_bytes()).unwrap();
                }
                let f = std::thread::scope(|s| {
                    s.spawn(move || {
                        crate::fault_inject::TABLE_ALLOC.fail_nth(nth);
                        let r = f.touch(x, access);
                        crate::fault_inject::TABLE_ALLOC.fail_nth(0);
                        assert!(
                            matches!(r, Ok(()) | Err(Fault::OutOfMemory { .. })),
                            "nth {nth} {access:?} first {first}: {r:?}"
                        );
                        f.touch(x, access).unwrap();
                        f
                    })
                    .join()
                    .unwrap()
                });
                let mut f = f;
                let want = if first { 0 } else { 11 };
                assert_eq!(
                    read_u64(&mut f, x),
                    want,
                    "nth {nth} {access:?} first {first}"
                );
                assert_eq!(
                    read_u64(&mut e, x),
                    want,
                    "nth {nth} {access:?} first {first}"
                );
                e.write(x, &12u64.to_le_bytes()).unwrap();
                assert_eq!(
                    read_u64(&mut f, x),
                    12,
                    "nth {nth} {access:?} first {first}"
                );
                e.munmap(x, 2 * P).unwrap();
                assert_eq!(f.touch(x, Access::Read), Err(Fault::Unmapped { addr: x }));
                let st = at_rest(&space, &mut [&mut e, &mut f]);
                assert_eq!(
                    st.frames_in_use, 0,
                    "nth {nth} {access:?} first {first}: {st:?}"
                );
                design(&space).check();
            }
        }
    }
}

/// DONTNEED on a shared anonymous mapping keeps its data in Linux (the shmem pages stay; the
/// next access maps them again), also after another core copied the page.
#[test]
fn review_dontneed_keeps_shared_anonymous_data() {
    let space = radix_space(2, 4096);
    let mut e = space.attach().unwrap();
    let mut f = space.attach().unwrap();
    let x = e
        .mmap(
            0,
            2 * P,
            Prot::READ_WRITE,
            MapFlags::SHARED | MapFlags::ANONYMOUS,
        )
        .unwrap();
    e.write(x, &5u64.to_le_bytes()).unwrap();
    assert_eq!(read_u64(&mut f, x), 5);
    e.madvise(x, 2 * P, Advice::DONTNEED).unwrap();
    assert_eq!(
        read_u64(&mut f, x),
        5,
        "shared data dropped by DONTNEED (other core)"
    );
    assert_eq!(read_u64(&mut e, x), 5, "shared data dropped by DONTNEED");
}

/// E's `munmap(B)` stopped before its commit (entries cleared, frames freed, B still published
/// and marked, A and C held, to be republished as copies): F faults on B (must end `Unmapped`
/// once E goes on, never read a freed frame) and on A (fills lock-free from the record the
/// commit will copy); after the commit, `munmap(A)` must remove F's copy.
#[test]
fn review_faults_during_a_stopped_commit() {
    let space = radix_space(3, 4096);
    let x = BASE + 512 * P;
    let mut e = space.attach().unwrap();
    let mut f = space.attach().unwrap();
    let mut g = space.attach().unwrap();
    e.mmap(x, P, Prot::READ, fixed()).unwrap();
    e.mmap(x + P, 2 * P, Prot::READ_WRITE, fixed()).unwrap();
    e.mmap(x + 3 * P, P, Prot::READ, fixed()).unwrap();
    e.write(x + 2 * P, &9u64.to_le_bytes()).unwrap();
    assert_eq!(read_u64(&mut g, x + 2 * P), 9); // G holds a copy of B's page.
    let (at_commit, stopped) = std::sync::mpsc::channel::<()>();
    let (go_on, resume) = std::sync::mpsc::channel::<()>();
    let (e, mut f, mut g) = std::thread::scope(|s| {
        let ed = s.spawn(move || {
            crate::fault_inject::WINDOW_BEFORE_COMMIT.arm(move || {
                at_commit.send(()).unwrap();
                resume.recv().unwrap();
            });
            e.munmap(x + P, 2 * P).unwrap();
            e
        });
        stopped.recv().unwrap();
        // A: lock-free, beside the stopped window.
        assert_eq!(f.touch(x, Access::Read), Ok(()));
        let fb = s.spawn(move || {
            let r = f.touch(x + 2 * P, Access::Read);
            (r, f)
        });
        let gb = s.spawn(move || {
            let mut b = [0u8; 8];
            let r = g.read(x + 2 * P, &mut b);
            (r, b, g)
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        go_on.send(()).unwrap();
        let e = ed.join().unwrap();
        let (rf, f) = fb.join().unwrap();
        let (rg, b, g) = gb.join().unwrap();
        assert_eq!(rf, Err(Fault::Unmapped { addr: x + 2 * P }));
        assert!(
            rg == Err(Fault::Unmapped { addr: x + 2 * P })
                || (rg == Ok(()) && b == 9u64.to_le_bytes()),
            "G: {rg:?} {b:?}"
        );
        (e, f, g)
    });
    let mut e = e;
    assert_eq!(
        g.touch(x + 2 * P, Access::Read),
        Err(Fault::Unmapped { addr: x + 2 * P })
    );
    e.munmap(x, P).unwrap();
    assert_eq!(
        f.touch(x, Access::Read),
        Err(Fault::Unmapped { addr: x }),
        "F's copy of A survived"
    );
    e.munmap(x, 4 * P).unwrap();
    let st = at_rest(&space, &mut [&mut e, &mut f, &mut g]);
    assert_eq!(st.frames_in_use, 0, "{st:?}");
    design(&space).check();
}

/// Q2: the caller's own TLB after its own edit (`shoot_down_locked` flushes it directly, no
/// round): every downgrade and removal is seen by the caller's next access, in every design
/// that lets targeted shootdowns skip the caller.
#[test]
fn review_own_tlb_is_flushed_by_own_edits() {
    for design in [Design::Radix, Design::Interval, Design::Hybrid] {
        let space = AddressSpace::builder()
            .design(design)
            .arenas(Arenas::Off)
            .address_range(BASE, BASE + 4096 * P)
            .memory(256 * P)
            .max_cores(2)
            .build()
            .unwrap();
        let mut e = space.attach().unwrap();
        let x = BASE + 700 * P;
        for _ in 0..20 {
            e.mmap(x, 2 * P, Prot::READ_WRITE, fixed()).unwrap();
            e.write(x, &1u64.to_le_bytes()).unwrap();
            e.mprotect(x, P, Prot::READ).unwrap();
            assert_eq!(
                e.touch(x, Access::Write),
                Err(Fault::Protection { addr: x }),
                "{design:?}"
            );
            assert_eq!(read_u64(&mut e, x), 1);
            e.mprotect(x, P, Prot::READ_WRITE).unwrap();
            e.madvise(x, P, Advice::DONTNEED).unwrap();
            assert_eq!(
                read_u64(&mut e, x),
                0,
                "{design:?}: DONTNEED left the old frame in the TLB"
            );
            e.write(x, &2u64.to_le_bytes()).unwrap();
            e.munmap(x, 2 * P).unwrap();
            assert_eq!(
                e.touch(x, Access::Read),
                Err(Fault::Unmapped { addr: x }),
                "{design:?}"
            );
        }
        assert_eq!(space.stats().frames_in_use, 0, "{design:?}");
    }
}
