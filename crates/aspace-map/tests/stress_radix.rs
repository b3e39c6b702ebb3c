//! Multi-threaded stress test of `RadixMap` with poison-on-free values, per-thread sequential
//! models, invariant checks and Refcache node reclamation racing the operations.
//!
//! Layout (pages): thread `t` owns a *private* region of `REGION` pages; the regions are
//! adjacent and share radix leaves (512 pages each), so that operations of different threads
//! lock neighbouring slots of one node, expand the same folded slots and empty and refill the
//! same nodes. Only thread `t` maps, unmaps, allocates (`alloc`, exact first fit with the
//! per-core hint), locks and swaps in its region, so a `BTreeMap` model predicts every answer
//! there exactly. A *chaos zone* after the regions, two leaves wide and 2 MiB-aligned, takes
//! overlapping maps, unmaps, allocs and lock + swaps from every thread, including whole-leaf
//! and multi-leaf ranges (folded level-1 slots, expansions of folded slots under contention,
//! nodes emptied and freed while others descend into them). Queries and visits run everywhere.
//!
//! Two runs: the default Refcache configuration, and `with_eager_reclaim` (an epoch per
//! operation: emptied nodes are freed, and revived, as fast as Refcache allows, racing the
//! lockers that descend into them).
//!
//! Values poison themselves on drop and carry the interval they were created for: every value a
//! query or visit returns must be intact (RCU keeps it alive for the guard) and its interval
//! must contain the address and lie inside the value's origin (remainders are clones). A live
//! counter must equal `len()` after the map's `barrier()`, and 0 after the map is dropped. At
//! the end the structure is checked (`check_invariants`), everything is unmapped, and
//! `collect()` must leave the root alone: every node was reclaimed through Refcache.
//!
//! Bounded by wall time (`DURATION`). Set `STRESS_SEED=<n>` to vary the operation mix.

#![cfg(not(loom))]

mod stress_support;

use aspace_map::{Interval, IntervalLocking, IntervalMap, RadixMap, KEY_SPACE_END, PAGE_SIZE as P};
use aspace_rcu::Domain;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use stress_support::{seed, snapshot, AbortOnPanic, Model, Val};

const THREADS: usize = 4;
/// Pages of one private region.
const REGION: u64 = 96;
/// First page of the regions (not leaf-aligned: region 0 shares a leaf with free pages).
const BASE: u64 = 3 * 512 + 40;
/// The chaos zone: two leaves, 2 MiB-aligned, after the regions.
const CHAOS: (u64, u64) = (4 * 512, 6 * 512);
const DURATION: Duration = Duration::from_millis(1500);

fn region(t: usize) -> (u64, u64) {
    let s = BASE + t as u64 * REGION;
    (s, s + REGION)
}

