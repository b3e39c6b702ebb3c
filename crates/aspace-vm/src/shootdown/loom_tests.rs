//! Loom models of the shootdown protocol (`--cfg loom`), on the real `Shootdown` and `Tlb`.
//!
//! The world: pages `P0`, `P1`, each with a page-table entry (a loom `AtomicU64`, 1 = present,
//! 0 = cleared) mapping it to its own frame `X0`/`X1`, a loom `UnsafeCell<u64>` holding `DATA`.
//! Frames are cells, not atomics, on purpose: real frames are plain memory copied with `memcpy`,
//! so loom must also prove that every frame read of a core *happens before* the shooter's reuse
//! write (an unordered pair is a reported data race), which is stronger than "never reads
//! POISON" and does not depend on loom exploring load buffering.
//!
//! A shooter "munmaps" page `i`: clears its PTE, calls `shootdown`, writes `POISON` into the
//! frame (its reuse), then sets `returned[i]` (Release). A core access is the engine's access
//! path: `begin_access`, for each page a TLB lookup or else a PTE walk (+ TLB insert), then the
//! frame reads, `end_access`. Checked: no frame read races with or follows the reuse (never
//! POISON), and an access that began after the core saw `returned[i]` (Acquire) faults on `i`.
//!
//! Models:
//! - `loom_core_with_a_cached_entry_never_reads_a_reused_frame`: one core with `P0 -> X0` in its
//!   TLB doing two accesses, one shooter;
//! - `loom_idle_core_does_not_block_the_shooter`: the core is registered with a cached entry but
//!   does not access while the shooter runs (the shooter must return without it; loom reports a
//!   non-terminating wait as a failure); afterwards its first access flushes and faults;
//! - `loom_two_shooters_that_are_also_cores`: two cores each unmap one page (each shootdown
//!   bumping both) and then read the other's page, so each shooter may have to wait for the
//!   other core's access, and each checks its own munmap took effect for itself;
//! - `loom_registration_races_a_shootdown`: a core registers concurrently with a shootdown and
//!   then accesses through a page-table walk (the F1/F2 registration argument);
//! - `loom_detach_racing_a_shootdown_orders_the_last_access_before_reuse`: a core with a cached
//!   entry does one last access and unregisters while a shooter munmaps its page; a shooter that
//!   reads the core's bit cleared does not wait, so only `unregister`'s Release (read by the
//!   shooter's Acquire bitmap load) orders the core's last frame read before the reuse.
//!   Mutation caught: `unregister`'s `fetch_and` Relaxed (loom reports the frame read racing
//!   the reuse write);
//! - `loom_targeted_shooter_waits_for_its_target_and_the_target_flushes`: `Targets::Cores` with
//!   the target in the second bitmap word (64 idle non-target cores before it) and a cached
//!   entry, accessing while the shooter munmaps. Mutations caught: the wait loop skipped for
//!   targeted shootdowns (data race on the frame), the request bump skipped for them (the
//!   target keeps its entry: reads the reused frame), `CoreSet::word` answering word 0 for
//!   every word (the target is never bumped nor waited for);
//! - `loom_targeted_shooter_neither_waits_for_nor_flushes_a_non_target`: a non-target core stays
//!   inside one access until the targeted shootdown returned (a shooter that waited for it would
//!   never return: loom reports the endless wait), and neither that access nor its next one
//!   flushes, while the idle target flushes at its next access. Mutations caught:
//!   `Targets::word` answering all cores for `Cores` (the shooter waits forever), the bump
//!   skipped for targeted shootdowns (the target does not flush).
//!
//! Not modelled: two shooters waiting for a *third* thread's access at the same time. Loom makes
//! the thread choice after a `yield_now` free of preemption cost, so two spinners can hand the
//! CPU to each other forever while the awaited core never runs, and the search does not end
//! ("exceeded maximum number of branches"; the protocol has no such livelock: the awaited access
//! runs independently of the spinners). That case is covered by the std stress test
//! `accessors_never_read_a_frame_after_its_unmap_returned` (two shooters, two accessors).
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test
//! --release -p aspace-vm --lib loom`.

use super::{CoreId, CoreSet, Shootdown, Targets};
use crate::tlb::Tlb;
use crate::types::{Access, Prot, PAGE_SIZE};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::thread;
use std::sync::Arc;

