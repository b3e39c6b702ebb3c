//! Behaviour of the public API: nesting, grace periods, sharing of grace periods, qsbr
//! online/offline, barrier modes, and the debug-build misuse checks.
#![cfg(not(loom))]

use aspace_rcu::{Domain, DomainConfig, Flavor, Memb, MembMode, Qsbr, Reader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;

/// How a test keeps a reader "pre-existing" (memb: inside a section; qsbr: online without
/// announcing a quiescent state), and how it lets it go.
trait Hold: Flavor {
    fn hold_until(
        reader: &mut Reader<Self>,
        entered: mpsc::Sender<()>,
        release: mpsc::Receiver<()>,
    );
}

impl Hold for Memb {
    fn hold_until(
        reader: &mut Reader<Self>,
        entered: mpsc::Sender<()>,
        release: mpsc::Receiver<()>,
    ) {
        let g = reader.read();
        entered.send(()).unwrap();
        release.recv().unwrap();
        drop(g);
    }
}

impl Hold for Qsbr {
    fn hold_until(
        reader: &mut Reader<Self>,
        entered: mpsc::Sender<()>,
        release: mpsc::Receiver<()>,
    ) {
        let g = reader.read();
        entered.send(()).unwrap();
        release.recv().unwrap();
        drop(g);
        reader.quiescent_state();
        reader.offline();
    }
}

/// Spawns a thread holding a pre-existing reader; returns (release sender, join handle).
fn spawn_holder<F: Hold>(domain: &Domain<F>) -> (mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let mut reader = domain.register();
    let h = thread::spawn(move || F::hold_until(&mut reader, entered_tx, release_rx));
    entered_rx.recv().unwrap();
    (release_tx, h)
}

fn wait_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        thread::yield_now();
    }
}

fn synchronize_waits_for_pre_existing_reader<F: Hold>() {
    let domain = Domain::<F>::new();
    let (release, holder) = spawn_holder(&domain);
    let done = Arc::new(AtomicBool::new(false));
    let (d, dn) = (domain.clone(), done.clone());
    let writer = thread::spawn(move || {
        d.synchronize();
        dn.store(true, Ordering::SeqCst);
    });
    wait_until(|| domain.stats().grace_periods == 1);
    for _ in 0..2000 {
        assert!(
            !done.load(Ordering::SeqCst),
            "synchronize() returned under a reader"
        );
        thread::yield_now();
    }
    release.send(()).unwrap();
    writer.join().unwrap();
    holder.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
}

#[test]
fn memb_synchronize_waits_for_pre_existing_reader() {
    synchronize_waits_for_pre_existing_reader::<Memb>();
}

#[test]
fn qsbr_synchronize_waits_for_online_reader_until_quiescent_state() {
    synchronize_waits_for_pre_existing_reader::<Qsbr>();
}

fn concurrent_synchronizers_share_grace_periods<F: Hold>() {
    let domain = Domain::<F>::new();
    let (release, holder) = spawn_holder(&domain);
    let spawn_sync = |d: &Domain<F>| {
        let d = d.clone();
        thread::spawn(move || d.synchronize())
    };
    let a = spawn_sync(&domain);
    wait_until(|| domain.stats().grace_periods == 1);
    let b = spawn_sync(&domain);
    let c = spawn_sync(&domain);
    // B and C have read the grace-period state and now queue on the writer mutex behind A.
    wait_until(|| domain.stats().synchronize_calls == 3);
    assert!(!a.is_finished());
    release.send(()).unwrap();
    for h in [a, b, c] {
        h.join().unwrap();
    }
    holder.join().unwrap();
    let s = domain.stats();
    assert_eq!(s.synchronize_calls, 3);
    // A's grace period could not serve B and C (they arrived during it); the first of them runs
    // one more and the other exits early when it gets the mutex.
    assert_eq!(s.grace_periods, 2, "{s:?}");
    assert_eq!(s.early_exits, 1, "{s:?}");
}

#[test]
fn memb_concurrent_synchronizers_share_grace_periods_via_early_exit() {
    concurrent_synchronizers_share_grace_periods::<Memb>();
}

#[test]
fn qsbr_concurrent_synchronizers_share_grace_periods_via_tickets() {
    concurrent_synchronizers_share_grace_periods::<Qsbr>();
}

