//! Linearizability of `RadixMap`: many short concurrent histories (3 threads x 4 random
//! operations over 8 pages: map, unmap, alloc, query), each checked against the sequential model
//! by the Wing-Gong checker in `linearizability/mod.rs`. Bounded by the number of runs.
//!
//! The 8 pages sit in one leaf, so every history also races the lazy expansion of the folded
//! root-to-leaf path by the first operations (and, with `with_eager_reclaim`, the leaf's
//! removal by Refcache once emptied and its revival or re-creation by the next operation). A
//! second variant straddles a leaf boundary (pages 508..516), so that ranges lock slots of two
//! leaves and multi-slot maps publish through a descriptor spanning both.

#![cfg(not(loom))]

mod linearizability;

use aspace_map::{IntervalMap, RadixMap, PAGE_SIZE as P};
use aspace_rcu::Domain;
use linearizability::{check, Event, Op};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

const THREADS: usize = 3;
const OPS: usize = 4;
const PAGES: u64 = 8;

fn run_once(seed: u64, domain: &Domain, base: u64, eager: bool) -> Vec<Event> {
    let m = if eager {
        RadixMap::with_eager_reclaim(domain.clone())
    } else {
        RadixMap::new(domain.clone())
    };
    let clock = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS);
    let mut history = Vec::new();
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (m, clock, barrier) = (&m, &clock, &barrier);
                sc.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed * 31 + t as u64);
                    let reader = m.domain().register();
                    let mut out = Vec::new();
                    barrier.wait();
                    for i in 0..OPS {
                        let v = (t * 100 + i) as u64 + 1;
                        let a = rng.gen_range(0..PAGES);
                        let b = rng.gen_range(a + 1..=PAGES);
                        // SeqCst: one total order of timestamps across threads (real time).
                        let invoke = clock.fetch_add(1, Ordering::SeqCst);
                        let op = match rng.gen_range(0..4) {
                            0 => {
                                m.map((base + a) * P..(base + b) * P, Some(v)).unwrap();
                                Op::Map {
                                    s: a,
                                    e: b,
                                    v: Some(v),
                                }
                            }
                            1 => {
                                m.map((base + a) * P..(base + b) * P, None).unwrap();
                                Op::Map {
                                    s: a,
                                    e: b,
                                    v: None,
                                }
                            }
                            2 => {
                                let len = rng.gen_range(1..3);
                                let got = m
                                    .alloc(base * P..(base + PAGES) * P, len * P, v)
                                    .ok()
                                    .map(|iv| iv.start / P - base);
                                Op::Alloc {
                                    ws: 0,
                                    we: PAGES,
                                    len,
                                    v,
                                    got,
                                }
                            }
                            _ => {
                                let g = reader.read();
                                let got = m
                                    .query((base + a) * P, &g)
                                    .map(|(iv, v)| (iv.start / P - base, iv.end / P - base, *v));
                                Op::Query { page: a, got }
                            }
                        };
                        let response = clock.fetch_add(1, Ordering::SeqCst);
                        out.push(Event {
                            invoke,
                            response,
                            op,
                        });
                    }
                    out
                })
            })
            .collect();
        for h in hs {
            history.extend(h.join().unwrap());
        }
    });
    m.check_invariants();
    history
}

fn histories(base: u64, eager: bool) {
    let domain = Domain::new();
    let runs = if cfg!(debug_assertions) { 100 } else { 400 };
    for seed in 0..runs {
        let h = run_once(seed, &domain, base, eager);
        assert!(
            check(&h),
            "history of seed {seed} (base page {base}) is not linearizable: {h:#?}"
        );
    }
}

#[test]
fn concurrent_histories_are_linearizable() {
    histories(0, false);
}

#[test]
fn concurrent_histories_across_a_leaf_boundary_are_linearizable() {
    histories(508, false);
}

#[test]
fn concurrent_histories_with_eager_node_reclamation_are_linearizable() {
    histories(508, true);
}
