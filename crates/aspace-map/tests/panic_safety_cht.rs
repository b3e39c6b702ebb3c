//! Panic safety of `Cht`: the caller's code that runs inside an operation (the key's `Hash`
//! and `Eq`, a key's or value's `Drop` when the table is dropped) panics, and afterwards
//! - nothing was freed early: a value a reader holds under its guard is intact (its canary);
//! - no lock is held: later operations complete (the reader-pool slot is released);
//! - the table passes its invariant check and an operation that panicked changed nothing;
//! - nothing leaked and nothing was dropped twice (a live counter; a canary a second drop
//!   would trip).
#![cfg(not(loom))]

use aspace_map::{Cht, ChtConfig};
use aspace_rcu::Domain;
use std::collections::hash_map::RandomState;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

const ALIVE: u64 = 0x5AFE_5AFE_5AFE_5AFE;
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

#[derive(Default)]
struct Ctl {
    /// `n > 0`: the `n`-th `eq` from now panics.
    eq_panic_in: AtomicI64,
    /// `n > 0`: the `n`-th `hash` from now panics.
    hash_panic_in: AtomicI64,
    /// `n > 0`: the `n`-th value drop from now panics (after counting itself dead).
    drop_panic_in: AtomicI64,
    live: AtomicI64,
}

fn fire(c: &AtomicI64) -> bool {
    c.load(Relaxed) > 0 && c.fetch_sub(1, Relaxed) == 1
}

struct Key(u64, Arc<Ctl>);
impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        assert!(!fire(&self.1.hash_panic_in), "test: Hash panics");
        self.0.hash(h);
    }
}
impl PartialEq for Key {
    fn eq(&self, o: &Self) -> bool {
        assert!(!fire(&self.1.eq_panic_in), "test: Eq panics");
        self.0 == o.0
    }
}
impl Eq for Key {}

struct Val {
    canary: AtomicU64,
    ctl: Arc<Ctl>,
}
impl Val {
    fn new(ctl: &Arc<Ctl>) -> Self {
        ctl.live.fetch_add(1, Relaxed);
        Val {
            canary: AtomicU64::new(ALIVE),
            ctl: ctl.clone(),
        }
    }
}
impl Drop for Val {
    fn drop(&mut self) {
        assert_eq!(self.canary.swap(DEAD, Relaxed), ALIVE, "dropped twice");
        self.ctl.live.fetch_sub(1, Relaxed);
        assert!(!fire(&self.ctl.drop_panic_in), "test: Drop panics");
    }
}

fn table() -> Cht<Key, Val> {
    let cfg = ChtConfig {
        initial_order: 1,
        min_order: 0,
        max_order: 6,
        max_load: 4,
        auto_resize: false,
    };
    Cht::with_config(Domain::new(), cfg, RandomState::new())
}

#[test]
fn eq_and_hash_panics_change_nothing_and_hold_nothing() {
    let ctl = Arc::new(Ctl::default());
    let t = table();
    let r = t.domain().register();
    for k in 0..32 {
        t.insert(Key(k, ctl.clone()), Val::new(&ctl));
    }
    t.check_invariants();
    let g = r.read();
    let held = t.get(&Key(5, ctl.clone()), &g).unwrap();
    // Every operation that compares keys (each compares key 5 once: its first comparison
    // panics) and every operation that hashes.
    {
        let nth = 1;
        ctl.eq_panic_in.store(nth, Relaxed);
        let _ = catch_unwind(AssertUnwindSafe(|| t.remove(&Key(5, ctl.clone()))));
        ctl.eq_panic_in.store(nth, Relaxed);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            t.insert_unique(Key(5, ctl.clone()), Val::new(&ctl))
        }));
        ctl.eq_panic_in.store(nth, Relaxed);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            t.get(&Key(5, ctl.clone()), &g).is_some()
        }));
        ctl.hash_panic_in.store(nth, Relaxed);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            t.insert(Key(6, ctl.clone()), Val::new(&ctl))
        }));
    }
    ctl.eq_panic_in.store(0, Relaxed);
    ctl.hash_panic_in.store(0, Relaxed);
    assert_eq!(held.canary.load(Relaxed), ALIVE, "a held value was freed");
    drop(g);
    // Nothing changed (the panicking remove panicked before its mark: key 5 is still there),
    // no slot is held (these complete), and the unpublished nodes were dropped.
    assert_eq!(t.len(), 32);
    t.check_invariants();
    assert!(t.remove(&Key(5, ctl.clone())));
    assert!(t.insert_unique(Key(5, ctl.clone()), Val::new(&ctl)).is_ok());
    assert!(t.grow());
    t.check_invariants();
    let d = t.domain().clone();
    drop(t);
    d.barrier();
    assert_eq!(ctl.live.load(Relaxed), 0, "leaked or dropped twice");
}

#[test]
fn a_panicking_drop_in_the_tables_drop_still_frees_the_rest() {
    let ctl = Arc::new(Ctl::default());
    let t = table();
    for k in 0..16 {
        t.insert(Key(k, ctl.clone()), Val::new(&ctl));
    }
    ctl.drop_panic_in.store(3, Relaxed);
    let d = t.domain().clone();
    assert!(catch_unwind(AssertUnwindSafe(|| drop(t))).is_err());
    d.barrier();
    assert_eq!(
        ctl.live.load(Relaxed),
        0,
        "the nodes after the panicking one leaked"
    );
}