/// A reader takes three nested guards, drops two of them (in `order`), and a writer must keep
/// waiting until the third drops. `outer_first` drops the outermost guard first (out of order).
fn nested_guards_keep_section_open_until_the_last_drops(config: DomainConfig, outer_first: bool) {
    let domain = Domain::<Memb>::with_config(config);
    let (entered_tx, entered_rx) = mpsc::channel();
    let (inner_tx, inner_rx) = mpsc::channel::<()>();
    let (outer_tx, outer_rx) = mpsc::channel::<()>();
    let reader = domain.register();
    let holder = thread::spawn(move || {
        let outer = reader.read();
        let inner = reader.read();
        let innermost = reader.read();
        entered_tx.send(()).unwrap();
        inner_rx.recv().unwrap();
        let last = if outer_first {
            drop(outer);
            drop(inner);
            innermost
        } else {
            drop(innermost);
            drop(inner);
            outer
        };
        entered_tx.send(()).unwrap();
        outer_rx.recv().unwrap();
        drop(last);
        // The reader is usable again: a fresh section opens and closes.
        drop(reader.read());
    });
    entered_rx.recv().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let (d, dn) = (domain.clone(), done.clone());
    let writer = thread::spawn(move || {
        d.synchronize();
        dn.store(true, Ordering::SeqCst);
    });
    wait_until(|| domain.stats().grace_periods == 1);
    inner_tx.send(()).unwrap();
    entered_rx.recv().unwrap();
    for _ in 0..2000 {
        assert!(
            !done.load(Ordering::SeqCst),
            "dropping two of three guards ended the section"
        );
        thread::yield_now();
    }
    outer_tx.send(()).unwrap();
    writer.join().unwrap();
    holder.join().unwrap();
    // Nothing is left inside a section: a grace period completes at once.
    domain.synchronize();
}

fn fallback() -> DomainConfig {
    DomainConfig {
        force_fence_fallback: true,
        ..DomainConfig::default()
    }
}

#[test]
fn memb_nested_guard_keeps_section_open_until_outermost_drops() {
    nested_guards_keep_section_open_until_the_last_drops(DomainConfig::default(), false);
}

#[test]
fn memb_guards_dropped_out_of_order_keep_section_open_until_the_last_drops() {
    nested_guards_keep_section_open_until_the_last_drops(DomainConfig::default(), true);
}

#[test]
fn memb_fallback_nested_guards_keep_section_open_until_the_last_drops() {
    nested_guards_keep_section_open_until_the_last_drops(fallback(), false);
    nested_guards_keep_section_open_until_the_last_drops(fallback(), true);
}

#[test]
fn synchronize_with_no_readers_returns() {
    let memb = Domain::<Memb>::new();
    let qsbr = Domain::<Qsbr>::new();
    for _ in 0..100 {
        memb.synchronize();
        qsbr.synchronize();
    }
    assert_eq!(memb.stats().grace_periods, 100);
    assert_eq!(qsbr.stats().grace_periods, 100);
}

#[test]
fn synchronize_with_idle_registered_readers_returns() {
    let memb = Domain::<Memb>::new();
    let r = memb.register();
    drop(r.read());
    memb.synchronize();
    let qsbr = Domain::<Qsbr>::new();
    let mut r = qsbr.register();
    r.offline();
    qsbr.synchronize();
    assert_eq!(qsbr.readers(), 1);
}

