//! Unit and stress tests of the tree (fill, lookup, clear, protect, free, reuse).

use super::pool::RETIRE_BATCH;
use super::*;
use crate::frames::{FrameCache, FramePool};
use crate::types::PAGE_SIZE;
use std::sync::atomic::AtomicUsize;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Core slots of the page tables under test.
const THREADS_MAX: usize = 4;

fn pool() -> FramePool {
    FramePool::new(64 * MIB, 8).unwrap()
}

#[test]
fn fill_then_lookup_returns_the_same_entry() {
    let pt = PageTables::new(THREADS_MAX);
    let mut ptc = pt.cache(0);
    let pool = pool();
    let mut cache = FrameCache::new();
    let va = 0x7f12_3456_7000;
    assert_eq!(pt.lookup(va), None);
    let pte = pt
        .fill(&mut ptc, va, Prot::READ_WRITE, || cache.alloc(&pool))
        .unwrap();
    assert!(pte.present());
    assert_eq!(pte.prot(), Prot::READ_WRITE);
    assert_eq!(pt.lookup(va), Some(pte));
    assert_eq!(pt.lookup(va + 0xfff), Some(pte), "same page");
    assert_eq!(pt.lookup(va + PAGE_SIZE), None, "next page not filled");
    assert_eq!(pt.lookup(1 << 48), None, "beyond the tables");
    assert_eq!(pt.table_count(), 4);
    // A second fill finds it and does not allocate.
    let again = pt
        .fill(&mut ptc, va, Prot::READ, || {
            panic!("allocator called for a present page")
        })
        .unwrap();
    assert_eq!(again, pte);
    let mut out = Vec::new();
    pt.clear_range(va..va + PAGE_SIZE, &mut out);
    assert_eq!(out, vec![pte.frame()]);
    assert_eq!(pt.lookup(va), None);
    cache.free(&pool, out[0]);
    cache.drain(&pool);
}

#[test]
fn fill_without_a_frame_fails_and_maps_nothing() {
    let pt = PageTables::new(THREADS_MAX);
    let mut ptc = pt.cache(0);
    assert_eq!(
        pt.fill(&mut ptc, 0x40_0000, Prot::READ, || None),
        Err(FillError::NoFrame)
    );
    assert_eq!(pt.lookup(0x40_0000), None);
    let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
    pt.free_tables(&mut ptc, 0..1 << 47, &domain);
    assert_eq!(pt.table_count(), 1);
}

#[test]
fn clear_range_returns_only_frames_inside_the_range() {
    let pt = PageTables::new(THREADS_MAX);
    let mut ptc = pt.cache(0);
    let pool = pool();
    let mut cache = FrameCache::new();
    // Pages around a 2 MiB and a 1 GiB boundary.
    let base = 3 * GIB - 8 * PAGE_SIZE;
    let mut frames = Vec::new();
    for p in 0..16 {
        frames.push(
            pt.fill(&mut ptc, base + p * PAGE_SIZE, Prot::READ, || {
                cache.alloc(&pool)
            })
            .unwrap()
            .frame(),
        );
    }
    let mut out = Vec::new();
    pt.clear_range(base + 4 * PAGE_SIZE..base + 12 * PAGE_SIZE, &mut out);
    out.sort();
    let mut expect = frames[4..12].to_vec();
    expect.sort();
    assert_eq!(out, expect);
    for p in 0..16 {
        assert_eq!(
            pt.lookup(base + p * PAGE_SIZE).is_some(),
            !(4..12).contains(&p),
            "page {p}"
        );
    }
    // Clearing an unmapped or huge empty range is a no-op.
    let mut none = Vec::new();
    pt.clear_range(100 * GIB..1 << 47, &mut none);
    pt.clear_range(base + 4 * PAGE_SIZE..base + 12 * PAGE_SIZE, &mut none);
    assert!(none.is_empty());
    pt.clear_range(0..u64::MAX, &mut out);
    assert_eq!(out.len(), 16);
    for f in out {
        cache.free(&pool, f);
    }
    assert_eq!(pool.in_use(), 0);
    cache.drain(&pool);
}