const DATA: u64 = 7;
const POISON: u64 = 0xdead;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}

/// One mapped page of the model.
struct Page {
    pte: AtomicU64,
    frame: UnsafeCell<u64>,
    returned: AtomicBool,
}

// SAFETY: the frame cell is shared between the cores (reads) and the shooter (the reuse write)
// on purpose: loom tracks every access to it and reports any pair not ordered by
// happens-before, which is exactly what the models check.
unsafe impl Sync for Page {}

struct World {
    sd: Shootdown,
    pages: Vec<Page>,
}

impl World {
    fn new(max_cores: usize, pages: usize) -> Arc<World> {
        Arc::new(World {
            sd: Shootdown::new(max_cores),
            pages: (0..pages)
                .map(|_| Page {
                    pte: AtomicU64::new(1),
                    frame: UnsafeCell::new(DATA),
                    returned: AtomicBool::new(false),
                })
                .collect(),
        })
    }

    fn va(i: usize) -> u64 {
        (16 + i as u64) * PAGE_SIZE
    }

    fn frame_ptr(&self, i: usize) -> *mut u8 {
        &self.pages[i].frame as *const UnsafeCell<u64> as *mut u8
    }

    /// munmap of page `i` by a shooter outside any access.
    fn munmap(&self, i: usize) {
        self.munmap_targeted(i, Targets::All);
    }

    /// munmap of page `i` by a shooter outside any access, shooting down `targets`.
    fn munmap_targeted(&self, i: usize, targets: Targets<'_>) {
        let p = &self.pages[i];
        // Release: as the page tables clear entries (stand-in for `clear_range`).
        p.pte.store(0, Ordering::Release);
        self.sd.shootdown(targets);
        // The frame's reuse: must not race with any core's read.
        p.frame.with_mut(|x| {
            // SAFETY: loom checks that no read of this cell is concurrent with this write.
            unsafe { *x = POISON }
        });
        // Release: pairs with the core's Acquire load before it begins an access.
        p.returned.store(true, Ordering::Release);
    }
}

/// A core: its slot, `seen` and TLB.
struct Core {
    id: CoreId,
    seen: u64,
    tlb: Tlb,
}

impl Core {
    fn register(w: &World) -> Core {
        let id = w.sd.register().expect("a free slot");
        Core {
            id,
            seen: w.sd.start(id),
            tlb: Tlb::new(4),
        }
    }

    /// Caches `P_i -> X_i` (a translation filled by an earlier access).
    fn prefill(&mut self, w: &World, i: usize) {
        assert!(!w.sd.begin_access(self.id, &mut self.seen, &mut self.tlb));
        self.tlb.insert(World::va(i), w.frame_ptr(i), Prot::READ);
        w.sd.end_access(self.id);
    }

    /// One access reading `pages` (translate all, then read all). `None` for a page that faults
    /// (the whole access then ends without reading, as the engine does).
    fn access(&mut self, w: &World, pages: &[usize]) -> Vec<Option<u64>> {
        // Acquire: pairs with the shooter's Release store of `returned` after shootdown returned.
        let after: Vec<bool> = pages
            .iter()
            .map(|&i| w.pages[i].returned.load(Ordering::Acquire))
            .collect();
        w.sd.begin_access(self.id, &mut self.seen, &mut self.tlb);
        let mut ptrs = Vec::new();
        for &i in pages {
            let va = World::va(i);
            let ptr = match self.tlb.lookup(va, Access::Read) {
                Some(p) => Some(p),
                // Acquire: as the page-table walk loads entries.
                None if w.pages[i].pte.load(Ordering::Acquire) == 1 => {
                    let p = w.frame_ptr(i);
                    self.tlb.insert(va, p, Prot::READ);
                    Some(p)
                }
                None => None,
            };
            ptrs.push(ptr);
        }
        let out: Vec<Option<u64>> = ptrs
            .iter()
            .map(|p| {
                p.map(|p| {
                    // SAFETY: `p` is `frame_ptr` of a page of `w`, which outlives the access.
                    let cell = unsafe { &*(p as *const UnsafeCell<u64>) };
                    // SAFETY: loom checks this read is ordered against the shooter's write.
                    cell.with(|x| unsafe { *x })
                })
            })
            .collect();
        w.sd.end_access(self.id);
        for (k, v) in out.iter().enumerate() {
            if let Some(v) = v {
                assert_ne!(*v, POISON, "read a reused frame");
                assert!(
                    !after[k],
                    "an access that began after munmap returned did not fault"
                );
            }
        }
        out
    }
}

