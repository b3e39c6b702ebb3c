//! Loom models of the users record (`--cfg loom`): a walker on the access path against a
//! targeted shooter, on the real `PageTables`, `Shootdown` and `Tlb` (`users.rs`, "protocol").
//!
//! The world: page `A` (and `B`, in the same leaf table) mapped to frame 1 (2), each frame a
//! loom `UnsafeCell<u64>` holding `DATA`, so loom reports any frame read that is not ordered
//! before the shooter's reuse write (stronger than "never reads POISON"). A walker core's
//! access is the engine's (`access.rs`): `begin_access`, TLB lookup, else
//! `lookup_recorded` (record the bit, then load the entry) and a TLB insert, then the frame
//! read, `end_access`. The shooter munmaps `A` as `zap_locked` does under the targeted policy:
//! `clear_range_noting` (clear under the leaf lock, FS, read the masks), the masks' cores as
//! a `CoreSet`, `shootdown(Targets::Cores)` unless the set is empty, then the frame's reuse
//! (`POISON`) and `returned` (Release). Checked: no frame read races with or follows the
//! reuse, an access that began after the walker saw `returned` faults, and after the shooter
//! returned the walker faults on `A`. Each model also counts (outside loom) executions in which
//! the walker was and was not a target, and asserts both happened: the model is not vacuous.
//! Page-table walks run without an RCU guard here: nothing frees tables (memory-safe
//! regardless, `mod.rs`).
//!
//! Models:
//! - `loom_a_walker_that_caches_an_entry_is_a_target_of_its_unmap`: the walker's first walk of
//!   the leaf (slow path: RMW, FW), then a TLB hit, racing the munmap;
//! - `loom_the_steady_state_walk_without_a_fence_is_still_recorded`: one access of the walker
//!   walks `B` (sets its bit) and then `A` with its bit already set (no write, no fence),
//!   racing. In one access on purpose: `begin_access`'s fence F2 (`shootdown.rs`) would also
//!   order a bit set in an earlier access before this one's walks, and did hide FW's removal
//!   from the two-access version of this model;
//! - `loom_a_core_sharing_its_bit_takes_the_fenced_path`: cores 0 and 64 share bit 0 (64 bits
//!   under loom); core 0 walks `A` while core 64, which sees the bit set, walks and reads `A`.
//!
//! Mutations, each applied to the real code and seen to fail with loom's "Causality violation:
//! Concurrent read and write accesses" on the frame cell (the walker's read against the reuse):
//! - FW removed from `LeafUsers::record` (first model): loom reports the walker's frame read
//!   racing the shooter's reuse write (a causality violation on the frame cell);
//! - FS removed from `LeafUsers::collect_after_changes` (first model): the same race;
//! - `lookup_as` recording after loading the entry (first model): the same race (plain
//!   interleaving: the walker loads the entry, the shooter clears and reads an empty mask);
//! - `UserBit::of` calling every bit exclusive (third model): core 64 sees core 0's bit, skips
//!   the fence, caches the old entry, and the shooter, whose mask load missed the bit, frees.
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test
//! --release -p aspace-vm --lib users`.

use super::super::PageTables;
use super::{UserBit, UserMask};
use crate::frames::Frame;
use crate::shootdown::{CoreId, CoreSet, Shootdown, Targets};
use crate::tlb::Tlb;
use crate::types::{Access, Prot, PAGE_SIZE};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::sync::Arc;

const DATA: u64 = 7;
const POISON: u64 = 0xdead;
/// Leaf index 16 of the first leaf; `B` is its neighbour in the same leaf.
const A: u64 = 16 * PAGE_SIZE;
const B: u64 = 17 * PAGE_SIZE;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    // The page-table code is long (a fill or clear touches dozens of atomics), as in the
    // reclamation model next door.
    b.max_branches = 20_000;
    b.check(f);
}

struct World {
    pt: PageTables,
    sd: Shootdown,
    max_cores: usize,
    /// Frame 1 backs `A`, frame 2 backs `B`.
    frames: [UnsafeCell<u64>; 2],
    returned: AtomicBool,
}