#[test]
fn qsbr_offline_reader_does_not_block_grace_periods() {
    let domain = Domain::<Qsbr>::new();
    let (parked_tx, parked_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut reader = domain.register();
    let t = thread::spawn(move || {
        reader.offline();
        parked_tx.send(()).unwrap();
        go_rx.recv().unwrap(); // blocks while offline: must not stall grace periods
        reader.online();
        assert!(reader.is_online());
        let _g = reader.read();
    });
    parked_rx.recv().unwrap();
    for _ in 0..10 {
        domain.synchronize();
    }
    go_tx.send(()).unwrap();
    t.join().unwrap();
}

#[test]
fn qsbr_reader_synchronize_goes_offline_around_the_wait() {
    let domain = Domain::<Qsbr>::new();
    let mut reader = domain.register();
    assert!(reader.is_online());
    reader.synchronize(); // Domain::synchronize() here would wait for ourselves
    assert!(reader.is_online());
    reader.offline();
    reader.synchronize();
    assert!(!reader.is_online());
}

#[test]
fn memb_mode_matches_membarrier_support() {
    let domain = Domain::<Memb>::new();
    match Domain::<Memb>::membarrier_status() {
        Ok(()) => assert_eq!(domain.mode(), MembMode::Membarrier),
        Err(e) => {
            eprintln!("membarrier unavailable: {e}");
            assert_eq!(domain.mode(), MembMode::FenceFallback);
        }
    }
    // Every domain of the process agrees.
    assert_eq!(Domain::<Memb>::new().mode(), domain.mode());
}

#[cfg(target_os = "linux")]
#[test]
fn memb_uses_membarrier_on_this_linux() {
    // Linux >= 4.14 offers MEMBARRIER_CMD_PRIVATE_EXPEDITED; the CI machines run newer kernels.
    assert_eq!(Domain::<Memb>::membarrier_status(), Ok(()));
    assert_eq!(Domain::<Memb>::new().mode(), MembMode::Membarrier);
}

#[test]
fn memb_forced_fence_fallback_is_reported_and_protects_readers() {
    let config = DomainConfig {
        force_fence_fallback: true,
        ..DomainConfig::default()
    };
    let domain = Domain::<Memb>::with_config(config);
    assert_eq!(domain.mode(), MembMode::FenceFallback);
    let (release, holder) = spawn_holder(&domain);
    let d = domain.clone();
    let writer = thread::spawn(move || d.synchronize());
    wait_until(|| domain.stats().grace_periods == 1);
    assert!(!writer.is_finished());
    release.send(()).unwrap();
    writer.join().unwrap();
    holder.join().unwrap();
}

#[test]
fn reader_is_send_and_can_move_between_threads() {
    let domain = Domain::<Memb>::new();
    let reader = domain.register();
    let reader = thread::spawn(move || {
        drop(reader.read());
        reader
    })
    .join()
    .unwrap();
    drop(reader.read());
    assert_eq!(domain.readers(), 1);
    drop(reader);
    assert_eq!(domain.readers(), 0);
}

#[test]
fn reader_domain_is_the_registering_domain() {
    let domain = Domain::<Qsbr>::new();
    let mut reader = domain.register();
    reader.offline();
    reader.domain().synchronize();
    reader.online();
    assert_eq!(reader.domain().readers(), 1);
    let g = reader.read();
    assert!(std::ptr::eq(g.reader(), &reader));
}

#[test]
fn a_guard_belongs_to_its_domain_and_its_clones_only() {
    let domain = Domain::<Memb>::new();
    let other = Domain::<Memb>::new();
    let reader = domain.register();
    let g = reader.read();
    assert!(g.belongs_to(&domain));
    assert!(g.belongs_to(&domain.clone()));
    assert!(g.belongs_to(reader.domain()));
    assert!(!g.belongs_to(&other));
    assert!(Domain::ptr_eq(&domain, &domain.clone()));
    assert!(!Domain::ptr_eq(&domain, &other));
}

#[test]
fn qsbr_quiescent_state_of_an_offline_reader_brings_it_online_in_every_build() {
    let domain = Domain::<Qsbr>::new();
    let mut reader = domain.register();
    reader.offline();
    reader.quiescent_state();
    assert!(reader.is_online());
    // Online again: grace periods wait for it until its next quiescent state.
    reader.synchronize();
    reader.quiescent_state();
    assert!(reader.is_online());
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "Reader dropped inside a read section")]
fn reader_dropped_inside_read_section_panics_in_debug() {
    let domain = Domain::<Memb>::new();
    let reader = domain.register();
    std::mem::forget(reader.read());
    drop(reader);
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "Reader dropped inside a read section")]
fn qsbr_reader_dropped_inside_read_section_panics_in_debug() {
    let domain = Domain::<Qsbr>::new();
    let reader = domain.register();
    std::mem::forget(reader.read());
    drop(reader);
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "inside a read section of the same domain")]
fn memb_synchronize_inside_read_section_panics_in_debug() {
    let domain = Domain::<Memb>::new();
    let reader = domain.register();
    let _g = reader.read();
    domain.synchronize();
}

