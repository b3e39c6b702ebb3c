//! loom models of both grace-period protocols (run with `RUSTFLAGS="--cfg loom"`).
//!
//! Each model has a writer that replaces the "current object" index, calls `synchronize()` and
//! then poisons the old object, and readers that, inside a read section, load the current index
//! and assert that the object it names is not poisoned. The real protocol code runs against loom
//! atomics through the crate's `sync` shim. For `memb`, readers' compiler fences at L and U are
//! SeqCst fences and `membarrier()` is a writer fence: the membarrier stand-in, documented in
//! `src/membarrier.rs`. The reclaimer thread is not modelled (under loom it runs inline).
//!
//! Keep models small: CI runs them with `LOOM_MAX_PREEMPTIONS=2`.
#![cfg(loom)]

use aspace_rcu::{Domain, DomainConfig, Memb, Qsbr};
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

const ALIVE: usize = 1;
const POISONED: usize = 2;

/// `current[k]` names the live object of pointer k; `objects[k][i]` is object i's state.
struct World {
    current: [AtomicUsize; 2],
    objects: [[AtomicUsize; 3]; 2],
}

impl World {
    fn new() -> Arc<Self> {
        let objs = || {
            [
                AtomicUsize::new(ALIVE),
                AtomicUsize::new(ALIVE),
                AtomicUsize::new(ALIVE),
            ]
        };
        Arc::new(Self {
            current: [AtomicUsize::new(0), AtomicUsize::new(0)],
            objects: [objs(), objs()],
        })
    }

    /// Reader side: must run inside a read section.
    fn check(&self, k: usize) {
        // Acquire: pairs with the Release store in replace().
        let i = self.current[k].load(Acquire);
        assert_eq!(
            self.objects[k][i].load(Relaxed),
            ALIVE,
            "a reader saw a reclaimed object"
        );
    }

    /// Writer side: publish object `next` of pointer k, wait a grace period, poison the old one.
    fn replace(&self, k: usize, next: usize, sync: impl FnOnce()) {
        let old = self.current[k].load(Relaxed);
        // Release: publishes the replacement; pairs with the Acquire load in check().
        self.current[k].store(next, Release);
        sync();
        // Relaxed: ordering against readers is the grace period's job (that is what is checked).
        self.objects[k][old].store(POISONED, Relaxed);
    }
}

#[test]
fn loom_memb_reader_never_sees_reclaimed_object() {
    loom::model(|| {
        let domain: Domain<Memb> = Domain::new();
        let world = World::new();
        let reader = domain.register();
        let w = world.clone();
        let t = thread::spawn(move || {
            let _g = reader.read();
            w.check(0);
        });
        world.replace(0, 1, || domain.synchronize());
        t.join().unwrap();
    });
}

#[test]
fn loom_memb_nested_and_consecutive_sections_across_two_grace_periods() {
    // Two updates (two group flips, so the second grace period starts by waiting for readers
    // delayed into the next group) against a reader with a nested then a second section.
    loom::model(|| {
        let domain: Domain<Memb> = Domain::new();
        let world = World::new();
        let reader = domain.register();
        let w = world.clone();
        let t = thread::spawn(move || {
            {
                let _outer = reader.read();
                let _inner = reader.read();
                w.check(0);
            }
            let _g = reader.read();
            w.check(0);
        });
        world.replace(0, 1, || domain.synchronize());
        world.replace(0, 2, || domain.synchronize());
        t.join().unwrap();
    });
}

/// A reader whose outermost guard drops before the nested one: the section lasts until the
/// last guard drops (the nested-path code, `lock_slow`/`unlock_slow`), in either barrier mode
/// (fallback mode runs every outermost lock and unlock through those paths too).
fn memb_guards_dropped_out_of_order(config: DomainConfig) {
    loom::model(move || {
        let domain: Domain<Memb> = Domain::with_config(config.clone());
        let world = World::new();
        let reader = domain.register();
        let w = world.clone();
        let t = thread::spawn(move || {
            let outer = reader.read();
            let inner = reader.read();
            drop(outer);
            w.check(0);
            drop(inner);
        });
        world.replace(0, 1, || domain.synchronize());
        t.join().unwrap();
    });
}

#[test]
fn loom_memb_guards_dropped_out_of_order_protect_until_the_last() {
    memb_guards_dropped_out_of_order(DomainConfig::default());
}

