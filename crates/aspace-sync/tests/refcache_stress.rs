//! Refcache under concurrent use: no object freed while referenced, and every object whose true
//! count reached zero freed within [`MAX_LAG`] epochs.
//!
//! Four threads (more than this machine's cores; run it under `shared/tools/oversubscribed`
//! too) share 16 object slots, each holding the current object's [`Weak`]. Each thread, on its
//! own core, repeatedly: revives or re-creates a slot's object (`tryget`, or a new object when
//! the old one is freed), takes more references (`get`, or a `clone` without a core), gives them
//! back (`put`, or a drop without a core), flushes, and now and then detaches its core and
//! attaches a new one. A fifth core, held by the main thread, keeps cached references and never
//! maintains during the run: helpers must flush it, or epochs would stall.
//!
//! Checks, with sizes shrunk so that races happen (4-entry caches, epochs as fast as the cores
//! maintain):
//! - **no free while referenced**: beside each object the test counts its holders; the free
//!   (the value's `Drop`) asserts there are none, and a holder asserts after taking a reference
//!   and again before giving it back that the object is not freed;
//! - **bounded lag**: the holder that gives back the last reference records the epoch just
//!   after doing so (the largest such record wins: a holder preempted before its record, while
//!   the object was revived and zeroed again, once stored an older epoch over the newer one and
//!   failed the check with a lag of 17 epochs under CI's load). Once the threads are joined (every decided free has run), no object whose
//!   holders reached zero more than [`MAX_LAG`] epochs ago may be left unfreed; and after the
//!   idle core gives its references back, every object is freed within `MAX_LAG` epochs. (The
//!   bound: the last delta is flushed within epoch `z + 1`, so the object is queued with a tag
//!   of at most `z + 2`, reviewed by `z + 4`, and a dirty one re-queued once, by `z + 7`; the
//!   free is decided by the flush of that epoch, `z + 8` at the latest.) The lag seen by each
//!   free is only reported: a reviewer preempted between deciding a free and running it lets
//!   epochs pass that are not Refcache's;
//! - **exactly once, and all**: a second free of one object fails the first check (holders are
//!   not touched, but the freed flag is); at the end every object is freed and the domain's
//!   live count is zero.
#![cfg(not(loom))]

use aspace_sync::{Core, Ref, Refcache, RefcacheConfig, Weak};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Epochs from the last reference given back to the free, at most.
const MAX_LAG: u64 = 8;
const SLOTS: usize = 16;
const THREADS: usize = 4;
const RUN: Duration = Duration::from_millis(1500);

/// The test's record of one object, outside it (it outlives the object).
struct Probe {
    rc: Refcache,
    holders: AtomicI64,
    freed: AtomicBool,
    /// An epoch no earlier than the holder count's last zero: the largest epoch read after a
    /// last reference went (`fetch_max`: a holder preempted between its give-back and its read
    /// of the epoch must not overwrite a later holder's record with an older epoch).
    zero_epoch: AtomicU64,
    /// Last references being given back whose epoch is not recorded yet.
    recording: AtomicUsize,
    stats: Arc<Stats>,
}

#[derive(Default)]
struct Stats {
    probes: Mutex<Vec<Arc<Probe>>>,
    created: AtomicUsize,
    freed: AtomicUsize,
    max_lag: AtomicU64,
    revived: AtomicUsize,
}

struct Obj(Arc<Probe>);

impl Drop for Obj {
    fn drop(&mut self) {
        let p = &self.0;
        assert_eq!(p.holders.load(SeqCst), 0, "freed while referenced");
        assert!(!p.freed.swap(true, SeqCst), "freed twice");
        if p.recording.load(SeqCst) == 0 {
            let lag = p.rc.epoch().saturating_sub(p.zero_epoch.load(SeqCst));
            p.stats.max_lag.fetch_max(lag, SeqCst);
        }
        p.stats.freed.fetch_add(1, SeqCst);
    }
}

/// A reference the test holds, with its probe (read without touching the object).
struct Held(Ref<Obj>, Arc<Probe>);

fn took(r: Ref<Obj>) -> Held {
    let p = r.0.clone();
    p.holders.fetch_add(1, SeqCst);
    assert!(!p.freed.load(SeqCst), "a reference to a freed object");
    Held(r, p)
}

/// Gives `h` back through `core` (or without a core when `core` is `None`).
fn give_back(h: Held, core: Option<&Core>) {
    let Held(r, p) = h;
    assert!(!p.freed.load(SeqCst), "freed while held");
    // Counted down before the reference goes: a free can only follow it.
    let last = p.holders.fetch_sub(1, SeqCst) == 1;
    if last {
        p.recording.fetch_add(1, SeqCst);
    }
    match core {
        Some(c) => c.put(r).unwrap(),
        None => drop(r),
    }
    if last {
        // After the reference went: an epoch no earlier than the true count's zero.
        p.zero_epoch.fetch_max(p.rc.epoch(), SeqCst);
        p.recording.fetch_sub(1, SeqCst);
    }
}

