//! loom models of Refcache paths that `loom_refcache.rs` does not reach (added by its adversarial
//! review, branch `review-refcache`): a reference dropped *without a core* (`Ref::drop`,
//! `update_direct`: the orphan queue and its epoch tag), and a core detaching with a cached delta
//! (`detach`: flush, orphan hand-off). Run with `RUSTFLAGS="--cfg loom"`, like the other loom
//! files.  Finding F3 (coverage): with the tag of `update_direct` lowered by one
//! (`inner.epoch.load(Relaxed).saturating_sub(1)`), every model of `loom_refcache.rs` and the unit
//! tests still pass, and `refcache_stress.rs` passes too; the first model here fails with loom's
//! "Causality violation" (the free races core 0's read).
#![cfg(loom)]

use aspace_sync::{Core, Refcache, RefcacheConfig};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::Duration;

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

    fn use_it(&self, who: &str) {
        // SAFETY: loom checks the access; a free racing it is the bug being looked for.
        self.cell.with(|p| unsafe { std::ptr::read(p) });
        assert!(
            !self.freed.load(Acquire),
            "{who}: object freed while referenced"
        );
    }

    fn drops(&self) -> usize {
        self.drops.load(Acquire)
    }
}

struct Held(Arc<Probe>);

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: as in `use_it`.
        self.0.cell.with_mut(|p| unsafe { *p += 1 });
        self.0.freed.store(true, Release);
        self.0.drops.fetch_add(1, Release);
    }
}

fn domain() -> (Refcache, Core, Core) {
    let rc = Refcache::with_config(
        2,
        RefcacheConfig {
            maintain_every: u32::MAX,
            help_after: Duration::from_secs(1),
            ..RefcacheConfig::eager(1)
        },
    );
    let (c0, c1) = (rc.core(0), rc.core(1));
    assert_eq!(rc.epoch(), 1);
    (rc, c0, c1)
}

fn drain(core: &Core, probe: &Probe) {
    for _ in 0..8 {
        if probe.drops() > 0 {
            break;
        }
        core.flush();
    }
    assert_eq!(probe.drops(), 1, "freed exactly once once unreferenced");
}

/// The first model of `loom_refcache.rs` with core 1's `put` replaced by a drop without a core:
/// the global count reaches zero on the orphan queue (tag: the epoch under the epoch lock) while
/// core 0 still caches +1. The orphan is adopted by core 1's flush; it must not be freed before
/// core 0's next flush.
#[test]
fn loom_review_refcache_drop_without_a_core_while_cached_elsewhere() {
    loom::model(|| {
        let (_rc, c0, c1) = domain();
        let probe = Probe::new();
        let x = c0.alloc(Held(probe.clone()));
        c0.flush(); // epoch 2
        c0.flush(); // slot 0 counted for 2
        let y = c0.get(&x).unwrap(); // cached on core 0
        let p1 = probe.clone();
        let t = thread::spawn(move || {
            p1.use_it("thread 1 before its drop");
            drop(x); // global 0: orphan queue, tag 2
            c1.flush(); // adopts it; slot 1 counted: epoch 3
            c1.flush(); // reviews (due at epoch 4)
            c1
        });
        probe.use_it("core 0 holding");
        c0.flush();
        probe.use_it("core 0 holding after its flush");
        let c1 = t.join().unwrap();
        probe.use_it("core 0 holding after thread 1");
        c0.put(y).unwrap();
        drop(c1);
        drain(&c0, &probe);
    });
}

/// A core detaches right after giving back a reference (its cache holds the -1) while core 0
/// still caches +1: the detach must flush, hand its queue to the orphans and leave without
/// freeing under core 0.
#[test]
fn loom_review_refcache_detach_with_a_cached_delta() {
    loom::model(|| {
        let (_rc, c0, c1) = domain();
        let probe = Probe::new();
        let x = c0.alloc(Held(probe.clone()));
        c0.flush(); // epoch 2
        c0.flush(); // slot 0 counted for 2
        let y = c0.get(&x).unwrap(); // cached on core 0
        let p1 = probe.clone();
        let t = thread::spawn(move || {
            p1.use_it("core 1 before its put");
            c1.put(x).unwrap(); // cached -1 on core 1
            drop(c1); // flush: global 0, queued; to the orphans; slot 1 leaves
        });
        probe.use_it("core 0 holding");
        c0.flush();
        probe.use_it("core 0 holding after its flush");
        c0.flush();
        probe.use_it("core 0 holding after two flushes");
        t.join().unwrap();
        probe.use_it("core 0 holding after core 1 left");
        c0.put(y).unwrap();
        drain(&c0, &probe);
    });
}

/// Step 4 of the correctness argument (a `tryget` that reads the weak word *before* the zero is
/// queued, so it sees no dying bit): the read and the increment must be one critical section of
/// the core's slot. `loom_refcache_tryget_races_the_free` queues the object before its `tryget`
/// starts, so its `tryget` always sees the dying bit and never exercises this case (finding F4:
/// with the read and the increment split into two `op`s, that model and this file's other
/// models pass; this one fails).
#[test]
fn loom_review_refcache_tryget_races_the_queueing() {
    loom::model(|| {
        let rc = Refcache::with_config(
            2,
            RefcacheConfig {
                maintain_every: u32::MAX,
                ..RefcacheConfig::eager(1)
            },
        );
        let (c0, c1) = (rc.core(0), rc.core(1));
        let probe = Probe::new();
        let x = c0.alloc(Held(probe.clone()));
        let w = aspace_sync::Ref::downgrade(&x).unwrap();
        c0.put(x).unwrap(); // cached -1 on core 0: true count zero, not queued yet
        let p1 = probe.clone();
        let t = thread::spawn(move || {
            match c1.tryget(&w).unwrap() {
                Some(r) => {
                    p1.use_it("revived by tryget");
                    c1.put(r).unwrap();
                }
                None => assert!(w.is_freed(), "tryget failed on an object not freed"),
            }
            (c1, w)
        });
        // Queue it (dying), then drive epochs, helping core 1, and review.
        for _ in 0..4 {
            c0.flush();
        }
        let (c1, w) = t.join().unwrap();
        drop(c1);
        drain(&c0, &probe);
        assert!(w.is_freed());
    });
}