#[test]
fn loom_memb_fallback_guards_dropped_out_of_order_protect_until_the_last() {
    memb_guards_dropped_out_of_order(DomainConfig {
        force_fence_fallback: true,
        ..DomainConfig::default()
    });
}

#[test]
fn loom_memb_concurrent_synchronizers_with_early_exit_protect_both_updates() {
    // Two writers update different pointers; one of them may exit early, sharing the other's
    // grace period (thesis barrier E). The reader checks both pointers in one section.
    loom::model(|| {
        let domain: Domain<Memb> = Domain::new();
        let world = World::new();
        let reader = domain.register();
        let (w1, w2) = (world.clone(), world.clone());
        let d2 = domain.clone();
        let r = thread::spawn(move || {
            let _g = reader.read();
            w1.check(0);
            w1.check(1);
        });
        let u = thread::spawn(move || w2.replace(1, 1, || d2.synchronize()));
        world.replace(0, 1, || domain.synchronize());
        r.join().unwrap();
        u.join().unwrap();
    });
}

#[test]
fn loom_qsbr_reader_never_sees_reclaimed_object_across_quiescent_states() {
    loom::model(|| {
        let domain: Domain<Qsbr> = Domain::new();
        let world = World::new();
        let mut reader = domain.register();
        let w = world.clone();
        let t = thread::spawn(move || {
            {
                let _g = reader.read();
                w.check(0);
            }
            reader.quiescent_state();
            let _g = reader.read();
            w.check(0);
            drop(_g);
            reader.offline();
        });
        world.replace(0, 1, || domain.synchronize());
        t.join().unwrap();
    });
}

#[test]
fn loom_qsbr_reader_coming_online_sees_replacement_or_is_waited_for() {
    loom::model(|| {
        let domain: Domain<Qsbr> = Domain::new();
        let world = World::new();
        let mut reader = domain.register();
        reader.offline();
        let w = world.clone();
        let t = thread::spawn(move || {
            reader.online();
            let _g = reader.read();
            w.check(0);
            drop(_g);
            reader.offline();
        });
        world.replace(0, 1, || domain.synchronize());
        t.join().unwrap();
    });
}

#[test]
fn loom_qsbr_quiescent_state_of_an_offline_reader_comes_online_with_the_fence() {
    // Regression: quiescent_state() on an offline reader used to store the counter without
    // online()'s SeqCst fence (store buffering: the writer could read the slot as 0 while the
    // reader's section read the old object), in release builds.
    loom::model(|| {
        let domain: Domain<Qsbr> = Domain::new();
        let world = World::new();
        let mut reader = domain.register();
        reader.offline();
        let w = world.clone();
        let t = thread::spawn(move || {
            reader.quiescent_state();
            assert!(reader.is_online());
            let _g = reader.read();
            w.check(0);
            drop(_g);
            reader.offline();
        });
        world.replace(0, 1, || domain.synchronize());
        t.join().unwrap();
    });
}

#[test]
fn loom_qsbr_concurrent_synchronizers_sharing_a_grace_period_protect_both_updates() {
    loom::model(|| {
        let domain: Domain<Qsbr> = Domain::new();
        let world = World::new();
        let mut reader = domain.register();
        let (w1, w2) = (world.clone(), world.clone());
        let d2 = domain.clone();
        let r = thread::spawn(move || {
            let _g = reader.read();
            w1.check(0);
            w1.check(1);
            drop(_g);
            reader.quiescent_state();
            reader.offline();
        });
        let u = thread::spawn(move || w2.replace(1, 1, || d2.synchronize()));
        world.replace(0, 1, || domain.synchronize());
        r.join().unwrap();
        u.join().unwrap();
    });
}

#[test]
fn loom_deferred_callback_runs_after_readers_of_the_old_object() {
    // The deferred path (barrier() runs the queue inline under loom): poison via call().
    loom::model(|| {
        let domain: Domain<Memb> = Domain::new();
        let world = World::new();
        let reader = domain.register();
        let w = world.clone();
        let t = thread::spawn(move || {
            let _g = reader.read();
            w.check(0);
        });
        // Release: publishes the replacement; pairs with the Acquire load in check().
        world.current[0].store(1, Release);
        let w3 = world.clone();
        domain.call(move || w3.objects[0][0].store(POISONED, Relaxed));
        domain.barrier();
        assert_eq!(domain.pending(), 0);
        t.join().unwrap();
    });
}