#[test]
fn loom_core_with_a_cached_entry_never_reads_a_reused_frame() {
    model(|| {
        let w = World::new(2, 1);
        let mut core = Core::register(&w);
        core.prefill(&w, 0);
        let shooter = {
            let w = w.clone();
            thread::spawn(move || w.munmap(0))
        };
        for _ in 0..2 {
            core.access(&w, &[0]);
        }
        shooter.join().unwrap();
        // After the munmap is over, the core faults (it flushed and walked the cleared PTE).
        assert_eq!(core.access(&w, &[0]), vec![None]);
        assert_eq!(w.sd.sent(), 1);
        assert_eq!(w.sd.received(), 1);
    });
}

#[test]
fn loom_idle_core_does_not_block_the_shooter() {
    model(|| {
        let w = World::new(2, 1);
        let mut core = Core::register(&w);
        core.prefill(&w, 0);
        let shooter = {
            let w = w.clone();
            thread::spawn(move || {
                w.pages[0].pte.store(0, Ordering::Release);
                w.sd.shootdown(Targets::All)
            })
        };
        // The core stays outside any access until the shootdown is over.
        assert_eq!(shooter.join().unwrap(), 0, "waited for an idle core");
        assert!(w.sd.begin_access(core.id, &mut core.seen, &mut core.tlb));
        assert_eq!(core.tlb.lookup(World::va(0), Access::Read), None);
        assert_eq!(w.pages[0].pte.load(Ordering::Acquire), 0);
        w.sd.end_access(core.id);
    });
}