#[test]
fn protect_range_reports_removed_rights_and_keeps_frames() {
    let pt = PageTables::new(THREADS_MAX);
    let mut ptc = pt.cache(0);
    let pool = pool();
    let mut cache = FrameCache::new();
    let va = 0x1000_0000;
    let a = pt
        .fill(&mut ptc, va, Prot::READ_WRITE, || cache.alloc(&pool))
        .unwrap();
    let b = pt
        .fill(&mut ptc, va + PAGE_SIZE, Prot::READ_WRITE, || {
            cache.alloc(&pool)
        })
        .unwrap();
    assert!(!pt.protect_range(va..va + 2 * PAGE_SIZE, Prot::READ_WRITE | Prot::EXEC));
    assert!(pt.protect_range(va..va + PAGE_SIZE, Prot::READ));
    assert_eq!(pt.lookup(va).unwrap().prot(), Prot::READ);
    assert_eq!(pt.lookup(va).unwrap().frame(), a.frame());
    assert_eq!(
        pt.lookup(va + PAGE_SIZE).unwrap().prot(),
        Prot::READ_WRITE | Prot::EXEC,
        "outside the range"
    );
    assert!(
        !pt.protect_range(va..va + PAGE_SIZE, Prot::READ),
        "unchanged"
    );
    assert!(pt.protect_range(va..va + 2 * PAGE_SIZE, Prot::NONE));
    let none = pt.lookup(va + PAGE_SIZE).unwrap();
    assert_eq!(none.prot(), Prot::NONE);
    assert_eq!(none.frame(), b.frame(), "PROT_NONE keeps the frame");
    // WRITE alone implies READ (x86): READ|WRITE -> WRITE removes nothing.
    assert!(!rights_removed(Prot::READ_WRITE, Prot::WRITE));
    assert!(rights_removed(Prot::READ_WRITE, Prot::READ));
    assert!(!pt.protect_range(5 * GIB..6 * GIB, Prot::NONE), "no tables");
    let mut out = Vec::new();
    pt.clear_range(va..va + 2 * PAGE_SIZE, &mut out);
    for f in out {
        cache.free(&pool, f);
    }
    cache.drain(&pool);
}

#[test]
fn free_tables_keeps_a_table_still_intersecting_a_region() {
    let pt = PageTables::new(THREADS_MAX);
    let mut ptc = pt.cache(0);
    let pool = pool();
    let mut cache = FrameCache::new();
    let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
    // Regions A = [2M - 8K, 2M - 4K) and B = [2M + 4K, 2M + 8K) on two leaves of one
    // level-2 table; C far away (another level-3 subtree).
    let a = 2 * MIB - 2 * PAGE_SIZE;
    let b = 2 * MIB + PAGE_SIZE;
    let c = 600 * GIB;
    for va in [a, b, c] {
        pt.fill(&mut ptc, va, Prot::READ_WRITE, || cache.alloc(&pool))
            .unwrap();
    }
    // root + L3 + L2 + 2 leaves, and L3 + L2 + leaf for C.
    assert_eq!(pt.table_count(), 8);
    // Unmap B: the gap is [A's end, C's start). B's leaf (coverage [2M, 4M)) lies inside:
    // freed. A's leaf ([0, 2M)) still intersects A: kept, and with it the L2 and L3.
    let mut out = Vec::new();
    pt.clear_range(b..b + PAGE_SIZE, &mut out);
    pt.free_tables(&mut ptc, a + PAGE_SIZE..c, &domain);
    assert_eq!(pt.table_count(), 7);
    assert!(pt.lookup(a).is_some(), "A's translation survives");
    assert!(pt.lookup(c).is_some(), "C's translation survives");
    // Unmap C: gap [A's end, 2^47): C's L3, L2 and leaf go.
    pt.clear_range(c..c + PAGE_SIZE, &mut out);
    pt.free_tables(&mut ptc, a + PAGE_SIZE..1 << 47, &domain);
    assert_eq!(pt.table_count(), 4);
    assert!(pt.lookup(a).is_some());
    // Unmap A: everything goes; the tables return to 1 (the root).
    pt.clear_range(a..a + PAGE_SIZE, &mut out);
    pt.free_tables(&mut ptc, 0..1 << 47, &domain);
    assert_eq!(pt.table_count(), 1);
    assert_eq!(pt.lookup(a), None);
    for f in out {
        cache.free(&pool, f);
    }
    cache.drain(&pool);
}

