//! Bounded stress: readers validate objects that updaters replace and free through
//! `defer_free`, `call` and `synchronize`, with the objects poisoned on drop.
//!
//! A reader loads the shared pointer inside a read section and checks, repeatedly, that the
//! object's magic is intact, its id unchanged and its payload checksum right. Freeing an object
//! too early makes its drop write the poison pattern (and then the allocator may reuse it), which
//! breaks one of these checks. Batch sizes are tiny so reclamation races with reads constantly.
//! Bounded by both an iteration count and a time limit.
#![cfg(not(loom))]

use aspace_rcu::{Domain, DomainConfig, Flavor, Memb, Qsbr, Reader};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const MAGIC: u64 = 0x5afe_0b1e_c7ed_beef;
const POISON: u64 = 0xdead_dead_dead_dead;
const UPDATES: usize = 20_000;
const TIME_LIMIT: Duration = Duration::from_millis(700);
/// Reader threads (the machines this runs on have as few as 2 cores).
const READERS: usize = 1;

struct Obj {
    magic: u64,
    id: u64,
    payload: [u64; 6],
    sum: u64,
    drops: Arc<AtomicUsize>,
}

impl Obj {
    fn boxed(id: u64, drops: &Arc<AtomicUsize>) -> *mut Obj {
        let payload = std::array::from_fn(|i| id.wrapping_mul(0x9e37_79b9).wrapping_add(i as u64));
        let sum = payload.iter().fold(id, |a, b| a.wrapping_add(*b));
        Box::into_raw(Box::new(Obj {
            magic: MAGIC,
            id,
            payload,
            sum,
            drops: drops.clone(),
        }))
    }

