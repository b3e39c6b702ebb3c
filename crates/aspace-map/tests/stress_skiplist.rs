//! Multi-threaded stress test of `SkipListMap` with poison-on-free values, per-thread sequential
//! models and allocation accounting.
//!
//! Layout: `THREADS + 1` arenas. Arena `t` is *private* to thread `t`: only it maps, unmaps,
//! allocates (`alloc_in_arena`, `alloc`), locks and swaps there, so a `BTreeMap` model of that
//! arena predicts every answer exactly (first fit included) even though the nodes around it are
//! shared with the other threads (predecessor locks, helping, upper-level links). The last arena
//! and the region after the arenas form a *chaos zone* where every thread maps, unmaps, allocates
//! and swaps overlapping ranges across the last separator, so that separators are dropped and
//! re-created under contention. Queries and visits run everywhere.
//!
//! Values poison themselves on drop and carry the interval they were created for: every value a
//! query or visit returns must be intact (not yet dropped: RCU keeps it alive for the guard) and
//! its interval must contain the address and lie inside the value's original interval (remainders
//! of a split are clones). A live counter (creation and clone +1, drop -1) must equal `len()`
//! after the map's `barrier()`, and 0 after the map is dropped: every removed node is reclaimed once.
//!
//! Bounded by wall time (`DURATION`), so it stops by itself in debug and release alike. Set
//! `STRESS_SEED=<n>` to vary the operation mix between runs of a loop.

#![cfg(not(loom))]

mod stress_support;

use aspace_map::{
    ArenaLayout, Interval, IntervalLocking, IntervalMap, SkipListMap, PAGE_SIZE as P,
};
use aspace_rcu::Domain;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use stress_support::{seed, snapshot, AbortOnPanic, Model, Val};

const THREADS: usize = 4;
const ARENA_PAGES: u64 = 48;
const LAYOUT: ArenaLayout = ArenaLayout {
    count: THREADS + 1,
    size: ARENA_PAGES * P,
    base: 32 * P,
};
/// Chaos zone: the shared arena and `CHAOS_TAIL` pages after the last separator.
const CHAOS_TAIL: u64 = 48;
const DURATION: Duration = Duration::from_millis(1500);

fn worker(m: &SkipListMap<Val>, t: usize, live: &Arc<AtomicIsize>, deadline: Instant) -> u64 {
    let _abort = AbortOnPanic;
    let mut rng = SmallRng::seed_from_u64(seed(0x51ee_7000) + t as u64);
    let reader = m.domain().register();
    let arena = LAYOUT.arena(t);
    let (alo, ahi) = (arena.start / P, arena.end / P);
    let chaos = (
        LAYOUT.arena(THREADS).start / P,
        LAYOUT.end() / P + CHAOS_TAIL,
    );
    let all = (0, LAYOUT.end() / P + CHAOS_TAIL + 8);
    let mut model = Model::default();
    let mut next_id = (t as u64) << 40;
    let mut id = || {
        next_id += 1;
        next_id
    };
    let mut ops = 0u64;
    let range_in = |rng: &mut SmallRng, lo: u64, hi: u64| {
        let a = rng.gen_range(lo..hi);
        let b = rng.gen_range(a + 1..=hi.min(a + 12));
        (a, b)
    };
    while Instant::now() < deadline {
        for _ in 0..64 {
            ops += 1;
            match rng.gen_range(0..16) {
                // Private arena: map / unmap.
                0 | 1 => {
                    let (a, b) = range_in(&mut rng, alo, ahi);
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
                // Private arena: alloc_in_arena is exact first fit (or falls back outside).
                2 => {
                    let len = rng.gen_range(1..4);
                    let i = id();
                    let want = model.first_fit(alo, ahi, len);
                    let iv = m
                        .alloc_in_arena(t, len * P, Val::new(i, (0, u64::MAX), live))
                        .unwrap();
                    match want {
                        Some(at) => {
                            assert_eq!(iv.start, at * P, "alloc_in_arena is not first fit");
                            assert_eq!(iv.len(), len * P);
                            model.insert(at, at + len, i);
                        }
                        None => assert!(
                            iv.end <= LAYOUT.base || iv.start >= LAYOUT.end(),
                            "a full arena's alloc landed inside the arenas: {iv}"
                        ),
                    }
                }
                // Private arena: alloc in a sub-range is exact first fit too.
                3 => {
                    let (a, b) = range_in(&mut rng, alo, ahi);
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
                // Private arena: lock + swap (or release without swapping).
                4 => {
                    let (a, b) = range_in(&mut rng, alo, ahi);
                    let l = m.lock(a * P..b * P).unwrap();
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
                // Private arena: queries agree with the model exactly.
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
                // Chaos zone: overlapping map / unmap across the last separator.
                7 | 8 => {
                    let (a, b) = range_in(&mut rng, chaos.0, chaos.1);
                    let v = rng
                        .gen_bool(0.6)
                        .then(|| Val::new(id(), (a * P, b * P), live));
                    m.map(a * P..b * P, v).unwrap();
                }
                // Chaos zone: alloc (possibly across the separator, by lock + swap).
                9 => {
                    let (a, b) = range_in(&mut rng, chaos.0, chaos.1);
                    let len = rng.gen_range(1..4);
                    if let Ok(iv) =
                        m.alloc(a * P..b * P, len * P, Val::new(id(), (a * P, b * P), live))
                    {
                        assert!(a * P <= iv.start && iv.end <= b * P && iv.len() == len * P);
                    }
                }
                // Chaos zone: lock + swap.
                10 => {
                    let (a, b) = range_in(&mut rng, chaos.0, chaos.1);
                    let l = m.lock(a * P..b * P).unwrap();
                    let s = rng.gen_range(a..b);
                    let e = rng.gen_range(s + 1..=b);
                    let iv = Interval::new(s * P, e * P).unwrap();
                    m.swap(l, vec![(iv, Val::new(id(), (s * P, e * P), live))])
                        .unwrap();
                }
                // Shared alloc (fallback region) by alloc_in_arena of the shared arena.
                11 => {
                    let _ = m.alloc_in_arena(
                        THREADS,
                        rng.gen_range(1..3) * P,
                        Val::new(id(), (0, u64::MAX), live),
                    );
                }
                // Queries anywhere, holding one guard across them and re-checking at the end:
                // values stay intact for the guard even if their nodes are swapped out.
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
                14 => {
                    let (a, b) = range_in(&mut rng, all.0, all.1);
                    let _ = snapshot(m, a, b);
                }
                // Private arena: the map's contents equal the model's.
                _ => {
                    let got = snapshot(m, alo, ahi);
                    let want: Vec<_> = model.0.iter().map(|(&a, &(z, i))| (a, z, i)).collect();
                    assert_eq!(got, want, "arena {t} diverged from its model");
                }
            }
        }
    }
    // Final per-arena check against the model.
    let got = snapshot(m, alo, ahi);
    let want: Vec<_> = model.0.iter().map(|(&a, &(z, i))| (a, z, i)).collect();
    assert_eq!(got, want, "arena {t} diverged from its model");
    ops
}

#[test]
fn concurrent_mixed_operations_keep_values_intact_models_exact_and_reclaim_every_node() {
    let live = Arc::new(AtomicIsize::new(0));
    let domain = Domain::new();
    let m = SkipListMap::with_arenas(domain.clone(), LAYOUT);
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
    m.check_invariants();
    let whole = snapshot(&m, 0, aspace_map::KEY_SPACE_END / P);
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
    drop(m);
    domain.barrier();
    assert_eq!(
        live.load(Ordering::Relaxed),
        0,
        "every value dropped with the map"
    );
}
