//! Deferred reclamation: every deferred object is dropped by `barrier()` and by the domain's
//! drop, batching, `pending()`, shutdown from a callback, panicking callbacks.
#![cfg(not(loom))]

use aspace_rcu::{Domain, DomainConfig, Flavor, Memb, Qsbr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

/// Counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A configuration whose reclaimer never runs on its own (only for barrier/drop).
fn lazy() -> DomainConfig {
    DomainConfig {
        batch_size: usize::MAX,
        batch_delay: Duration::from_secs(3600),
        ..DomainConfig::default()
    }
}

fn defer_all_kinds<F: Flavor>(domain: &Domain<F>, drops: &Arc<AtomicUsize>, n: usize) {
    for i in 0..n {
        match i % 3 {
            0 => domain.defer_drop(Counted(drops.clone())),
            1 => {
                let p = Box::into_raw(Box::new(Counted(drops.clone())));
                // SAFETY: `p` is a fresh Box pointer, never published, passed once.
                unsafe { domain.defer_free(p) };
            }
            _ => {
                let c = Counted(drops.clone());
                domain.call(move || drop(c));
            }
        }
    }
}

fn barrier_runs_every_deferred_callback<F: Flavor>() {
    let domain = Domain::<F>::with_config(DomainConfig {
        batch_size: 64,
        ..DomainConfig::default()
    });
    let drops = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (d, c) = (domain.clone(), drops.clone());
            thread::spawn(move || defer_all_kinds(&d, &c, 1000))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    domain.barrier();
    assert_eq!(drops.load(Ordering::SeqCst), 3000);
    assert_eq!(domain.pending(), 0);
    assert_eq!(domain.stats().callbacks_run, 3000);
}

#[test]
fn memb_barrier_runs_every_deferred_callback() {
    barrier_runs_every_deferred_callback::<Memb>();
}

#[test]
fn qsbr_barrier_runs_every_deferred_callback() {
    barrier_runs_every_deferred_callback::<Qsbr>();
}

fn domain_drop_runs_pending_callbacks<F: Flavor>() {
    let domain = Domain::<F>::with_config(lazy());
    let drops = Arc::new(AtomicUsize::new(0));
    defer_all_kinds(&domain, &drops, 300);
    assert_eq!(domain.pending(), 300);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(domain);
    assert_eq!(drops.load(Ordering::SeqCst), 300);
}

#[test]
fn memb_domain_drop_runs_pending_callbacks() {
    domain_drop_runs_pending_callbacks::<Memb>();
}

#[test]
fn qsbr_domain_drop_runs_pending_callbacks() {
    domain_drop_runs_pending_callbacks::<Qsbr>();
}

#[test]
fn pending_counts_queued_callbacks_until_barrier() {
    let domain = Domain::<Memb>::with_config(lazy());
    assert_eq!(domain.pending(), 0);
    for i in 1..=10 {
        domain.defer_drop(i);
        assert_eq!(domain.pending(), i);
    }
    domain.barrier();
    assert_eq!(domain.pending(), 0);
    assert_eq!(domain.stats().batches, 1);
}

#[test]
fn reclaimer_runs_a_full_batch_with_one_grace_period() {
    let domain = Domain::<Memb>::with_config(DomainConfig {
        batch_size: 1000,
        batch_delay: Duration::from_secs(3600),
        ..DomainConfig::default()
    });
    let drops = Arc::new(AtomicUsize::new(0));
    for _ in 0..1000 {
        domain.defer_drop(Counted(drops.clone()));
    }
    // The 1000th entry wakes the reclaimer; no barrier needed.
    while drops.load(Ordering::SeqCst) < 1000 {
        thread::yield_now();
    }
    let s = domain.stats();
    assert_eq!(s.batches, 1, "{s:?}");
    assert_eq!(s.grace_periods, 1, "{s:?}");
    assert_eq!(s.callbacks_run, 1000);
}

#[test]
fn reclaimer_waits_for_readers_before_running_callbacks() {
    let domain = Domain::<Memb>::new();
    let reader = domain.register();
    let drops = Arc::new(AtomicUsize::new(0));
    let g = reader.read();
    // Enqueueing from inside a read section never blocks (no back-pressure), even past a batch.
    for _ in 0..10_000 {
        domain.defer_drop(Counted(drops.clone()));
    }
    for _ in 0..2000 {
        assert_eq!(drops.load(Ordering::SeqCst), 0, "freed under a reader");
        thread::yield_now();
    }
    drop(g);
    domain.barrier();
    assert_eq!(drops.load(Ordering::SeqCst), 10_000);
}

#[test]
fn reader_handle_keeps_domain_alive_until_it_drops() {
    let domain = Domain::<Qsbr>::with_config(lazy());
    let mut reader = domain.register();
    drop(domain);
    let drops = Arc::new(AtomicUsize::new(0));
    reader.domain().defer_drop(Counted(drops.clone()));
    reader.offline();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(reader);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn last_handle_dropped_by_a_callback_shuts_down_cleanly() {
    let domain = Domain::<Memb>::new();
    let (tx, rx) = mpsc::channel::<&'static str>();
    struct Signal(mpsc::Sender<&'static str>, &'static str);
    impl Drop for Signal {
        fn drop(&mut self) {
            let _ = self.0.send(self.1);
        }
    }
    domain.defer_drop(domain.clone()); // the last handle, dropped on the reclaimer thread
    domain.defer_drop(Signal(tx.clone(), "after"));
    drop(tx);
    drop(domain); // not the last handle: the queued clone is
                  // The reclaimer runs the batch after batch_delay; dropping the queued clone shuts the domain
                  // down from inside the callback (no self-join), and the detached thread still drains.
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Ok("after"));
    assert!(
        rx.recv_timeout(Duration::from_secs(60)).is_err(),
        "sender dropped after run"
    );
}

#[test]
fn panicking_callback_is_counted_and_reclaimer_continues() {
    let domain = Domain::<Memb>::new();
    let drops = Arc::new(AtomicUsize::new(0));
    // Two panics in one batch (the default 1 ms gathering delay), each followed by work that
    // must still run: the reclaimer resumes after the entry that panicked.
    domain.call(|| panic!("callback panic (expected by the test)"));
    domain.defer_drop(Counted(drops.clone()));
    domain.call(|| panic!("second callback panic (expected by the test)"));
    domain.defer_drop(Counted(drops.clone()));
    domain.barrier();
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    assert_eq!(domain.stats().callback_panics, 2);
    assert_eq!(domain.stats().callbacks_run, 4);
}

#[test]
fn barrier_inside_a_callback_panics_instead_of_deadlocking() {
    let domain = Domain::<Memb>::new();
    let d = domain.clone();
    domain.call(move || d.barrier());
    domain.barrier();
    assert_eq!(domain.stats().callback_panics, 1);
}

/// Runs `domain.barrier()` on a helper thread and fails, instead of hanging the test, if it has
/// not returned within a liveness bound (a barrier needs milliseconds; a dead reclaimer used to
/// leave it waiting forever).
fn barrier_returns<F: Flavor>(domain: &Domain<F>, what: &str) {
    let (tx, rx) = mpsc::channel();
    let d = domain.clone();
    let h = thread::spawn(move || {
        d.barrier();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => h.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("barrier() hung: {what}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(h.join().expect_err("barrier() thread ended early"))
        }
    }
}

/// Regression (issue 17): `batch_delay: Duration::MAX` overflowed the reclaimer's `Instant`
/// addition, the reclaimer thread died, and `barrier()` hung forever. It now means "batch by
/// size only": a full batch still starts at once, and `barrier()` runs whatever is queued.
#[test]
fn batch_delay_max_batches_by_size_only_and_barrier_runs_the_rest() {
    let domain = Domain::<Memb>::with_config(DomainConfig {
        batch_size: 4,
        batch_delay: Duration::MAX,
        ..DomainConfig::default()
    });
    let drops = Arc::new(AtomicUsize::new(0));
    domain.defer_drop(Counted(drops.clone()));
    barrier_returns(&domain, "batch_delay = Duration::MAX");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // A full batch wakes the reclaimer without a barrier.
    for _ in 0..4 {
        domain.defer_drop(Counted(drops.clone()));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while drops.load(Ordering::SeqCst) < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "a full batch did not run with batch_delay = Duration::MAX"
        );
        thread::yield_now();
    }
    // Below batch_size nothing runs without a barrier (no timer): only the shutdown drains it.
    domain.defer_drop(Counted(drops.clone()));
    assert_eq!(domain.pending(), 1);
    drop(domain);
    assert_eq!(drops.load(Ordering::SeqCst), 6);
}

/// A panic payload whose own `Drop` panics.
struct PayloadPanicsOnDrop;

impl Drop for PayloadPanicsOnDrop {
    fn drop(&mut self) {
        panic!("panic payload's drop panics (expected by the test)");
    }
}

/// Regression (issue 17): the reclaimer dropped a callback's panic payload outside
/// `catch_unwind`; a payload whose `Drop` panics killed the thread, and `barrier()` hung.
#[test]
fn callback_panic_whose_payload_panics_on_drop_does_not_kill_the_reclaimer() {
    let domain = Domain::<Memb>::new();
    let drops = Arc::new(AtomicUsize::new(0));
    domain.call(|| std::panic::panic_any(PayloadPanicsOnDrop));
    domain.defer_drop(Counted(drops.clone()));
    barrier_returns(
        &domain,
        "after a callback whose panic payload panics on drop",
    );
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(domain.stats().callback_panics, 1);
    // The reclaimer is alive: later callbacks run too.
    domain.defer_drop(Counted(drops.clone()));
    barrier_returns(&domain, "second barrier");
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

/// Sends one message when dropped.
struct Signal(mpsc::Sender<()>);

impl Drop for Signal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A retired object that owns a handle of another domain, then a signal: fields drop in order,
/// so the signal goes only after the handle's drop returned.
struct OwnsHandle<F: Flavor>(#[allow(dead_code)] Domain<F>, #[allow(dead_code)] Signal);

fn each_others_last_handles<F: Flavor>() {
    let (tx, rx) = mpsc::channel();
    let a = Domain::<F>::new();
    let b = Domain::<F>::new();
    a.defer_drop(OwnsHandle(b.clone(), Signal(tx.clone())));
    b.defer_drop(OwnsHandle(a.clone(), Signal(tx)));
    // Now each domain's last handle is in the other's queue: each reclaimer drops the other's
    // last handle, which used to join that reclaimer while it joined this one.
    drop(a);
    drop(b);
    for _ in 0..2 {
        // A bound, not a synchronization: the deadlock hung both reclaimers forever.
        rx.recv_timeout(Duration::from_secs(60))
            .expect("a reclaimer hung joining the other domain's reclaimer (deadlock)");
    }
}

/// Regression (review of issue 17): two domains whose callbacks drop each other's last handle
/// deadlocked, each reclaimer joining the other.
#[test]
fn last_handles_dropped_by_each_others_callbacks_do_not_deadlock() {
    each_others_last_handles::<Memb>();
    each_others_last_handles::<Qsbr>();
}
