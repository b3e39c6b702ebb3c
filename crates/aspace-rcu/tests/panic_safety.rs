//! Panic safety of the public API where the caller's code runs inside it: `call` closures,
//! the `Drop` of values handed to `defer_drop`/`defer_free`, and code that panics inside a read
//! section. After each panic: nothing queued with (or after) the panicking callback is freed
//! before a grace period (a canary read under a guard stays intact), every other callback still
//! runs, the domain is not wedged (`synchronize`, `barrier`, `pending` and shutdown work), and
//! a section left by unwinding no longer holds up grace periods.
#![cfg(not(loom))]

use aspace_rcu::{Domain, DomainConfig, Flavor, Memb, Qsbr, Reader};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ALIVE: u64 = 0xA11C_E000_A11C_E000;

/// A heap object whose drop overwrites its canary (a reader that sees it freed early fails).
struct Canary {
    word: AtomicU64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.word.store(0xDEAD, Ordering::Relaxed);
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

/// A value whose drop panics (after counting itself).
struct PanicsOnDrop(Arc<AtomicUsize>);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
        panic!("PanicsOnDrop (expected by the test)");
    }
}

/// Batches large enough that the panicking callbacks and the canary's free share one batch.
fn config() -> DomainConfig {
    DomainConfig {
        batch_size: 1 << 20,
        batch_delay: Duration::from_millis(2),
        ..DomainConfig::default()
    }
}

/// A reader holds a guard over a canary while the canary is unlinked and freed through the
/// domain among panicking callbacks; the canary must survive until the guard drops, the
/// panics are counted, and everything queued is run by `barrier()`.
/// `quiesce` lets the reader stop holding up grace periods once its guard is gone (qsbr:
/// offline; memb: nothing).
fn panicking_callbacks_free_nothing_early<F: Flavor>(quiesce: fn(&mut Reader<F>)) {
    let domain: Domain<F> = Domain::with_config(config());
    let drops = Arc::new(AtomicUsize::new(0));
    let panics_seen = Arc::new(AtomicUsize::new(0));
    let shared = AtomicPtr::new(Box::into_raw(Box::new(Canary {
        word: AtomicU64::new(ALIVE),
        drops: drops.clone(),
    })));
    let mut reader = domain.register();
    let guard = reader.read();
    // Acquire: the initial value (no writer yet); the reference is guard-protected.
    // SAFETY: the pointer is live until a grace period after it is swapped out below.
    let seen: &Canary = unsafe { &*shared.load(Ordering::Acquire) };

    // The writer's side, on another thread (a qsbr online reader must not wait for itself).
    std::thread::scope(|s| {
        s.spawn(|| {
            domain.call(|| panic!("call panic (expected by the test)"));
            let old = shared.swap(std::ptr::null_mut(), Ordering::AcqRel);
            domain.defer_drop(PanicsOnDrop(panics_seen.clone()));
            // SAFETY: `old` came from Box::into_raw and was unlinked just above, passed once.
            unsafe { domain.defer_free(old) };
            let boxed = Box::into_raw(Box::new(PanicsOnDrop(panics_seen.clone())));
            // SAFETY: a fresh box, never shared, passed once.
            unsafe { domain.defer_free(boxed) };
            domain.call(|| panic!("second call panic (expected by the test)"));
        });
    });
    // The reclaimer has had the batch for a while; the grace period cannot end under our guard.
    for _ in 0..20 {
        std::thread::yield_now();
        assert_eq!(
            seen.word.load(Ordering::Relaxed),
            ALIVE,
            "freed under a guard"
        );
    }
    assert_eq!(drops.load(Ordering::Relaxed), 0);
    drop(guard);
    quiesce(&mut reader);
    domain.barrier();
    assert_eq!(drops.load(Ordering::Relaxed), 1, "the canary is freed once");
    assert_eq!(
        panics_seen.load(Ordering::Relaxed),
        2,
        "both panicking drops ran"
    );
    assert_eq!(domain.stats().callback_panics, 4);
    assert_eq!(domain.pending(), 0);
    // Not wedged: more work, a grace period and a barrier still complete.
    let after = Arc::new(AtomicUsize::new(0));
    let a = after.clone();
    domain.call(move || {
        a.fetch_add(1, Ordering::Relaxed);
    });
    domain.synchronize();
    domain.barrier();
    assert_eq!(after.load(Ordering::Relaxed), 1);
}

#[test]
fn memb_panicking_callbacks_and_drops_free_nothing_early() {
    panicking_callbacks_free_nothing_early::<Memb>(|_| {});
}

#[test]
fn qsbr_panicking_callbacks_and_drops_free_nothing_early() {
    panicking_callbacks_free_nothing_early::<Qsbr>(Reader::offline);
}

#[test]
fn a_read_section_left_by_a_panic_ends() {
    let domain = Domain::<Memb>::new();
    let reader = domain.register();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _outer = reader.read();
        let _inner = reader.read();
        panic!("panic inside a read section (expected by the test)");
    }));
    assert!(r.is_err());
    // Both guards dropped while unwinding: a grace period does not wait for this thread.
    domain.synchronize();
    drop(reader);
    assert_eq!(domain.readers(), 0);
}

#[test]
fn a_domain_whose_callbacks_panicked_shuts_down_and_runs_the_rest() {
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let domain = Domain::<Memb>::with_config(config());
        let panics = Arc::new(AtomicUsize::new(0));
        domain.defer_drop(PanicsOnDrop(panics));
        domain.call(|| panic!("call panic at shutdown (expected by the test)"));
        let d = drops.clone();
        domain.call(move || {
            d.fetch_add(1, Ordering::Relaxed);
        });
    }
    assert_eq!(drops.load(Ordering::Relaxed), 1);
}