fn worker(m: &RadixMap<Val>, t: usize, live: &Arc<AtomicIsize>, deadline: Instant) -> u64 {
    let _abort = AbortOnPanic;
    let mut rng = SmallRng::seed_from_u64(seed(0x7ad1_7000) + t as u64);
    let reader = m.domain().register();
    let (alo, ahi) = region(t);
    let all = (BASE - 64, CHAOS.1 + 64);
    let mut model = Model::default();
    let mut next_id = (t as u64) << 40;
    let mut id = || {
        next_id += 1;
        next_id
    };
    let mut ops = 0u64;
    let range_in = |rng: &mut SmallRng, lo: u64, hi: u64, max: u64| {
        let a = rng.gen_range(lo..hi);
        let b = rng.gen_range(a + 1..=hi.min(a + max));
        (a, b)
    };
    while Instant::now() < deadline {
        for _ in 0..64 {
            ops += 1;
            match rng.gen_range(0..17) {
                // Private region: map / unmap.
                0 | 1 => {
                    let (a, b) = range_in(&mut rng, alo, ahi, 12);
                    if rng.gen_bool(0.6) {
                        let i = id();
                        m.map(a * P..b * P, Some(Val::new(i, (a * P, b * P), live)))
                            .unwrap();
                        model.insert(a, b, i);
                    } else {
                        m.map(a * P..b * P, None).unwrap();
                        model.remove(a, b);
                    }
                }
                // Private region: alloc over the whole region is exact first fit (the hint).
                2 => {
                    let len = rng.gen_range(1..4);
                    let i = id();
                    let want = model.first_fit(alo, ahi, len);
                    let got = m.alloc(
                        alo * P..ahi * P,
                        len * P,
                        Val::new(i, (alo * P, ahi * P), live),
                    );
                    match (want, got) {
                        (Some(at), Ok(iv)) => {
                            assert_eq!(
                                iv,
                                Interval::new(at * P, (at + len) * P).unwrap(),
                                "first fit"
                            );
                            model.insert(at, at + len, i);
                        }
                        (None, Err(_)) => {}
                        (w, g) => panic!("alloc in region {t} len {len}: model {w:?}, map {g:?}"),
                    }
                }
                // Private region: alloc in a sub-range is exact first fit too.
                3 => {
                    let (a, b) = range_in(&mut rng, alo, ahi, 24);
                    let len = rng.gen_range(1..3);
                    let i = id();
                    let want = model.first_fit(a, b, len);
                    let got = m.alloc(a * P..b * P, len * P, Val::new(i, (a * P, b * P), live));
                    match (want, got) {
                        (Some(at), Ok(iv)) => {
                            assert_eq!(iv, Interval::new(at * P, (at + len) * P).unwrap());
                            model.insert(at, at + len, i);
                        }
                        (None, Err(_)) => {}
                        (w, g) => panic!("alloc in [{a}, {b}) len {len}: model {w:?}, map {g:?}"),
                    }
                }
                // Private region: lock + swap (or release without swapping). The lock holds
                // the dynamic interval, which stays inside the region (intervals do).
                4 => {
                    let (a, b) = range_in(&mut rng, alo, ahi, 12);
                    let l = m.lock(a * P..b * P).unwrap();
                    let held = l.held();
                    assert!(alo * P <= held.start && held.end <= ahi * P, "{held}");
                    if rng.gen_bool(0.2) {
                        drop(l);
                    } else {
                        let mut new = Vec::new();
                        let mut at = a;
                        while at < b {
                            let s = rng.gen_range(at..b);
                            let e = rng.gen_range(s + 1..=b);
                            if rng.gen_bool(0.7) {
                                new.push((s, e, id()));
                            }
                            at = e;
                        }
                        let ivs = new
                            .iter()
                            .map(|&(s, e, i)| {
                                (
                                    Interval::new(s * P, e * P).unwrap(),
                                    Val::new(i, (s * P, e * P), live),
                                )
                            })
                            .collect();
                        m.swap(l, ivs).unwrap();
                        model.remove(a, b);
                        for (s, e, i) in new {
                            model.insert(s, e, i);
                        }
                    }
                }
                // Private region: queries agree with the model exactly.
                5 | 6 => {
                    let g = reader.read();
                    for _ in 0..4 {
                        let page = rng.gen_range(alo..ahi);
                        let got = m.query(page * P + rng.gen_range(0..P), &g).map(|(iv, v)| {
                            v.assert_intact(iv, Some(page * P));
                            (iv.start / P, iv.end / P, v.id)
                        });
                        assert_eq!(got, model.get(page), "query of own page {page}");
                    }
                }
                // Chaos zone: overlapping map / unmap, small or up to two whole leaves.
                7 | 8 => {
                    let max = if rng.gen_bool(0.2) { 1024 } else { 12 };
                    let (a, b) = range_in(&mut rng, CHAOS.0, CHAOS.1, max);
                    let v = rng
                        .gen_bool(0.6)
                        .then(|| Val::new(id(), (a * P, b * P), live));
                    m.map(a * P..b * P, v).unwrap();
                }
                // Chaos zone: whole aligned leaves (folded level-1 slots), mapped or unmapped.
                9 => {
                    let leaf = CHAOS.0 + 512 * rng.gen_range(0..2);
                    let v = rng
                        .gen_bool(0.5)
                        .then(|| Val::new(id(), (leaf * P, (leaf + 512) * P), live));
                    m.map(leaf * P..(leaf + 512) * P, v).unwrap();
                }
                // Chaos zone: alloc.
                10 => {
                    let (a, b) = range_in(&mut rng, CHAOS.0, CHAOS.1, 64);
                    let len = rng.gen_range(1..4);
                    if let Ok(iv) =
                        m.alloc(a * P..b * P, len * P, Val::new(id(), (a * P, b * P), live))
                    {
                        assert!(a * P <= iv.start && iv.end <= b * P && iv.len() == len * P);
                    }
                }
                // Chaos zone: lock + swap.
                11 => {
                    let (a, b) = range_in(&mut rng, CHAOS.0, CHAOS.1, 24);
                    let l = m.lock(a * P..b * P).unwrap();
                    let s = rng.gen_range(a..b);
                    let e = rng.gen_range(s + 1..=b);
                    let iv = Interval::new(s * P, e * P).unwrap();
                    m.swap(l, vec![(iv, Val::new(id(), (s * P, e * P), live))])
                        .unwrap();
                }
                // Queries anywhere, holding one guard across them and re-checking at the end:
                // values stay intact for the guard even if their records are replaced.
                12 | 13 => {
                    let g = reader.read();
                    let mut held = Vec::new();
                    for _ in 0..8 {
                        let addr = rng.gen_range(all.0..all.1) * P + rng.gen_range(0..P);
                        if let Some((iv, v)) = m.query(addr, &g) {
                            v.assert_intact(iv, Some(addr));
                            held.push((iv, v));
                        }
                    }
                    std::hint::black_box(&held);
                    for (iv, v) in held {
                        v.assert_intact(iv, None);
                    }
                }
                // Visits anywhere: ordered, disjoint, intact.
                14 | 15 => {
                    let (a, b) = range_in(&mut rng, all.0, all.1, 2048);
                    let _ = snapshot(m, a, b);
                }
                // Private region: the map's contents equal the model's.
                _ => {
                    let got = snapshot(m, alo, ahi);
                    let want: Vec<_> = model.0.iter().map(|(&a, &(z, i))| (a, z, i)).collect();
                    assert_eq!(got, want, "region {t} diverged from its model");
                }
            }
        }
    }
    // Final per-region check against the model.
    let got = snapshot(m, alo, ahi);
    let want: Vec<_> = model.0.iter().map(|(&a, &(z, i))| (a, z, i)).collect();
    assert_eq!(got, want, "region {t} diverged from its model");
    ops
}

