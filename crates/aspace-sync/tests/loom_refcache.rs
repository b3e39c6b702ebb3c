//! loom models of Refcache (run with `RUSTFLAGS="--cfg loom"`; every test is named `loom_*`).
//!
//! The real `Refcache` runs against loom atomics and cells through the crate's `sync` shim, with
//! the eager test configuration (one-entry caches, so every other object collides; epochs as
//! fast as the cores maintain; help at once). Each object's value is a [`Held`] that, when
//! dropped (freed), writes a loom `UnsafeCell` owned by a [`Probe`] outside the object and
//! raises the probe's `freed` flag. A thread holding a reference reads that cell and checks the
//! flag: a free that does not happen-after the read is a data race loom reports, and a free
//! that happened-before it shows as `freed`. The probe lives outside the object, so the check
//! never reads freed memory.
//!
//! - `loom_refcache_no_free_while_a_cached_reference_exists`: the global count reaches zero
//!   while a reference is still counted in the other core's cache (inc on core 0, dec on core 1,
//!   core 1 flushes first: paper Fig. 1 epoch 2). Both cores flush, help each other and review;
//!   the object must survive until core 0 gives its reference back, then be freed exactly once.
//! - `loom_refcache_dirty_zero_is_not_freed`: a zero, then a rise and a fall back to zero while
//!   queued (a dirty zero, Fig. 1 epoch 4-6), raced against reviews.
//! - `loom_refcache_tryget_races_the_free`: an object queued with its dying bit set; one core
//!   `tryget`s it while the other drives epochs and reviews. Either the `tryget` fails and the
//!   object is (or will be) freed, or it succeeds and the object survives while held; it is
//!   freed exactly once in the end.
//!
//! The models take about 0.1 s together at `LOOM_MAX_PREEMPTIONS=2`.
//!
//! Mutations these models were checked against (each applied to `refcache.rs` by a script, the
//! models run at `LOOM_MAX_PREEMPTIONS=2`, the file restored), with loom's report:
//! - review after one epoch (`e < tag + 1` in `review_locked`): the cached-reference model fails,
//!   "Causality violation: Concurrent read and write accesses to `UnsafeCell`" (the free races
//!   core 0's read);
//! - tag `local` instead of `local + 1` at queueing (`evict_locked`): the cached-reference model
//!   fails, same report;
//! - the dirty flag ignored at review: the dirty-zero model fails, same report;
//! - `tryget` not clearing the dying bit: the tryget model fails, "Causality violation:
//!   Concurrent read and write accesses";
//! - the free CAS not requiring the dying bit: the tryget model fails, same report as above;
//! - the free leaving the object's pointer in the weak word (`v | OBJ_GONE`): the tryget model
//!   fails, "revived by tryget: object freed while referenced";
//! - `flush` not evicting its entries: all three fail, "freed exactly once once unreferenced".
#![cfg(loom)]

use aspace_sync::{Core, Ref, Refcache, RefcacheConfig};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::Duration;

/// State outside the object: what a free writes, and how often it happened.
struct Probe {
    cell: UnsafeCell<u64>,
    freed: AtomicBool,
    drops: AtomicUsize,
}

// SAFETY: the cell is the model's race detector: loom checks every access to it.
unsafe impl Sync for Probe {}

impl Probe {
    fn new() -> Arc<Self> {
        Arc::new(Probe {
            cell: UnsafeCell::new(0),
            freed: AtomicBool::new(false),
            drops: AtomicUsize::new(0),
        })
    }

    /// What a holder of a reference does: read the cell, and find the object not freed.
    fn use_it(&self, who: &str) {
        // SAFETY: loom checks the access; a free racing it is the bug being looked for.
        self.cell.with(|p| unsafe { std::ptr::read(p) });
        // Acquire: pairs with the Release store of the free.
        assert!(
            !self.freed.load(Acquire),
            "{who}: object freed while referenced"
        );
    }

    fn drops(&self) -> usize {
        self.drops.load(Acquire)
    }
}

/// The object's value: its drop is the free.
struct Held(Arc<Probe>);

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: as in `use_it`.
        self.0.cell.with_mut(|p| unsafe { *p += 1 });
        self.0.freed.store(true, Release);
        self.0.drops.fetch_add(1, Release);
    }
}

/// Two cores, one-entry caches, epochs as fast as the cores flush, and no maintenance inside
/// `get`/`put` (the models flush explicitly, to stay small); `help`: a core that has flushed for
/// the epoch flushes the other on its behalf (else each core flushes only itself, which lets a
/// model put one core an epoch ahead of the other).
///
/// After the two attaches the epoch is 1, with slot 0 lagging (slot 1 counted as flushed when
/// it attached).
fn domain(help: bool) -> (Refcache, Core, Core) {
    let rc = Refcache::with_config(
        2,
        RefcacheConfig {
            maintain_every: u32::MAX,
            // Under loom the clock reads 0: a non-zero delay never elapses.
            help_after: if help {
                Duration::ZERO
            } else {
                Duration::from_secs(1)
            },
            ..RefcacheConfig::eager(1)
        },
    );
    let (c0, c1) = (rc.core(0), rc.core(1));
    assert_eq!(rc.epoch(), 1);
    (rc, c0, c1)
}

