//! Regression tests from the adversarial review of Refcache (branch `review-refcache`): each
//! reproduced a finding before its fix (F1: a slot whose cores all dropped stayed active and
//! stalled epochs; F2: a panicking `T::drop` leaked the rest of a teardown batch or the domain;
//! F6: frees through a pointer with read-only provenance, UB under Miri:
//! `cargo +nightly miri test -p aspace-sync --test refcache_regressions f6` on a non-Linux
//! target), plus the sound cases and a coverage test the review added.
#![cfg(not(loom))]

use aspace_sync::{Ref, Refcache, RefcacheConfig};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

struct Probe(Arc<AtomicUsize>);

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// Epochs as fast as the cores maintain, but helpers never help (so only flushes of the slot's
/// own cores, or its absence, end an epoch).
fn no_help(cores: usize) -> Refcache {
    Refcache::with_config(
        cores,
        RefcacheConfig {
            help_after: Duration::from_secs(3600),
            ..RefcacheConfig::eager(4)
        },
    )
}

/// Control for F1: one core on slot 1 attaches and detaches; slot 1 is then not waited for and
/// core 0 alone drives epochs and frees.
#[test]
fn f1_control_a_single_detached_core_is_not_waited_for() {
    let rc = no_help(2);
    let c0 = rc.core(0);
    drop(rc.core(1));
    let d = Arc::new(AtomicUsize::new(0));
    let r = c0.alloc(Probe(d.clone()));
    c0.put(r).unwrap();
    let e0 = rc.epoch();
    for _ in 0..10 {
        c0.flush();
    }
    assert!(rc.epoch() >= e0 + 5);
    assert_eq!(d.load(SeqCst), 1);
}

/// F1 (medium: liveness, leak): `Inner::detach` decrements a slot's `active` count only when it
/// is 1, so when two `Core`s of one slot both drop, the count stays at 2 forever: the slot, with
/// no core left, is waited for by every epoch (module doc: "a slot with no Core handle is not
/// active and is not waited for"), its queue is never handed to the orphans, and only helpers
/// (after `help_after`) can end epochs. With a long `help_after` the epoch never advances and
/// nothing is freed. `tests/refcache_stress.rs` re-attaches with `core = rc.core(t)` (new handle
/// first), so its slots never really detach either.
#[test]
fn f1_two_cores_of_one_slot_dropped_leave_the_slot_active_forever() {
    let rc = no_help(2);
    let c0 = rc.core(0);
    let (a, b) = (rc.core(1), rc.core(1));
    drop(a);
    drop(b);
    let d = Arc::new(AtomicUsize::new(0));
    let r = c0.alloc(Probe(d.clone()));
    c0.put(r).unwrap();
    let e0 = rc.epoch();
    for _ in 0..10 {
        c0.flush();
    }
    assert!(
        rc.epoch() >= e0 + 5,
        "epoch stalled at {} (started {e0}): slot 1 has no core but is still waited for",
        rc.epoch()
    );
    assert_eq!(d.load(SeqCst), 1, "the zero object was never freed");
}

/// F1, variant: a `Core` replaced by `core = rc.core(i)` (new handle before the old drops), as
/// `refcache_stress.rs` does.
#[test]
fn f1_replacing_a_core_in_place_leaves_its_slot_active_forever() {
    let rc = no_help(2);
    let c0 = rc.core(0);
    let mut c1 = rc.core(1);
    // The old handle drops after the new one attached (as `core = rc.core(t)`).
    drop(std::mem::replace(&mut c1, rc.core(1)));
    drop(c1);
    let d = Arc::new(AtomicUsize::new(0));
    let r = c0.alloc(Probe(d.clone()));
    c0.put(r).unwrap();
    for _ in 0..10 {
        c0.flush();
    }
    assert_eq!(d.load(SeqCst), 1, "the zero object was never freed");
}

/// A value whose drop panics (the first time a flag says so).
struct Bomb(Arc<AtomicUsize>, bool);

impl Drop for Bomb {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
        if self.1 {
            panic!("Bomb::drop");
        }
    }
}

/// F2 (low: leak after a panic): the module doc says that after a value's `Drop` panics "the
/// other frees of that batch still run"; that holds for `Frees` but not for the teardown, which
/// frees its queued zeroes in a plain loop: a panicking `Drop` there abandons every later queued
/// object (never dropped, its `queued` flag left set) and the domain itself (its teardown hold is
/// never released).
#[test]
fn f2_a_panicking_drop_in_the_teardown_abandons_the_other_queued_zeroes() {
    let rc = Refcache::with_config(
        1,
        RefcacheConfig {
            maintain_every: u32::MAX,
            ..RefcacheConfig::eager(4)
        },
    );
    let core = rc.core(0);
    let d = Arc::new(AtomicUsize::new(0));
    let bomb = core.alloc(Bomb(d.clone(), true));
    let quiet: Vec<Ref<Bomb>> = (0..4).map(|_| core.alloc(Bomb(d.clone(), false))).collect();
    core.put(bomb).unwrap();
    core.flush(); // the bomb first on the queue (not due yet)
    for r in quiet {
        core.put(r).unwrap();
    }
    drop(core); // flushed: five queued zeroes, handed to the orphan queue
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rc)));
    assert!(
        res.is_err(),
        "the bomb's panic propagates out of the teardown"
    );
    assert_eq!(
        d.load(SeqCst),
        5,
        "every queued zero dropped despite one panic"
    );
}

