//! Linearizability of `Cht`: many short concurrent histories (3 threads x 4 random operations
//! over 3 keys: insert (equal keys allowed), insert_unique, remove, get), while a fourth thread
//! grows and shrinks the table, each checked against a sequential model by a Wing-Gong search.
//!
//! The sequential model is a multimap whose equal keys keep insertion order: `insert` appends,
//! `remove` takes the oldest item with the key, `get` returns the oldest (the CHT links an item
//! after every item with an equal hash, so a bucket list holds equal keys in linearization
//! order, and `get`/`remove` take the first live one). Bounded by the number of runs.

#![cfg(not(loom))]

use aspace_map::{Cht, ChtConfig};
use aspace_rcu::Domain;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;

const THREADS: usize = 3;
const OPS: usize = 4;
const KEYS: u64 = 3;
const RUNS: u64 = 300;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Insert(u64, u64),
    InsertUnique(u64, u64, bool),
    Remove(u64, bool),
    Get(u64, Option<u64>),
}

#[derive(Clone, Debug)]
struct Event {
    invoke: u64,
    response: u64,
    op: Op,
}

type Model = HashMap<u64, VecDeque<u64>>;

/// Applies `op` to the model; false if the recorded result disagrees.
fn apply(m: &mut Model, op: &Op) -> bool {
    match *op {
        Op::Insert(k, v) => {
            m.entry(k).or_default().push_back(v);
            true
        }
        Op::InsertUnique(k, v, ok) => {
            let q = m.entry(k).or_default();
            if q.is_empty() {
                q.push_back(v);
                ok
            } else {
                !ok
            }
        }
        Op::Remove(k, removed) => m.entry(k).or_default().pop_front().is_some() == removed,
        Op::Get(k, got) => m.get(&k).and_then(|q| q.front().copied()) == got,
    }
}

/// Wing and Gong: is there an order of `rest` that respects real time and the model?
fn linearizable(m: &Model, rest: &[Event]) -> bool {
    if rest.is_empty() {
        return true;
    }
    let min_response = rest.iter().map(|e| e.response).min().unwrap();
    for (i, e) in rest.iter().enumerate() {
        if e.invoke > min_response {
            continue;
        }
        let mut m2 = m.clone();
        if apply(&mut m2, &e.op) {
            let mut r: Vec<Event> = rest.to_vec();
            r.remove(i);
            if linearizable(&m2, &r) {
                return true;
            }
        }
    }
    false
}

fn run_once(seed: u64) -> Vec<Event> {
    let cfg = ChtConfig {
        initial_order: 1,
        min_order: 0,
        max_order: 3,
        max_load: 4,
        auto_resize: false,
    };
    let t: Cht<u64, u64> = Cht::with_config(Domain::new(), cfg, RandomState::new());
    let clock = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS + 1);
    let done = AtomicBool::new(false);
    let mut history = Vec::new();
    std::thread::scope(|sc| {
        let resizer = sc.spawn(|| {
            barrier.wait();
            let mut i = seed;
            while !done.load(Ordering::Relaxed) {
                if i % 2 == 0 {
                    t.grow();
                } else {
                    t.shrink();
                }
                i += 1;
            }
        });
        let hs: Vec<_> = (0..THREADS)
            .map(|th| {
                let (t, clock, barrier) = (&t, &clock, &barrier);
                sc.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed * 31 + th as u64);
                    let reader = t.domain().register();
                    let mut out = Vec::new();
                    barrier.wait();
                    for i in 0..OPS {
                        let k = rng.gen_range(0..KEYS);
                        let v = (th * 100 + i) as u64;
                        // SeqCst: one total order of timestamps across threads (real time).
                        let invoke = clock.fetch_add(1, Ordering::SeqCst);
                        let op = match rng.gen_range(0..4) {
                            0 => {
                                t.insert(k, v);
                                Op::Insert(k, v)
                            }
                            1 => Op::InsertUnique(k, v, t.insert_unique(k, v).is_ok()),
                            2 => Op::Remove(k, t.remove(&k)),
                            _ => Op::Get(k, t.get(&k, &reader.read()).copied()),
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
        done.store(true, Ordering::Relaxed);
        resizer.join().unwrap();
    });
    t.check_invariants();
    history
}

#[test]
fn concurrent_histories_during_resizes_are_linearizable() {
    for seed in 0..RUNS {
        let h = run_once(seed);
        assert!(
            linearizable(&Model::new(), &h),
            "seed {seed}: history not linearizable: {h:#?}"
        );
    }
}

/// The checker itself rejects a history no order explains (a get that sees a value nobody
/// inserted before it returned, racing nothing).
#[test]
fn the_checker_rejects_a_stale_read() {
    let h = vec![
        Event {
            invoke: 0,
            response: 1,
            op: Op::Insert(1, 5),
        },
        Event {
            invoke: 2,
            response: 3,
            op: Op::Get(1, None),
        },
    ];
    assert!(!linearizable(&Model::new(), &h));
}