#[test]
fn freed_tables_are_reused_after_a_grace_period() {
    let pt = PageTables::new(THREADS_MAX);
    let mut ptc = pt.cache(0);
    let pool = pool();
    let mut cache = FrameCache::new();
    let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
    let mut out = Vec::new();
    let va = 0x5555_0000_0000;
    // Each cycle installs 3 tables below the root and frees them; with a batch of 4 the
    // retired tables go to RCU every other cycle.
    for _ in 0..8 {
        pt.fill(&mut ptc, va, Prot::READ_WRITE, || cache.alloc(&pool))
            .unwrap();
        pt.clear_range(va..va + PAGE_SIZE, &mut out);
        pt.free_tables(&mut ptc, 0..1 << 47, &domain);
        assert_eq!(pt.table_count(), 1);
        cache.free(&pool, out.pop().unwrap());
    }
    domain.barrier();
    let allocated = pt.allocated_tables();
    for _ in 0..2 {
        pt.fill(&mut ptc, va, Prot::READ_WRITE, || cache.alloc(&pool))
            .unwrap();
        pt.clear_range(va..va + PAGE_SIZE, &mut out);
        pt.free_tables(&mut ptc, 0..1 << 47, &domain);
        cache.free(&pool, out.pop().unwrap());
    }
    assert_eq!(
        pt.allocated_tables(),
        allocated,
        "tables recycled through RCU, none newly allocated"
    );
    cache.drain(&pool);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn table_count_returns_to_one_after_unmapping_scattered_pages() {
    let pt = PageTables::new(THREADS_MAX);
    let mut ptc = pt.cache(0);
    let pool = pool();
    let mut cache = FrameCache::new();
    let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
    let mut vas: Vec<u64> = (0..64u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17) & !(PAGE_SIZE - 1))
        .collect();
    vas.sort_unstable();
    vas.dedup();
    for &va in &vas {
        pt.fill(&mut ptc, va, Prot::READ, || cache.alloc(&pool))
            .unwrap();
    }
    assert!(pt.table_count() > 64);
    let mut out = Vec::new();
    // Unmap in pieces, freeing only the tables fully inside each piece.
    for piece in 0..8u64 {
        let r = piece << 44..(piece + 1) << 44;
        pt.clear_range(r.clone(), &mut out);
        pt.free_tables(&mut ptc, r, &domain);
    }
    assert_eq!(out.len(), vas.len());
    assert_eq!(pt.table_count(), 1);
    for f in out {
        cache.free(&pool, f);
    }
    assert_eq!(pool.in_use(), 0);
    cache.drain(&pool);
}