    /// Validates the object behind `p` (which must be protected by the caller's read section).
    fn validate(p: *const Obj) -> u64 {
        // SAFETY: `p` is protected by the caller's read section; volatile so that a premature
        // free is observed rather than optimised away.
        unsafe {
            let magic = ptr::read_volatile(&(*p).magic);
            assert_eq!(magic, MAGIC, "reader saw a freed (poisoned) object");
            let id = ptr::read_volatile(&(*p).id);
            let mut sum = id;
            for i in 0..6 {
                sum = sum.wrapping_add(ptr::read_volatile(&(*p).payload[i]));
            }
            assert_eq!(sum, ptr::read_volatile(&(*p).sum), "torn or reused object");
            id
        }
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        // SAFETY: plain writes to our own fields; volatile so the poison is really written.
        unsafe {
            ptr::write_volatile(&mut self.magic, POISON);
            ptr::write_volatile(&mut self.sum, POISON);
        }
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

struct SendPtr(*mut Obj);
// SAFETY: the pointee is an unlinked `Obj` (all fields Send) owned by the callback.
unsafe impl Send for SendPtr {}

trait ReadLoop: Flavor {
    fn after_section(reader: &mut Reader<Self>, iteration: usize);
    fn finish(reader: &mut Reader<Self>);
}

impl ReadLoop for Memb {
    fn after_section(_: &mut Reader<Self>, _: usize) {}
    fn finish(_: &mut Reader<Self>) {}
}

impl ReadLoop for Qsbr {
    fn after_section(reader: &mut Reader<Self>, iteration: usize) {
        reader.quiescent_state();
        if iteration % 64 == 0 {
            reader.offline();
            reader.online();
        }
    }
    fn finish(reader: &mut Reader<Self>) {
        reader.offline();
    }
}

fn stress<F: ReadLoop>() {
    let domain = Domain::<F>::with_config(DomainConfig {
        batch_size: 8,
        batch_delay: Duration::from_micros(50),
        ..DomainConfig::default()
    });
    let drops = Arc::new(AtomicUsize::new(0));
    let shared = Arc::new(AtomicPtr::new(Obj::boxed(0, &drops)));
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + TIME_LIMIT;

    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (mut reader, shared, stop) = (domain.register(), shared.clone(), stop.clone());
            thread::spawn(move || {
                let mut sections = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    {
                        let _g = reader.read();
                        let _nested = reader.read();
                        // Acquire: pairs with the AcqRel swap of the updater.
                        let p = shared.load(Ordering::Acquire);
                        let id = Obj::validate(p);
                        // Mostly short sections, now and then a long one (a wide window).
                        let checks = if sections % 4 == 0 { 300 } else { 4 };
                        for _ in 0..checks {
                            std::hint::spin_loop();
                            assert_eq!(Obj::validate(p), id, "object changed under a reader");
                        }
                    }
                    F::after_section(&mut reader, sections);
                    sections += 1;
                }
                F::finish(&mut reader);
                sections
            })
        })
        .collect();

    let mut created = 1usize;
    for i in 0..UPDATES {
        if Instant::now() > deadline {
            break;
        }
        let new = Obj::boxed(i as u64 + 1, &drops);
        created += 1;
        // AcqRel: Release publishes the new object; Acquire takes ownership of the old one.
        let old = shared.swap(new, Ordering::AcqRel);
        match i % 4 {
            // SAFETY: `old` is unlinked, came from Box::into_raw and is passed once.
            0 | 1 => unsafe { domain.defer_free(old) },
            2 => {
                let old = SendPtr(old);
                domain.call(move || {
                    let old = old;
                    // SAFETY: unlinked Box pointer, freed once after a grace period.
                    drop(unsafe { Box::from_raw(old.0) });
                });
            }
            _ => {
                domain.synchronize();
                // SAFETY: unlinked before the grace period that just ended; freed once.
                drop(unsafe { Box::from_raw(old) });
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let sections: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    domain.barrier();
    assert_eq!(domain.pending(), 0);
    // Only the current object is still alive.
    assert_eq!(drops.load(Ordering::Relaxed), created - 1);
    // SAFETY: all readers are gone; the last object is owned by us now.
    drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    assert_eq!(drops.load(Ordering::Relaxed), created);
    eprintln!("{}: {sections} read sections, {created} objects", F::NAME);
    assert!(
        sections > 0 && created > 100,
        "sections {sections}, updates {created}"
    );
}

#[test]
fn memb_readers_never_see_freed_objects_under_concurrent_reclamation() {
    stress::<Memb>();
}

#[test]
fn qsbr_readers_never_see_freed_objects_under_concurrent_reclamation() {
    stress::<Qsbr>();
}

#[test]
fn memb_fallback_readers_never_see_freed_objects_under_concurrent_reclamation() {
    // Same stress with full-fence readers; reuses the generic body through a fallback domain.
    let domain = Domain::<Memb>::with_config(DomainConfig {
        force_fence_fallback: true,
        batch_size: 8,
        ..DomainConfig::default()
    });
    let drops = Arc::new(AtomicUsize::new(0));
    let shared = Arc::new(AtomicPtr::new(Obj::boxed(0, &drops)));
    let stop = Arc::new(AtomicBool::new(false));
    let (reader, sh, st) = (domain.register(), shared.clone(), stop.clone());
    let r = thread::spawn(move || {
        while !st.load(Ordering::Relaxed) {
            let _g = reader.read();
            // Acquire: pairs with the AcqRel swap below.
            Obj::validate(sh.load(Ordering::Acquire));
        }
    });
    let deadline = Instant::now() + TIME_LIMIT / 2;
    let mut i = 1;
    while i < UPDATES as u64 && Instant::now() < deadline {
        // AcqRel: Release publishes the new object; Acquire takes ownership of the old one.
        let old = shared.swap(Obj::boxed(i, &drops), Ordering::AcqRel);
        // SAFETY: unlinked Box pointer, passed once.
        unsafe { domain.defer_free(old) };
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    r.join().unwrap();
    domain.barrier();
    assert_eq!(drops.load(Ordering::Relaxed) as u64, i - 1);
    // SAFETY: the reader is gone; we own the last object.
    drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
}