#[cfg(debug_assertions)]
#[test]
fn memb_synchronize_inside_read_section_of_another_domain_is_fine() {
    let a = Domain::<Memb>::new();
    let b = Domain::<Memb>::new();
    let reader = a.register();
    let _g = reader.read();
    b.synchronize();
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "online qsbr reader of the same domain")]
fn qsbr_synchronize_from_online_reader_thread_panics_in_debug() {
    let domain = Domain::<Qsbr>::new();
    let mut reader = domain.register();
    reader.quiescent_state();
    domain.synchronize();
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "inside a read section")]
fn qsbr_quiescent_state_after_a_leaked_guard_panics_in_debug() {
    // With a live guard this does not compile (`&mut self`, see the compile_fail doctests); a
    // guard leaked with `mem::forget` protects nothing, but debug builds still report the leak.
    let domain = Domain::<Qsbr>::new();
    let mut reader = domain.register();
    std::mem::forget(reader.read());
    reader.quiescent_state();
}

#[test]
fn dropped_reader_unregisters_and_stops_blocking() {
    let domain = Domain::<Qsbr>::new();
    let reader = domain.register();
    assert_eq!(domain.readers(), 1);
    drop(reader);
    assert_eq!(domain.readers(), 0);
    domain.synchronize();
}

/// A fallback-mode reader that left its sections (outermost and nested) is at rest: it stays
/// registered, and grace periods do not wait for it (found by cargo-mutants: storing the
/// reader's word without clearing its nesting count on the last unlock went unnoticed, because
/// every other test dropped the reader before waiting).
#[test]
fn memb_fallback_reader_at_rest_after_unlock_does_not_delay_grace_periods() {
    let domain = Domain::<Memb>::with_config(fallback());
    assert_eq!(domain.mode(), MembMode::FenceFallback);
    let reader = domain.register();
    {
        let _outer = reader.read();
        let _inner = reader.read();
    }
    drop(reader.read());
    let (done_tx, done_rx) = mpsc::channel();
    let d = domain.clone();
    let writer = thread::spawn(move || {
        d.synchronize();
        d.synchronize();
        done_tx.send(()).unwrap();
    });
    // A bound on liveness, not a synchronization: the writer needs microseconds.
    let finished = done_rx.recv_timeout(std::time::Duration::from_secs(20));
    assert!(
        finished.is_ok(),
        "synchronize() waits for a registered reader that is not in a section"
    );
    writer.join().unwrap();
    drop(reader);
}

/// Checks that `synchronize()` on another thread does not return while the caller's state holds
/// a read section of `domain` open: a writer starts a grace period, and for a while (2000
/// yields) it must not finish. Returns the writer's handle, still waiting.
fn assert_synchronize_waits<F: Flavor>(domain: &Domain<F>, what: &str) -> thread::JoinHandle<()> {
    assert_synchronize_waits_across(domain, what, || {})
}

/// [`assert_synchronize_waits`], running `during` once the writer's grace period has started.
fn assert_synchronize_waits_across<F: Flavor>(
    domain: &Domain<F>,
    what: &str,
    during: impl FnOnce(),
) -> thread::JoinHandle<()> {
    let done = Arc::new(AtomicBool::new(false));
    let before = domain.stats().grace_periods;
    let (d, dn) = (domain.clone(), done.clone());
    let writer = thread::spawn(move || {
        d.synchronize();
        dn.store(true, Ordering::SeqCst);
    });
    wait_until(|| done.load(Ordering::SeqCst) || domain.stats().grace_periods > before);
    during();
    for _ in 0..2000 {
        assert!(
            !done.load(Ordering::SeqCst),
            "synchronize() returned under a live guard: {what}"
        );
        thread::yield_now();
    }
    writer
}