#[test]
fn loom_two_shooters_that_are_also_cores() {
    model(|| {
        let w = World::new(2, 2);
        let mut a = Core::register(&w);
        let mut b = Core::register(&w);
        for c in [&mut a, &mut b] {
            c.prefill(&w, 0);
            c.prefill(&w, 1);
        }
        // Core `a` unmaps page 0 and then reads page 1; core `b` the other way round. Each
        // shootdown bumps both cores (itself included) and may have to wait for the other's
        // access; neither shooter waits for itself or for the other while that one shoots.
        let threads: Vec<_> = [(a, 0), (b, 1)]
            .into_iter()
            .map(|(mut c, mine)| {
                let w = w.clone();
                thread::spawn(move || {
                    w.munmap(mine);
                    c.access(&w, &[1 - mine]);
                    // Its own munmap returned before this access began: it must fault.
                    assert_eq!(c.access(&w, &[mine]), vec![None]);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(w.sd.sent(), 2);
    });
}

#[test]
fn loom_registration_races_a_shootdown() {
    model(|| {
        let w = World::new(1, 1);
        let shooter = {
            let w = w.clone();
            thread::spawn(move || w.munmap(0))
        };
        let mut core = Core::register(&w);
        core.access(&w, &[0]);
        shooter.join().unwrap();
        w.sd.unregister(core.id);
    });
}

#[test]
fn loom_detach_racing_a_shootdown_orders_the_last_access_before_reuse() {
    model(|| {
        let w = World::new(2, 1);
        let mut core = Core::register(&w);
        core.prefill(&w, 0);
        let detaching = {
            let w = w.clone();
            thread::spawn(move || {
                // The core's last access (through its cached entry), then detach.
                core.access(&w, &[0]);
                w.sd.unregister(core.id);
            })
        };
        w.munmap(0);
        detaching.join().unwrap();
        assert_eq!(w.sd.cores(), 0);
    });
}

#[test]
fn loom_targeted_shooter_waits_for_its_target_and_the_target_flushes() {
    model(|| {
        let w = World::new(65, 1);
        // 64 registered, idle, non-target cores fill the first bitmap word.
        let idle: Vec<CoreId> = (0..64).map(|_| w.sd.register().unwrap()).collect();
        let mut core = Core::register(&w);
        assert_eq!(
            core.id.index(),
            64,
            "the target sits in the second bitmap word"
        );
        core.prefill(&w, 0);
        let shooter = {
            let w = w.clone();
            let mut set = CoreSet::new();
            set.insert(core.id);
            thread::spawn(move || w.munmap_targeted(0, Targets::Cores(&set)))
        };
        for _ in 0..2 {
            core.access(&w, &[0]);
        }
        shooter.join().unwrap();
        // After the munmap returned, the target faults (it flushed and walked the cleared PTE).
        assert_eq!(core.access(&w, &[0]), vec![None]);
        assert_eq!(w.sd.received(), 1, "only the target flushed, once");
        for id in idle {
            assert_eq!(w.sd.current_request(id), 0, "a non-target was bumped");
            w.sd.unregister(id);
        }
    });
}

#[test]
fn loom_targeted_shooter_neither_waits_for_nor_flushes_a_non_target() {
    model(|| {
        let w = World::new(2, 2);
        let mut other = Core::register(&w);
        let mut target = Core::register(&w);
        other.prefill(&w, 1);
        target.prefill(&w, 0);
        let done = Arc::new(AtomicBool::new(false));
        let shooter = {
            let (w, done) = (w.clone(), done.clone());
            let mut set = CoreSet::new();
            set.insert(target.id);
            thread::spawn(move || {
                w.pages[0].pte.store(0, Ordering::Release);
                let waited = w.sd.shootdown(Targets::Cores(&set));
                // Release: pairs with the non-target's Acquire load below.
                done.store(true, Ordering::Release);
                waited
            })
        };
        // The non-target enters an access and stays inside until the shootdown returned.
        assert!(!w.sd.begin_access(other.id, &mut other.seen, &mut other.tlb));
        // Acquire: pairs with the shooter's Release store after `shootdown` returned.
        while !done.load(Ordering::Acquire) {
            thread::yield_now();
        }
        assert!(
            other.tlb.lookup(World::va(1), Access::Read).is_some(),
            "a non-target's entry survives"
        );
        w.sd.end_access(other.id);
        assert_eq!(
            shooter.join().unwrap(),
            0,
            "waited for a non-target or an idle target"
        );
        assert!(
            !w.sd.begin_access(other.id, &mut other.seen, &mut other.tlb),
            "a non-target was asked to flush"
        );
        w.sd.end_access(other.id);
        assert!(
            w.sd.begin_access(target.id, &mut target.seen, &mut target.tlb),
            "the target flushes at its next access"
        );
        assert_eq!(target.tlb.lookup(World::va(0), Access::Read), None);
        w.sd.end_access(target.id);
    });
}

// ---- Sessions (`session.rs`; module doc of `shootdown.rs`, "Sessions") ----------------------
//
// A session core runs the session's steps on the real `Shootdown` and `Tlb`: `begin_access`
// once at open, then per access the relaxed `requested` check and `renew` when it fires, a TLB
// lookup or PTE walk, and a fault stepped out of (`end_access`, the handler, `begin_access`);
// `end_access` at close.

impl Core {
    /// One session access of page `i` (the core is inside its session's window): the frame's
    /// value, or `None` for a fault.
    fn session_access(&mut self, w: &World, i: usize) -> Option<u64> {
        self.poll(w);
        let va = World::va(i);
        let ptr = match self.tlb.lookup(va, Access::Read) {
            Some(p) => Some(p),
            // Acquire: as the page-table walk loads entries.
            None if w.pages[i].pte.load(Ordering::Acquire) == 1 => {
                let p = w.frame_ptr(i);
                self.tlb.insert(va, p, Prot::READ);
                Some(p)
            }
            None => {
                // The fault steps out of the window (the handler finds nothing) and back in.
                w.sd.end_access(self.id);
                self.open(w);
                None
            }
        };
        let v = ptr.map(|p| {
            // SAFETY: `p` is `frame_ptr` of a page of `w`, which outlives the access.
            let cell = unsafe { &*(p as *const UnsafeCell<u64>) };
            // SAFETY: loom checks this read is ordered against the shooter's write.
            cell.with(|x| unsafe { *x })
        });
        assert_ne!(v, Some(POISON), "a session read a reused frame");
        v
    }

    /// `Session::poll`.
    fn poll(&mut self, w: &World) {
        if super::requested(w.sd.request_word(self.id), self.seen) {
            w.sd.renew(self.id, &mut self.seen, &mut self.tlb);
        }
    }

    /// Opens a session's window (`CoreHandle::session`, or the step back in after a fault).
    fn open(&mut self, w: &World) {
        w.sd.begin_access(self.id, &mut self.seen, &mut self.tlb);
    }
}

/// A session with `P0 -> X0` cached reads page 0 in a loop while a shooter munmaps it: no read
/// sees the reused frame or races with the reuse (loom's cell tracking), and the first access
/// that began after the session saw `munmap` returned faults. The loop ends because the
/// session takes the request at an access (else the shooter never returns and loom reports the
/// endless run).
///
/// Mutation caught: `renew` taking the request without a flush (`*seen` set to the current
/// request between its `end_access` and `begin_access`): "Causality violation: Concurrent read
/// and write accesses to `UnsafeCell`." (the stale TLB entry reads the frame being reused).
#[test]
fn loom_session_never_reads_a_reused_frame_and_faults_after_munmap() {
    model(|| {
        let w = World::new(2, 1);
        let mut core = Core::register(&w);
        core.prefill(&w, 0);
        let shooter = {
            let w = w.clone();
            thread::spawn(move || w.munmap(0))
        };
        core.open(&w);
        loop {
            // Acquire: pairs with the shooter's Release store after shootdown returned.
            let after = w.pages[0].returned.load(Ordering::Acquire);
            let v = core.session_access(&w, 0);
            if after {
                assert_eq!(v, None, "an access after munmap returned did not fault");
                break;
            }
            thread::yield_now();
        }
        w.sd.end_access(core.id);
        shooter.join().unwrap();
        assert_eq!(w.sd.received(), 1);
    });
}

/// The liveness half of the latency contract: a session that only polls (no accesses, its
/// window open) releases a shooter waiting for it at its next poll that reads the bump. The
/// session polls in a loop until the shooter returned: if no poll ended the wait, neither
/// thread could move and loom reports the endless run. The window the shooter waits for may
/// be one whose `begin` already took the bump (at the open, or a renew's `begin` that ran
/// before the shooter's `access` load): no later check fires for it, and only the `ack` word
/// lets the shooter go.
///
/// Mutations caught (each failing with "Model exceeded maximum number of
/// branches. This is often caused by an algorithm requiring the processor to make progress,
/// e.g. spin locks."): `requested` answering `false` (the request never taken); the shooter's
/// wait ignoring `ack` (`&& ack < t` dropped; the protocol before `ack` existed, where loom
/// found the case).
#[test]
fn loom_a_polling_session_releases_the_shooter_at_its_next_poll() {
    model(|| {
        let w = World::new(2, 1);
        let mut core = Core::register(&w);
        core.prefill(&w, 0);
        let shooter = {
            let w = w.clone();
            thread::spawn(move || w.munmap(0))
        };
        core.open(&w);
        // Acquire: pairs with the shooter's Release store after shootdown returned.
        while !w.pages[0].returned.load(Ordering::Acquire) {
            core.poll(&w);
            thread::yield_now();
        }
        assert_eq!(
            core.session_access(&w, 0),
            None,
            "the renewed window faults"
        );
        w.sd.end_access(core.id);
        shooter.join().unwrap();
    });
}

/// An idle core is never waited for, also right after a session: the core opens a session,
/// reads once, closes it and then waits (idle) for the shooter to return; a shooter that
/// waited for it would never return. Its next session flushes and faults.
///
/// Mutation caught: the shooter waiting for every target whatever its parity (`a % 2 == 1`
/// replaced by `true`): "Model exceeded maximum number of branches. This is often caused by
/// an algorithm requiring the processor to make progress, e.g. spin locks."
#[test]
fn loom_a_closed_session_is_idle_and_never_waited_for() {
    model(|| {
        let w = World::new(2, 1);
        let mut core = Core::register(&w);
        let shooter = {
            let w = w.clone();
            thread::spawn(move || w.munmap(0))
        };
        core.open(&w);
        core.session_access(&w, 0);
        w.sd.end_access(core.id);
        // Acquire: pairs with the shooter's Release store after shootdown returned.
        while !w.pages[0].returned.load(Ordering::Acquire) {
            thread::yield_now();
        }
        core.open(&w);
        assert_eq!(core.session_access(&w, 0), None);
        w.sd.end_access(core.id);
        shooter.join().unwrap();
    });
}