/// F2, variant: a panic in `T::drop` during a `Core`'s drop (a detach that is not the slot's
/// last reviews and frees) skips `release_handle`: the domain's handle count never reaches zero,
/// so the teardown never runs and every object still queued is leaked with the domain.
#[test]
fn f2_a_panicking_drop_in_core_drop_leaks_the_domain() {
    let rc = Refcache::with_config(
        1,
        RefcacheConfig {
            maintain_every: u32::MAX,
            ..RefcacheConfig::eager(4)
        },
    );
    let (c0, c1) = (rc.core(0), rc.core(0)); // epoch 1
    let d = Arc::new(AtomicUsize::new(0));
    let bomb = c0.alloc(Bomb(d.clone(), true));
    c0.put(bomb).unwrap();
    c0.flush(); // queued with tag 1; epoch 2
    assert_eq!(d.load(SeqCst), 0);
    let later = c0.alloc(Bomb(d.clone(), false));
    // c1's detach flushes, counts the flush (epoch 3) and reviews: the bomb is due and its drop
    // panics inside `Core::drop`.
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(c1)));
    assert!(res.is_err());
    assert_eq!(d.load(SeqCst), 1);
    c0.put(later).unwrap(); // cached on slot 0: queued (not due) when c0 detaches
    drop(c0);
    drop(rc); // every handle is gone: the teardown must free `later`
    assert_eq!(
        d.load(SeqCst),
        2,
        "the queued zero is freed once every handle is gone"
    );
}

// ---------------------------------------------------------------------------------------------
// Checked and found sound (passing; also run under Miri: see the report).
// ---------------------------------------------------------------------------------------------

/// A `Weak` outlives its object and its whole domain; a `Ref` outlives every handle and core
/// (teardown), its value dropped exactly once at its last drop; a second `downgrade` while the
/// first `Weak` lives is refused.
#[test]
fn sound_weak_and_ref_outlive_the_domain() {
    let rc = Refcache::with_config(2, RefcacheConfig::eager(1));
    let core = rc.core(0);
    let d = Arc::new(AtomicUsize::new(0));
    let r = core.alloc(Probe(d.clone()));
    let w = Ref::downgrade(&r).unwrap();
    assert!(Ref::downgrade(&r).is_none());
    let r2 = core.get(&r).unwrap();
    let r3 = r2.clone();
    core.put(r).unwrap();
    core.put(r2).unwrap();
    drop(core);
    drop(rc); // teardown: the object lives on (r3)
    assert_eq!(d.load(SeqCst), 0);
    assert!(!w.is_freed());
    let r4 = r3.clone();
    drop(r3);
    assert_eq!(d.load(SeqCst), 0);
    drop(r4); // the last reference: freed at once, and the domain with it
    assert_eq!(d.load(SeqCst), 1);
    assert!(w.is_freed());
    drop(w);
}

/// A `Ref` of one domain given to a core of another is refused (`get`, `put`, `tryget`), and a
/// refused `put` gives the reference back to its own domain; `into_raw` without `from_raw`
/// only leaks.
#[test]
fn sound_foreign_handles_and_into_raw() {
    let (a, b) = (
        Refcache::with_config(1, RefcacheConfig::eager(1)),
        Refcache::with_config(1, RefcacheConfig::eager(1)),
    );
    let (ca, cb) = (a.core(0), b.core(0));
    let d = Arc::new(AtomicUsize::new(0));
    let r = ca.alloc(Probe(d.clone()));
    let w = Ref::downgrade(&r).unwrap();
    assert!(cb.get(&r).is_err());
    assert!(cb.tryget(&w).is_err());
    let raw = Ref::into_raw(ca.get(&r).unwrap());
    assert!(cb.put(r).is_err());
    for _ in 0..10 {
        ca.synchronize();
        cb.synchronize();
    }
    assert_eq!(d.load(SeqCst), 0, "the raw count keeps it");
    // SAFETY: from the `into_raw` above, once.
    ca.put(unsafe { Ref::from_raw(raw) }).unwrap();
    for _ in 0..10 {
        ca.synchronize();
    }
    assert_eq!(d.load(SeqCst), 1);
    assert!(ca.tryget(&w).unwrap().is_none());
}

