//! A counting global allocator proves that deferred objects are freed, not leaked: after a
//! domain with queued callbacks, readers on several threads and a reclaimer thread is dropped,
//! the number of live heap allocations is back where it was. One test per binary, so no other
//! test allocates concurrently.
#![cfg(not(loom))]

use aspace_rcu::{Domain, DomainConfig, Flavor, Memb, Qsbr};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::thread;
use std::time::Duration;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the System allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn workload<F: Flavor>(run_barrier: bool) {
    let domain = Domain::<F>::with_config(DomainConfig {
        batch_size: if run_barrier { 32 } else { usize::MAX },
        batch_delay: Duration::from_secs(3600),
        ..DomainConfig::default()
    });
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let d = domain.clone();
            thread::spawn(move || {
                let reader = d.register();
                for i in 0..500u64 {
                    drop(reader.read());
                    let p = Box::into_raw(Box::new([i; 4]));
                    // SAFETY: fresh Box pointer, passed once.
                    unsafe { d.defer_free(p) };
                    d.defer_drop(vec![t; 3]);
                    let s = format!("{i}");
                    d.call(move || drop(s));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    if run_barrier {
        domain.barrier();
        assert_eq!(domain.pending(), 0);
    } else {
        // Some callbacks are still queued (batch_delay is an hour); the drop must run them.
        assert!(domain.pending() > 0);
    }
    drop(domain);
}

#[test]
fn deferred_objects_leave_no_live_allocation_after_barrier_or_domain_drop() {
    // Warm-up: lets std allocate its lazily created per-process state once.
    workload::<Memb>(true);
    workload::<Qsbr>(true);
    for (flavor, barrier) in [
        ("memb", true),
        ("memb", false),
        ("qsbr", true),
        ("qsbr", false),
    ] {
        let before = LIVE.load(Ordering::SeqCst);
        if flavor == "memb" {
            workload::<Memb>(barrier);
        } else {
            workload::<Qsbr>(barrier);
        }
        let after = LIVE.load(Ordering::SeqCst);
        assert_eq!(
            after,
            before,
            "{flavor} barrier={barrier}: leaked {} allocations",
            after - before
        );
    }
}
