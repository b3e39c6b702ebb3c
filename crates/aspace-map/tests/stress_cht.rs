//! Stress of `Cht` with invariant checks: 4 threads insert, insert_unique, remove and look up
//! random keys of their own (each keeps an exact model of its keys and checks every lookup
//! against it) and of a shared range (equal keys, racing removes), while a fifth thread grows
//! and shrinks the table back and forth and automatic resizes start from the load. Small
//! tables (2 to 64 buckets) so that resizes, splits and joins are frequent.
//!
//! Checked: every lookup of an own key agrees with the model (a key present since before the
//! lookup began is found, a removed one is not); a value read under a guard is intact (its
//! canary) for the whole read section; at the end the table's invariants hold, and after
//! `purge()` and `domain().barrier()` every value ever made was dropped exactly once except
//! those still in the table (allocation and free counts agree: no leak, no early or double
//! free). Bounded: a fixed number of rounds (about a second on an idle machine).

#![cfg(not(loom))]

use aspace_map::{Cht, ChtConfig};
use aspace_rcu::Domain;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::hash_map::RandomState;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

const ALIVE: u64 = 0xA11C_E000_A11C_E000;
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;
const THREADS: u64 = 4;
const ROUNDS: usize = 40_000;
const OWN_KEYS: u64 = 256;
const SHARED_KEYS: u64 = 16;

#[derive(Default)]
struct Counts {
    made: AtomicUsize,
    dropped: AtomicUsize,
}

struct Val {
    key: u64,
    canary: AtomicU64,
    counts: Arc<Counts>,
}

impl Val {
    fn new(key: u64, counts: &Arc<Counts>) -> Val {
        counts.made.fetch_add(1, Relaxed);
        Val {
            key,
            canary: AtomicU64::new(ALIVE),
            counts: counts.clone(),
        }
    }
}

impl Drop for Val {
    fn drop(&mut self) {
        assert_eq!(
            self.canary.swap(DEAD, Relaxed),
            ALIVE,
            "a value dropped twice"
        );
        self.counts.dropped.fetch_add(1, Relaxed);
    }
}

#[test]
fn random_updates_lookups_and_resizes_keep_every_invariant() {
    let counts = Arc::new(Counts::default());
    let cfg = ChtConfig {
        initial_order: 1,
        min_order: 1,
        max_order: 6,
        max_load: 2,
        auto_resize: true,
    };
    let t: Arc<Cht<u64, Val>> = Arc::new(Cht::with_config(Domain::new(), cfg, RandomState::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let resizer = {
        let (t, stop) = (t.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut grow = true;
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                let ok = if grow { t.grow() } else { t.shrink() };
                if !ok {
                    grow = !grow;
                }
                n += 1;
            }
            n
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let (t, counts) = (t.clone(), counts.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(w + 7);
                let r = t.domain().register();
                let base = (w + 1) << 32;
                let mut model = vec![0usize; OWN_KEYS as usize];
                for _ in 0..ROUNDS {
                    let i = rng.gen_range(0..OWN_KEYS);
                    let k = base | i;
                    match rng.gen_range(0..10) {
                        0..=1 => {
                            t.insert(k, Val::new(k, &counts));
                            model[i as usize] += 1;
                        }
                        2 => {
                            let ok = t.insert_unique(k, Val::new(k, &counts)).is_ok();
                            assert_eq!(ok, model[i as usize] == 0, "insert_unique of {k:#x}");
                            model[i as usize] += usize::from(ok);
                        }
                        3..=4 => {
                            let removed = t.remove(&k);
                            assert_eq!(removed, model[i as usize] > 0, "remove of {k:#x}");
                            model[i as usize] -= usize::from(removed);
                        }
                        5 => {
                            let s = rng.gen_range(0..SHARED_KEYS);
                            if rng.gen_bool(0.5) {
                                t.insert(s, Val::new(s, &counts));
                            } else {
                                t.remove(&s);
                            }
                        }
                        _ => {
                            let g = r.read();
                            let got = t.get(&k, &g);
                            assert_eq!(got.is_some(), model[i as usize] > 0, "get of {k:#x}");
                            let mut n = 0;
                            t.for_each_equal(&k, &g, |_, v| {
                                assert_eq!(v.key, k);
                                n += 1;
                            });
                            assert_eq!(n, model[i as usize], "equal items of {k:#x}");
                            if let Some(v) = got {
                                std::hint::spin_loop();
                                assert_eq!(v.canary.load(Relaxed), ALIVE, "freed under a guard");
                            }
                        }
                    }
                }
                model.iter().sum::<usize>()
            })
        })
        .collect();
    let own: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, Relaxed);
    let resizes = resizer.join().unwrap();
    assert!(resizes > 0);
    t.check_invariants();
    let r = t.domain().register();
    let shared: usize = {
        let g = r.read();
        (0..SHARED_KEYS)
            .map(|s| {
                let mut n = 0;
                t.for_each_equal(&s, &g, |_, _| n += 1);
                n
            })
            .sum()
    };
    drop(r);
    assert_eq!(t.len(), own + shared);
    t.purge();
    t.domain().barrier();
    let made = counts.made.load(Relaxed);
    let dropped = counts.dropped.load(Relaxed);
    assert_eq!(
        made - dropped,
        own + shared,
        "removed values not all freed (or freed early)"
    );
    let d = t.domain().clone();
    drop(t);
    d.barrier();
    assert_eq!(counts.dropped.load(Relaxed), made, "values leaked at drop");
}