// SAFETY: the frame cells are shared between the walkers (reads) and the shooter (the reuse
// write) on purpose: loom tracks every access and reports any pair not ordered by
// happens-before, which is what the models check.
unsafe impl Sync for World {}
// SAFETY: as for `Sync` (the raw pointers inside `PageTables` are owned tables of atomics).
unsafe impl Send for World {}

impl World {
    fn new(max_cores: usize) -> Arc<World> {
        let w = World {
            pt: PageTables::new(max_cores),
            sd: Shootdown::new(max_cores),
            max_cores,
            frames: [UnsafeCell::new(DATA), UnsafeCell::new(DATA)],
            returned: AtomicBool::new(false),
        };
        let mut cache = w.pt.cache(0);
        w.pt.fill(&mut cache, A, Prot::READ, || Some(Frame::from_index(1)))
            .unwrap();
        w.pt.fill(&mut cache, B, Prot::READ, || Some(Frame::from_index(2)))
            .unwrap();
        drop(cache);
        Arc::new(w)
    }

    fn frame_ptr(&self, f: Frame) -> *mut u8 {
        &self.frames[f.index() as usize - 1] as *const UnsafeCell<u64> as *mut u8
    }

    /// munmap(A) under the targeted policy (`zap_locked`); returns whether it shot down.
    fn munmap_a(&self) -> bool {
        let mut freed = Vec::new();
        let mut users = UserMask::default();
        self.pt
            .clear_range_noting(A..A + PAGE_SIZE, &mut freed, Some(&mut users));
        assert_eq!(freed, [Frame::from_index(1)]);
        let mut set = CoreSet::new();
        users.cores_into(self.max_cores, &mut set);
        let shot = !set.is_empty();
        if shot {
            self.sd.shootdown(Targets::Cores(&set));
        }
        self.frames[0].with_mut(|x| {
            // SAFETY: loom checks that no read of this cell is concurrent with this write.
            unsafe { *x = POISON }
        });
        // Release: pairs with the walker's Acquire load before it begins an access.
        self.returned.store(true, Ordering::Release);
        shot
    }
}

/// A walker core: its slot, `seen`, TLB and users bit.
struct Walker {
    id: CoreId,
    seen: u64,
    tlb: Tlb,
    user: UserBit,
}

impl Walker {
    fn register(w: &World) -> Walker {
        let id = w.sd.register().expect("a free slot");
        Walker::at(w, id)
    }

    fn at(w: &World, id: CoreId) -> Walker {
        Walker {
            id,
            seen: w.sd.current_request(id),
            tlb: Tlb::new(4),
            user: UserBit::of(id.index(), w.max_cores),
        }
    }

    /// One access reading `va` as the engine does; the value read, `None` for a fault.
    fn access(&mut self, w: &World, va: u64) -> Option<u64> {
        self.access_pages(w, &[va])[0]
    }

    /// One access translating every page of `vas` in order, then reading them (a multi-page
    /// access, `handle.rs`); `None` for a page that faults.
    fn access_pages(&mut self, w: &World, vas: &[u64]) -> Vec<Option<u64>> {
        // Acquire: pairs with the shooter's Release store after its shootdown returned.
        let after = w.returned.load(Ordering::Acquire);
        w.sd.begin_access(self.id, &mut self.seen, &mut self.tlb);
        let ptrs: Vec<Option<*mut u8>> = vas
            .iter()
            .map(|&va| match self.tlb.lookup(va, Access::Read) {
                Some(p) => Some(p),
                None => w.pt.lookup_recorded(va, self.user).map(|pte| {
                    let p = w.frame_ptr(pte.frame());
                    self.tlb.insert(va, p, pte.prot());
                    p
                }),
            })
            .collect();
        let values: Vec<Option<u64>> = ptrs
            .iter()
            .map(|p| {
                p.map(|p| {
                    // SAFETY: `p` is `frame_ptr` of a frame of `w`, which outlives the access.
                    let cell = unsafe { &*(p as *const UnsafeCell<u64>) };
                    // SAFETY: loom checks this read is ordered against the shooter's write.
                    cell.with(|x| unsafe { *x })
                })
            })
            .collect();
        w.sd.end_access(self.id);
        for (&va, v) in vas.iter().zip(&values) {
            if let Some(v) = v {
                assert_ne!(*v, POISON, "read a reused frame");
                assert!(
                    !(after && va == A),
                    "an access that began after munmap returned did not fault"
                );
            }
        }
        values
    }
}