#[test]
fn concurrent_fills_of_one_page_allocate_one_frame() {
    let pool = pool();
    for round in 0..200u64 {
        let pt = PageTables::new(THREADS_MAX);
        let calls = AtomicUsize::new(0);
        let va = 0x7000_0000_0000 + round * 3 * GIB;
        let results: Vec<Pte> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|t| {
                    let (pt, pool, calls) = (&pt, &pool, &calls);
                    s.spawn(move || {
                        let mut cache = FrameCache::new();
                        let mut ptc = pt.cache(t);
                        let pte = pt
                            .fill(&mut ptc, va, Prot::READ_WRITE, || {
                                calls.fetch_add(1, Ordering::Relaxed);
                                cache.alloc(pool)
                            })
                            .unwrap();
                        cache.drain(pool);
                        pte
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results[0], results[1], "both see the same translation");
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "the loser allocated nothing"
        );
        assert_eq!(pool.in_use(), 1);
        assert_eq!(pt.table_count(), 4, "one table per level despite the race");
        let mut out = Vec::new();
        pt.clear_range(va..va + PAGE_SIZE, &mut out);
        let mut cache = FrameCache::new();
        cache.free(&pool, out[0]);
        cache.drain(&pool);
    }
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn stress_fill_lookup_clear_free_keeps_accounting_exact() {
    // Each thread owns a 64 MiB slice, disjoint 1 GiB-aligned for half of them and sharing
    // one level-3 table; it fills, checks, clears and frees tables in its own slice while
    // lock-free lookups of the others run, then everything is freed.
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 300;
    let pool = FramePool::new(64 * MIB, 4).unwrap();
    let pt = PageTables::new(THREADS_MAX);
    let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pt, pool, domain) = (&pt, &pool, &domain);
            s.spawn(move || {
                let reader = domain.register();
                let mut cache = FrameCache::new();
                let mut ptc = pt.cache(t as usize);
                let base = 0x10_0000_0000 + t * 64 * MIB;
                let mut out = Vec::new();
                let mut x = t + 1;
                for _ in 0..ROUNDS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let first = (x % 16_000) * PAGE_SIZE;
                    let n = 1 + (x >> 20) % 40;
                    let r = base + first..base + first + n * PAGE_SIZE;
                    for va in r.clone().step_by(PAGE_SIZE as usize) {
                        let pte = pt
                            .fill(&mut ptc, va, Prot::READ_WRITE, || cache.alloc(pool))
                            .unwrap();
                        // SAFETY: the frame is mapped only in this thread's slice.
                        unsafe { *pool.ptr(pte.frame()) = t as u8 + 1 };
                    }
                    {
                        let _g = reader.read();
                        for va in r.clone().step_by(PAGE_SIZE as usize) {
                            let pte = pt.lookup(va).expect("filled page present");
                            // SAFETY: as above.
                            assert_eq!(unsafe { *pool.ptr(pte.frame()) }, t as u8 + 1);
                        }
                        // Look at a neighbour's slice: whatever we see is a valid entry.
                        let other = 0x10_0000_0000 + ((t + 1) % THREADS) * 64 * MIB;
                        let _ = pt.lookup(other + first);
                    }
                    pt.clear_range(r.clone(), &mut out);
                    assert_eq!(out.len() as u64, n);
                    // The slice is ours and now empty: free its tables.
                    pt.free_tables(&mut ptc, base..base + 64 * MIB, domain);
                    for f in out.drain(..) {
                        cache.free(pool, f);
                    }
                }
                cache.drain(pool);
                ptc.drain(domain);
            });
        }
    });
    assert_eq!(pool.in_use(), 0);
    // The slices share one level-3 and one level-2 table (all within 256 MiB of a 1 GiB
    // boundary); their own leaves were freed. Freeing the whole space leaves the root.
    let mut ptc = pt.cache(0);
    pt.free_tables(&mut ptc, 0..1 << 47, &domain);
    assert_eq!(pt.table_count(), 1);
    domain.barrier();
}

#[test]
fn table_freed_by_a_core_is_reused_by_that_core_after_the_grace_period() {
    let pool = pool();
    let mut frames = FrameCache::new();
    let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
    let pt = PageTables::new(2);
    let (mut a, mut b) = (pt.cache(0), pt.cache(1));
    // Core A maps and unmaps pages under distinct root entries: 3 tables each time, retired
    // into A's cache until a batch goes to RCU.
    let mut out = Vec::new();
    let mut round = 0u64;
    loop {
        let va = (round + 1) << 39;
        pt.fill(&mut a, va, Prot::READ, || frames.alloc(&pool))
            .unwrap();
        pt.clear_range(va..va + PAGE_SIZE, &mut out);
        pt.free_tables(&mut a, 0..1 << 47, &domain);
        round += 1;
        if a.retired_len() == 0 {
            break;
        }
    }
    assert_eq!(a.retired_len(), 0, "A's batch was handed to RCU");
    let allocated = pt.allocated_tables();
    domain.barrier();
    // B finds nothing of A's: it allocates its three tables.
    pt.fill(&mut b, 1 << 46, Prot::READ, || frames.alloc(&pool))
        .unwrap();
    assert_eq!(
        pt.allocated_tables(),
        allocated + 3,
        "B took none of A's returned tables"
    );
    // A reuses its own.
    pt.fill(&mut a, 3 << 45, Prot::READ, || frames.alloc(&pool))
        .unwrap();
    assert_eq!(
        pt.allocated_tables(),
        allocated + 3,
        "A reused the tables it freed"
    );
    assert_eq!(pt.table_count(), 7);
    pt.clear_range(0..1 << 47, &mut out);
    for f in out.drain(..) {
        frames.free(&pool, f);
    }
    frames.drain(&pool);
    pt.free_tables(&mut b, 0..1 << 47, &domain);
    assert_eq!(
        pt.table_count(),
        1,
        "per-core counts sum to the linked tables"
    );
}