/// A `Core` moved to another thread with cached deltas, and revived through `tryget` there.
#[test]
fn sound_core_moved_between_threads_with_cached_deltas() {
    let rc = Refcache::with_config(2, RefcacheConfig::eager(1));
    let (c0, c1) = (rc.core(0), rc.core(1));
    let d = Arc::new(AtomicUsize::new(0));
    let r = c0.alloc(Probe(d.clone()));
    let w = Ref::downgrade(&r).unwrap();
    let held = c1.get(&r).unwrap(); // +1 cached on core 1
    c0.put(r).unwrap();
    let (c1, held, w) = std::thread::spawn(move || {
        for _ in 0..10 {
            c1.flush();
        }
        let again = c1.tryget(&w).unwrap().expect("held: not freed");
        c1.put(again).unwrap();
        (c1, held, w)
    })
    .join()
    .unwrap();
    for _ in 0..10 {
        c0.synchronize();
    }
    assert_eq!(d.load(SeqCst), 0);
    c1.put(held).unwrap();
    for _ in 0..10 {
        c0.synchronize();
    }
    assert_eq!(d.load(SeqCst), 1);
    assert!(c1.tryget(&w).unwrap().is_none());
}

/// Coverage (finding F4): a *re-queue* (dirty zero at review) must be tagged `local + 1` like a
/// first queueing (correctness argument, step 1). With `tag: st.local` in `review_item`'s
/// `Requeue`, every test of the crate (unit, the three loom models, the stress test) still
/// passes; this deterministic test frees the object while core 0 caches a reference. It needs a
/// review that runs before its slot counts a flush for the epoch: a maintenance check whose
/// flush is not due yet (`epoch_period` not elapsed), which the eager configuration of every
/// existing test never produces.
#[test]
fn coverage_a_requeue_is_tagged_local_plus_one() {
    let rc = Refcache::with_config(
        2,
        RefcacheConfig {
            cache_entries: 64,
            epoch_period: Duration::from_secs(3600), // only forced flushes (`flush`)
            maintain_every: 1,                       // every op reviews
            help_after: Duration::from_secs(3600),
        },
    );
    let (c0, c1) = (rc.core(0), rc.core(1)); // epoch 1, slot 0 lagging
    let d = Arc::new(AtomicUsize::new(0));
    let x = c0.alloc(Probe(d.clone()));
    let z = c1.alloc(0u8); // only to make core 1 run a maintenance check
    c0.flush(); // epoch 2
    let a = c0.get(&x).unwrap(); // core 0: +1
    c1.put(x).unwrap(); // core 1: -1
    c1.flush(); // global 0 while core 0 caches +1: queued on slot 1, tag 2
    c0.flush(); // global 1; epoch 3
    c1.flush();
    c0.flush(); // epoch 4
    c0.flush(); // slot 0 counted for 4
    let b = c0.get(&a).unwrap(); // core 0: +1, after its flush for epoch 4
    drop(a); // without a core: global 0 while queued (dirty)
    let z2 = c1.get(&z).unwrap(); // core 1's check: not flushing (not due), reviewing: re-queued
    assert_eq!(rc.epoch(), 4);
    c1.flush(); // slot 1 counted for 4: epoch 5
    if d.load(SeqCst) != 0 {
        // Freed under `b`: leak everything rather than touch freed memory while unwinding.
        std::mem::forget((b, z2, z, c0, c1, rc));
        panic!("freed while core 0 caches a reference (b)");
    }
    c0.put(b).unwrap();
    c1.put(z2).unwrap();
    c1.put(z).unwrap();
    for _ in 0..10 {
        c0.synchronize();
    }
    assert_eq!(d.load(SeqCst), 1);
}

/// F6 (medium: UB under Stacked Borrows, found by Miri): `Core::get` and `Core::put` store in
/// the cache `NonNull::from(r.header())`, a pointer derived from a *shared reference to the
/// header*: SharedReadOnly provenance covering only the header's bytes. That pointer travels
/// through the cache, the eviction and the review queue to `free_box`, whose `Box::from_raw`
/// retags it Unique over the whole `RcBox<T>`: UB. Passes natively; run under Miri:
/// `CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p aspace-sync --test refcache_review
/// f6 -- --ignored`. Fix: `r.obj()` (the box's own pointer), `docs/review/refcache-fix-F6-provenance.patch`.
#[test]
fn f6_a_put_object_freed_through_its_header_pointer() {
    let rc = Refcache::with_config(1, RefcacheConfig::eager(1));
    let core = rc.core(0);
    let d = Arc::new(AtomicUsize::new(0));
    let r = core.alloc(Probe(d.clone()));
    core.put(r).unwrap(); // the cached pointer comes from `&Header`
    for _ in 0..6 {
        core.synchronize();
    }
    assert_eq!(d.load(SeqCst), 1);
}