/// Drives epochs from `core` (the only core left) until the object is freed.
fn drain(core: &Core, probe: &Probe) {
    for _ in 0..6 {
        if probe.drops() > 0 {
            break;
        }
        core.flush();
    }
    assert_eq!(probe.drops(), 1, "freed exactly once once unreferenced");
}

/// Guards the review's two-epoch wait (Fig. 2: `epoch < objepoch + 2: continue`).
///
/// Core 0 flushes for epoch 2 and only then takes a reference (cached: +1). Core 1 gives back
/// the original reference and flushes: the global count reaches zero (queued with tag 2) while
/// core 0's +1 is still cached, and core 1's flush ends epoch 2. Reviewing once epoch 3 begins
/// would free the object under core 0; the review must wait for epoch 4, which needs core 0's
/// next flush, which evicts the +1.
#[test]
fn loom_refcache_no_free_while_a_cached_reference_exists() {
    loom::model(|| {
        let (_rc, c0, c1) = domain(false);
        let probe = Probe::new();
        let x = c0.alloc(Held(probe.clone()));
        c0.flush(); // epoch 2, both slots lag
        c0.flush(); // slot 0 counted for 2
        let y = c0.get(&x).unwrap(); // cached on core 0: true count 2, global 1
        let p1 = probe.clone();
        let t = thread::spawn(move || {
            p1.use_it("core 1 before its put");
            c1.put(x).unwrap();
            c1.flush(); // global 0 (queued, tag 2); slot 1 counted: epoch 3
            c1.flush(); // reviews (due at epoch 4)
            c1
        });
        probe.use_it("core 0 holding");
        c0.flush();
        probe.use_it("core 0 holding after its flush");
        let c1 = t.join().unwrap();
        probe.use_it("core 0 holding after core 1's flushes");
        c0.put(y).unwrap();
        drop(c1);
        drain(&c0, &probe);
    });
}

/// Guards the dirty-zero rule (Fig. 2: `else if obj.dirty ...: requeue`).
///
/// The global count reaches zero (queued, tag 2) while core 0 caches +1; core 0's flush raises
/// it to 1. In epoch 3 core 0 flushes first, then takes a second reference (cached) and hands
/// the first to core 1, which gives it back and flushes: zero again while queued (dirty), and
/// epoch 4 begins. The review is due; the count is zero but core 0 still caches +1: only the
/// dirty flag keeps the object from being freed.
#[test]
fn loom_refcache_dirty_zero_is_not_freed() {
    loom::model(|| {
        let (_rc, c0, c1) = domain(false);
        let probe = Probe::new();
        let x = c0.alloc(Held(probe.clone()));
        c0.flush(); // epoch 2, both slots lag
        let a = c0.get(&x).unwrap(); // core 0 caches +1
        c1.put(x).unwrap();
        c1.flush(); // global 0 while core 0 caches +1: queued with tag 2; slot 1 counted
        c0.flush(); // global 1; slot 0 counted: epoch 3
        c0.flush(); // slot 0 counted for 3
        let a2 = c0.get(&a).unwrap(); // cached on core 0
        let p1 = probe.clone();
        let t = thread::spawn(move || {
            p1.use_it("core 1 holding");
            c1.put(a).unwrap();
            c1.flush(); // global 0 again while queued: dirty; epoch 4; review due
            c1.flush();
            c1
        });
        probe.use_it("core 0 holding");
        c0.flush();
        probe.use_it("core 0 still holding");
        let c1 = t.join().unwrap();
        probe.use_it("core 0 holding after the join");
        c0.put(a2).unwrap();
        drop(c1);
        drain(&c0, &probe);
    });
}

/// Guards `tryget`'s clearing of the dying bit and the review's free CAS (Fig. 2's `tryget`
/// and `weakref.cmpxchng(<obj, true>, <null, false>)`), and the nulling of the weak word.
///
/// The object is queued (tag 1) and dying with a zero true count; core 0 drives two epochs and
/// reviews while core 1 `tryget`s it. Core 1 either fails (the object is freed: never revived
/// after its free) or holds it, and it must then survive the review (never freed once revived).
#[test]
fn loom_refcache_tryget_races_the_free() {
    loom::model(|| {
        let (_rc, c0, c1) = domain(true);
        let probe = Probe::new();
        let x = c0.alloc(Held(probe.clone()));
        let w = Ref::downgrade(&x).unwrap();
        c0.put(x).unwrap();
        c0.flush(); // global 0: queued with tag 1, dying; slot 0 counted: epoch 2
        let p1 = probe.clone();
        let t = thread::spawn(move || {
            match c1.tryget(&w).unwrap() {
                Some(r) => {
                    p1.use_it("revived by tryget");
                    p1.use_it("revived, still held");
                    c1.put(r).unwrap();
                }
                None => assert!(w.is_freed(), "tryget failed on an object not freed"),
            }
            (c1, w)
        });
        c0.flush(); // slot 0 counted for 2, helps slot 1: epoch 3
        c0.flush(); // review due
        let (c1, w) = t.join().unwrap();
        drop(c1);
        drain(&c0, &probe);
        assert!(w.is_freed());
        assert!(
            c0.tryget(&w).unwrap().is_none(),
            "a freed object is never revived"
        );
    });
}