#[test]
#[should_panic(expected = "another space")]
fn cache_of_another_space_is_refused() {
    let (pt, other) = (PageTables::new(1), PageTables::new(1));
    let mut c = other.cache(0);
    let _ = pt.fill(&mut c, PAGE_SIZE, Prot::READ, || None);
}

#[test]
fn tables_above_level_2_keep_no_bitmap_and_still_free_exactly() {
    let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
    let pt = PageTables::new(1);
    let mut ptc = pt.cache(0);
    // Two GiBs under one level-3 table, and another root entry.
    for va in [GIB, 5 * GIB, (1 << 39) + GIB] {
        pt.fill(&mut ptc, va, Prot::READ, || Some(Frame::from_index(1)))
            .unwrap();
    }
    assert_eq!(pt.table_count(), 1 + 1 + 2 + 2 + 1 + 1 + 1);
    let root = pt.root();
    assert!(root.present.iter().all(|w| w.load(Ordering::Relaxed) == 0));
    let l3 = pt.child(root.entries[0].load(Ordering::Relaxed));
    assert!(l3.present.iter().all(|w| w.load(Ordering::Relaxed) == 0));
    let l2 = pt.child(l3.entries[1].load(Ordering::Relaxed));
    assert_ne!(
        l2.present[0].load(Ordering::Relaxed),
        0,
        "level 2 keeps its bitmap"
    );
    let mut out = Vec::new();
    pt.clear_range(0..1 << 47, &mut out);
    assert_eq!(out.len(), 3);
    // Free the first GiB's subtree only: the entries of the level-3 table are found by loading.
    pt.free_tables(&mut ptc, GIB..2 * GIB, &domain);
    assert_eq!(
        pt.table_count(),
        9 - 2,
        "its level-2 table and leaf were freed"
    );
    assert_ne!(
        l3.entries[5].load(Ordering::Relaxed),
        0,
        "the other GiB stays"
    );
    pt.free_tables(&mut ptc, 0..1 << 47, &domain);
    assert_eq!(pt.table_count(), 1);
    assert!(root.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
    domain.barrier();
}

/// One core installs, another frees (a fault on one core, the munmap on another): the freed
/// tables come back to the freeing core's slot, and without a bound there (the review's case)
/// the installing core allocated 3 fresh tables per round: 600 after 200 rounds.
#[test]
fn tables_freed_by_one_core_and_installed_by_another_do_not_grow_without_bound() {
    let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
    let pt = PageTables::new(2);
    let (mut a, mut b) = (pt.cache(0), pt.cache(1));
    let mut out = Vec::new();
    for round in 0..200u64 {
        let va = (round % 7 + 1) << 39;
        pt.fill(&mut b, va, Prot::READ, || Some(Frame::from_index(1)))
            .unwrap();
        pt.clear_range(va..va + PAGE_SIZE, &mut out);
        pt.free_tables(&mut a, 0..1 << 47, &domain);
        domain.barrier();
    }
    // Bounded by what the two caches and A's returned list may keep: 2 * RETIRE_BATCH per level
    // per list, plus a batch in flight.
    let bound = 3 * (4 * RETIRE_BATCH + RETIRE_BATCH) + 3;
    assert!(
        pt.allocated_tables() <= bound as u64,
        "{} tables allocated for a working set of 3",
        pt.allocated_tables()
    );
}