/// Executions in which the shooter did / did not shoot down, per model.
struct Outcomes {
    shot: AtomicUsize,
    skipped: AtomicUsize,
}

impl Outcomes {
    const fn new() -> Outcomes {
        Outcomes {
            shot: AtomicUsize::new(0),
            skipped: AtomicUsize::new(0),
        }
    }

    fn count(&self, shot: bool) {
        let c = if shot { &self.shot } else { &self.skipped };
        c.fetch_add(1, StdOrdering::Relaxed);
    }

    fn assert_both(&self) {
        let (s, k) = (
            self.shot.load(StdOrdering::Relaxed),
            self.skipped.load(StdOrdering::Relaxed),
        );
        assert!(
            s > 0 && k > 0,
            "vacuous model: {s} executions shot down, {k} did not"
        );
    }
}

#[test]
fn loom_a_walker_that_caches_an_entry_is_a_target_of_its_unmap() {
    static OUTCOMES: Outcomes = Outcomes::new();
    model(|| {
        let w = World::new(2);
        let mut walker = Walker::register(&w);
        assert!(walker.user.exclusive());
        let shooter = {
            let w = w.clone();
            thread::spawn(move || w.munmap_a())
        };
        for _ in 0..2 {
            walker.access(&w, A);
        }
        OUTCOMES.count(shooter.join().unwrap());
        assert_eq!(walker.access(&w, A), None, "A is unmapped for the walker");
    });
    OUTCOMES.assert_both();
}

#[test]
fn loom_the_steady_state_walk_without_a_fence_is_still_recorded() {
    static OUTCOMES: Outcomes = Outcomes::new();
    model(|| {
        let w = World::new(2);
        let mut walker = Walker::register(&w);
        let shooter = {
            let w = w.clone();
            thread::spawn(move || w.munmap_a())
        };
        // One access over B then A: the walk of B sets the walker's bit in the leaf (B's
        // translation stays: B is not unmapped), the walk of A finds it set (no write, no fence;
        // the FW of B's walk is the one that orders it: no `begin_access` fence in between).
        assert_eq!(walker.access_pages(&w, &[B, A])[0], Some(DATA));
        walker.access(&w, A);
        OUTCOMES.count(shooter.join().unwrap());
        assert_eq!(walker.access(&w, A), None, "A is unmapped for the walker");
    });
    OUTCOMES.assert_both();
}

#[test]
fn loom_a_core_sharing_its_bit_takes_the_fenced_path() {
    static OUTCOMES: Outcomes = Outcomes::new();
    model(|| {
        let w = World::new(65);
        let ids: Vec<CoreId> = (0..65).map(|_| w.sd.register().unwrap()).collect();
        for &id in &ids[1..64] {
            w.sd.unregister(id);
        }
        let (x, y) = (Walker::at(&w, ids[0]), Walker::at(&w, ids[64]));
        assert_eq!(x.user, y.user, "slots 0 and 64 share bit 0");
        // (That the bit counts as shared is `users.rs`'s unit test; not asserted here, so that
        // the mutation calling it exclusive reaches the protocol.)
        let first = {
            let w = w.clone();
            let mut x = x;
            thread::spawn(move || {
                // Core 0 walks A (recording bit 0) and caches it without using it.
                w.sd.begin_access(x.id, &mut x.seen, &mut x.tlb);
                let _ = w.pt.lookup_recorded(A, x.user);
                w.sd.end_access(x.id);
            })
        };
        let shooter = {
            let w = w.clone();
            thread::spawn(move || w.munmap_a())
        };
        let mut y = y;
        y.access(&w, A);
        first.join().unwrap();
        OUTCOMES.count(shooter.join().unwrap());
        assert_eq!(y.access(&w, A), None, "A is unmapped for core 64");
    });
    OUTCOMES.assert_both();
}
