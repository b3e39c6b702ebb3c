//! Linearizability of `SkipListMap`: many short concurrent histories (3 threads x 4 random
//! operations over 8 pages: map, unmap, alloc, query), each checked against the sequential model
//! by the Wing-Gong checker in `linearizability/mod.rs`. Bounded by the number of runs.

#![cfg(not(loom))]

mod linearizability;

use aspace_map::{IntervalMap, SkipListMap, PAGE_SIZE as P};
use aspace_rcu::Domain;
use linearizability::{check, Event, Op};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

const THREADS: usize = 3;
const OPS: usize = 4;
const PAGES: u64 = 8;

fn run_once(seed: u64, domain: &Domain) -> Vec<Event> {
    let m = SkipListMap::new(domain.clone());
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
                                m.map(a * P..b * P, Some(v)).unwrap();
                                Op::Map {
                                    s: a,
                                    e: b,
                                    v: Some(v),
                                }
                            }
                            1 => {
                                m.map(a * P..b * P, None).unwrap();
                                Op::Map {
                                    s: a,
                                    e: b,
                                    v: None,
                                }
                            }
                            2 => {
                                let len = rng.gen_range(1..3);
                                let got = m
                                    .alloc(0..PAGES * P, len * P, v)
                                    .ok()
                                    .map(|iv| iv.start / P);
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
                                    .query(a * P, &g)
                                    .map(|(iv, v)| (iv.start / P, iv.end / P, *v));
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

#[test]
fn concurrent_histories_are_linearizable() {
    let domain = Domain::new();
    let runs = if cfg!(debug_assertions) { 100 } else { 400 };
    for seed in 0..runs {
        let h = run_once(seed, &domain);
        assert!(
            check(&h),
            "history of seed {seed} is not linearizable: {h:#?}"
        );
    }
}