/// Runs the workers; returns how many node objects Refcache freed while they ran.
fn run(make: fn(Domain) -> RadixMap<Val>) -> u64 {
    let live = Arc::new(AtomicIsize::new(0));
    let domain = Domain::new();
    let m = make(domain.clone());
    let barrier = Barrier::new(THREADS);
    let deadline = Instant::now() + DURATION;
    let ops: u64 = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (m, live, barrier) = (&m, &live, &barrier);
                sc.spawn(move || {
                    barrier.wait();
                    worker(m, t, live, deadline)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(ops > 0);
    let stats = m.node_stats();
    eprintln!("{ops} operations; Refcache: {stats:?}");
    m.check_invariants();
    let whole = snapshot(&m, 0, KEY_SPACE_END / P);
    assert_eq!(
        whole.len(),
        m.len(),
        "len equals the number of intervals visited"
    );
    m.barrier();
    assert_eq!(
        live.load(Ordering::Relaxed),
        m.len() as isize,
        "every removed value dropped after barrier(), and only those"
    );
    // Everything unmapped: Refcache frees every node but the root.
    m.map(0..KEY_SPACE_END, None).unwrap();
    m.collect();
    m.check_invariants();
    assert_eq!(m.node_count(), 1, "every emptied node reclaimed");
    assert_eq!(live.load(Ordering::Relaxed), 0);
    drop(m);
    domain.barrier();
    assert_eq!(
        live.load(Ordering::Relaxed),
        0,
        "every value dropped with the map"
    );
    stats.freed
}

#[test]
fn concurrent_mixed_operations_keep_values_intact_models_exact_and_reclaim_every_node() {
    run(RadixMap::new);
}

#[test]
fn the_same_with_refcache_freeing_nodes_as_fast_as_it_can() {
    let freed = run(RadixMap::with_eager_reclaim);
    assert!(freed > 0, "nodes were freed while the workers ran");
}