/// Regression (issue 17): in release builds the nested-lock path checked the nesting count only
/// with `debug_assert!`, so 2^31 leaked guards (2^15 on 32-bit targets) carried the count into
/// the FULL_FENCES bit, the reader's word read as idle, and `synchronize()` returned under the
/// live guards. Now the lock that would overflow panics and the reader stays inside its section.
/// (2^31 locks: about 3 s in release builds; skipped in debug builds.)
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "2^31 read locks take minutes in a debug build"
)]
fn memb_nesting_overflow_by_leaked_guards_does_not_end_the_read_section() {
    let domain = Domain::<Memb>::new();
    let reader = domain.register();
    // The largest nesting count a reader word holds (below FULL_FENCES).
    let max_nesting = (1usize << (usize::BITS / 2 - 1)) - 1;
    for _ in 0..max_nesting {
        std::mem::forget(reader.read());
    }
    let overflowing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::mem::forget(reader.read());
    }));
    let writer = assert_synchronize_waits(&domain, "after 2^31 leaked guards");
    let msg = overflowing.expect_err("the read lock past the nesting limit must panic");
    let msg = msg
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| msg.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(msg.contains("nested too deeply"), "{msg}");
    // The leaked guards stall grace periods until the reader goes (release builds unregister a
    // reader dropped inside a section quietly).
    drop(reader);
    writer.join().unwrap();
}

/// Regression (issue 17): `read()` on an offline qsbr reader was rejected only in debug builds;
/// in release builds the guard protected nothing (`synchronize()` did not wait for it).
#[test]
fn qsbr_read_on_an_offline_reader_panics_in_every_build() {
    let domain = Domain::<Qsbr>::new();
    let mut reader = domain.register();
    reader.offline();
    let msg = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader.read())) {
        Ok(g) => {
            let writer = assert_synchronize_waits(&domain, "a guard of an offline qsbr reader");
            drop(g);
            writer.join().unwrap();
            panic!("read() on an offline qsbr reader returned a guard");
        }
        Err(msg) => msg,
    };
    let msg = msg
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| msg.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(msg.contains("offline qsbr reader"), "{msg}");
    // The reader is still usable: online, a section, a quiescent state.
    reader.online();
    drop(reader.read());
    reader.quiescent_state();
}

// Regression (issue 17): `quiescent_state()`, `offline()` and `Reader::synchronize()` while a
// guard borrows the reader let `synchronize()` return under the live guard in release builds
// (tests on the old code: announced under the guard, the writer returned at once). They now take
// `&mut self`: the compile_fail doctests on `Reader<Qsbr>` and `Reader::synchronize` show the
// borrow checker rejecting them.

/// Runs `f` on a helper thread and returns its panic message; fails the test if `f` returns,
/// or has not panicked within a liveness bound (the hazards below used to hang forever).
#[cfg(debug_assertions)]
fn panics_instead_of_hanging(what: &str, f: impl FnOnce() + Send + 'static) -> String {
    let (tx, rx) = mpsc::channel::<()>();
    let h = thread::spawn(move || {
        let _tx = tx; // dropped when f returns or unwinds
        f();
    });
    match rx.recv_timeout(std::time::Duration::from_secs(20)) {
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} hung with no diagnosis"),
        _ => {
            let payload = h.join().expect_err(what);
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        }
    }
}

/// Regression (issue 17): `barrier()` inside a read section waits for a grace period that
/// waits for the caller: it hung with no diagnosis, where `synchronize()` panics in debug builds.
#[cfg(debug_assertions)]
#[test]
fn memb_barrier_inside_read_section_panics_in_debug() {
    let domain = Domain::<Memb>::new();
    let d = domain.clone();
    let msg = panics_instead_of_hanging("barrier() inside a read section", move || {
        let reader = d.register();
        let _g = reader.read();
        d.call(|| {});
        d.barrier();
    });
    assert!(
        msg.contains("barrier() called inside a read section"),
        "{msg}"
    );
    domain.barrier();
}

/// Regression (issue 17): the qsbr form of the same hazard: `barrier()` from a thread that is
/// an online reader of the domain.
#[cfg(debug_assertions)]
#[test]
fn qsbr_barrier_from_online_reader_thread_panics_in_debug() {
    let domain = Domain::<Qsbr>::new();
    let d = domain.clone();
    let msg = panics_instead_of_hanging("barrier() from an online qsbr reader", move || {
        let reader = d.register();
        d.call(|| {});
        d.barrier();
        drop(reader);
    });
    assert!(
        msg.contains("online qsbr reader of the same domain"),
        "{msg}"
    );
    domain.barrier();
}