type Slot = Mutex<Option<(Weak<Obj>, Arc<Probe>)>>;

/// A reference to slot `i`'s object: revived by `tryget`, or a new object if it was freed.
fn acquire(core: &Core, rc: &Refcache, slots: &[Slot], i: usize, stats: &Arc<Stats>) -> Held {
    let mut slot = slots[i].lock().unwrap();
    if let Some((w, _)) = slot.as_ref() {
        if let Some(r) = core.tryget(w).unwrap() {
            stats.revived.fetch_add(1, SeqCst);
            return took(r);
        }
        assert!(w.is_freed(), "tryget failed on an object not freed");
    }
    let probe = Arc::new(Probe {
        rc: rc.clone(),
        holders: AtomicI64::new(0),
        freed: AtomicBool::new(false),
        zero_epoch: AtomicU64::new(0),
        recording: AtomicUsize::new(0),
        stats: stats.clone(),
    });
    stats.created.fetch_add(1, SeqCst);
    stats.probes.lock().unwrap().push(probe.clone());
    let r = core.alloc(Obj(probe.clone()));
    *slot = Some((Ref::downgrade(&r).unwrap(), probe));
    took(r)
}

/// A small xorshift generator (deterministic per thread; no shared state).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn no_object_is_freed_while_referenced_and_zeroes_are_freed_within_the_bound() {
    let rc = Refcache::with_config(
        THREADS + 1,
        RefcacheConfig {
            maintain_every: 8,
            ..RefcacheConfig::eager(4)
        },
    );
    let slots: Vec<Slot> = (0..SLOTS).map(|_| Mutex::new(None)).collect();
    let stats = Arc::new(Stats::default());
    // The idle core: cached references, no maintenance until the end.
    let idle = rc.core(THREADS);
    let mut idle_held: Vec<Held> = (0..4)
        .map(|i| {
            let h = acquire(&idle, &rc, &slots, i, &stats);
            let more = took(idle.get(&h.0).unwrap());
            give_back(h, Some(&idle));
            more
        })
        .collect();
    let epoch0 = rc.epoch();
    let deadline = Instant::now() + RUN;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (rc, slots, stats) = (&rc, &slots, &stats);
            s.spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t as u64 + 1) * 0x1234_5678));
                let mut core = rc.core(t);
                let mut held: Vec<Held> = Vec::new();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    match rng.below(16) {
                        0..=4 => {
                            let i = rng.below(SLOTS as u64) as usize;
                            held.push(acquire(&core, rc, slots, i, stats));
                        }
                        5..=6 if !held.is_empty() => {
                            let h = &held[rng.below(held.len() as u64) as usize];
                            let r = if rng.below(4) == 0 {
                                h.0.clone()
                            } else {
                                core.get(&h.0).unwrap()
                            };
                            held.push(took(r));
                        }
                        7..=12 if !held.is_empty() => {
                            let h = held.swap_remove(rng.below(held.len() as u64) as usize);
                            let via_core = rng.below(8) != 0;
                            give_back(h, via_core.then_some(&core));
                        }
                        13 => core.flush(),
                        14 if n % 64 == 0 => {
                            // Detach (flush, leave) and attach again.
                            core = rc.core(t);
                        }
                        _ => {}
                    }
                    if held.len() > 8 {
                        give_back(held.swap_remove(0), Some(&core));
                    }
                }
                for h in held {
                    give_back(h, Some(&core));
                }
            });
        }
    });
    let during = rc.epoch() - epoch0;
    assert!(
        during >= 10,
        "epochs advanced only {during} times with an idle core holding cached references"
    );
    // Quiescent (every decided free has run): nothing zeroed long ago is left.
    let now = rc.epoch();
    for p in stats.probes.lock().unwrap().iter() {
        if p.holders.load(SeqCst) == 0 && !p.freed.load(SeqCst) {
            let zero = p.zero_epoch.load(SeqCst);
            assert!(
                now - zero <= MAX_LAG,
                "unfreed {} epochs after its last reference (zero at {zero})",
                now - zero
            );
        }
    }
    for h in idle_held.drain(..) {
        give_back(h, Some(&idle));
    }
    // Alone now: every object is freed within the bound.
    let last = rc.epoch();
    while rc.epoch() < last + MAX_LAG {
        idle.synchronize();
    }
    let created = stats.created.load(SeqCst);
    assert_eq!(stats.freed.load(SeqCst), created, "every object freed");
    assert_eq!(rc.stats().live_objects, 0);
    assert!(
        created > SLOTS,
        "objects were freed and re-created during the run"
    );
    eprintln!(
        "refcache stress: {created} objects, {} revived by tryget, {during} epochs, max lag {} epochs",
        stats.revived.load(SeqCst),
        stats.max_lag.load(SeqCst)
    );
    drop(idle);
    drop(slots);
}
