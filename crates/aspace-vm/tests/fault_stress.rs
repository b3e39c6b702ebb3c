//! Stress test of faults against concurrent region edits, on every design (`Design::ALL`):
//! faulting threads read and write pages of regions that editing threads concurrently split
//! (`mprotect` of part of a region), merge (`mprotect` of the whole region back), re-protect,
//! unmap, map again (`MAP_FIXED`) and drop (`DONTNEED`); bounded rounds, seeded (`STRESS_SEED`
//! overrides the seed, printed on failure).
//!
//! Checked while running: every byte a faulter reads in a slot is 0 or the slot's own tag (a
//! fill that used another region's frame, or a frame reused before its shootdown, shows another
//! slot's tag), and a faulting access fails only with `Unmapped` or `Protection` (never out of
//! memory: the pool holds every page of every slot). Checked at the end, with every thread
//! joined: the region list is sorted, disjoint and inside the slots, `Stats::regions` is its
//! length, `frames_in_use` is at most the mapped pages (every present entry is in a region);
//! then after `munmap` of the whole range: no frame in use, no region, only the root page
//! table (a frame or table leaked by a fill that raced an edit, or left in a freed table,
//! shows here).
//!
//! Run it oversubscribed (more runnable threads than CPUs, so that threads are preempted inside
//! the race windows): `/work/shared/tools/oversubscribed -n 20 <test binary> fault_stress`.

#![cfg(not(loom))]

use aspace_vm::{Access, AddressSpace, Advice, Design, Fault, MapFlags, Prot};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicUsize, Ordering};

const P: u64 = 4096;
/// Pages per slot (one region at the start; edits split it into up to 16).
const SLOT_PAGES: u64 = 16;
/// Slots, each `SLOT_PAGES` pages followed by a gap of as many.
const SLOTS: u64 = 8;
const BASE: u64 = 0x4000_0000;
const FAULTERS: usize = 3;
const EDITORS: usize = 2;
/// Operations per editor; faulters go on until the editors are done (and at least this many).
const ROUNDS: usize = 20_000;

fn slot_start(slot: u64) -> u64 {
    BASE + slot * 2 * SLOT_PAGES * P
}

/// The byte written to every page of `slot`.
fn tag(slot: u64) -> u8 {
    slot as u8 + 1
}

/// How far (in operations) one kind of thread may run ahead of the other.
const SLACK: usize = 32;

/// What the threads tell each other, so that edits and faults stay interleaved even when the
/// threads outnumber the CPUs (else, oversubscribed, one kind often ran all its rounds while
/// the other waited for a CPU): faulters wait when they are more than [`SLACK`] edits' worth of
/// rounds ahead, editors when they are more than `SLACK` operations ahead of the faulting
/// rounds.
struct Progress {
    /// Edits so far, all editors together.
    edited: AtomicUsize,
    /// Editors still running.
    editing: AtomicUsize,
    /// Faulting rounds so far, all faulters together.
    faulted: AtomicUsize,
}

fn seed() -> u64 {
    std::env::var("STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x005e_ed19)
}

fn faulter(mut c: aspace_vm::CoreHandle, seed: u64, design: Design, sync: &Progress) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = [0u8; 64];
    let mut round = 0;
    while round < ROUNDS || sync.editing.load(Ordering::Relaxed) > 0 {
        round += 1;
        // Never far ahead of the edits (module doc of `Progress`).
        while sync.editing.load(Ordering::Relaxed) > 0
            && sync.faulted.load(Ordering::Relaxed)
                > (sync.edited.load(Ordering::Relaxed) + SLACK) * FAULTERS * 2
        {
            std::thread::yield_now();
        }
        sync.faulted.fetch_add(1, Ordering::Relaxed);
        let slot = rng.gen_range(0..SLOTS);
        let page = rng.gen_range(0..SLOT_PAGES);
        let addr = slot_start(slot) + page * P + rng.gen_range(0..P / 64) * 64;
        let r = if rng.gen_bool(0.5) {
            c.write(addr, &[tag(slot); 64])
        } else {
            let r = c.read(addr, &mut buf);
            if r.is_ok() {
                assert!(
                    buf.iter().all(|&b| b == 0 || b == tag(slot)),
                    "{design:?}: slot {slot} read foreign bytes {buf:?}"
                );
            }
            r
        };
        match r {
            Ok(()) | Err(Fault::Unmapped { .. }) | Err(Fault::Protection { .. }) => {}
            Err(e) => panic!("{design:?}: unexpected fault {e:?}"),
        }
        if rng.gen_ratio(1, 8) {
            let _ = c.touch(addr, Access::Read);
        }
    }
}

fn editor(mut c: aspace_vm::CoreHandle, seed: u64, sync: &Progress) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
    for _ in 0..ROUNDS {
        // Never far ahead of the faults (module doc of `Progress`).
        while sync.edited.load(Ordering::Relaxed) > sync.faulted.load(Ordering::Relaxed) + SLACK {
            std::thread::yield_now();
        }
        sync.edited.fetch_add(1, Ordering::Relaxed);
        let slot = rng.gen_range(0..SLOTS);
        let first = rng.gen_range(0..SLOT_PAGES);
        let pages = rng.gen_range(1..=SLOT_PAGES - first);
        let (at, len) = (slot_start(slot) + first * P, pages * P);
        let whole = slot_start(slot);
        // ENOMEM on a hole (a part already unmapped) is a legitimate answer.
        match rng.gen_range(0..10) {
            0..=2 => {
                // Split: re-protect part of the slot.
                let prot = [Prot::READ, Prot::NONE, Prot::READ_WRITE][rng.gen_range(0..3)];
                let _ = c.mprotect(at, len, prot);
            }
            3..=4 => {
                // Merge: the whole slot back to read-write.
                let _ = c.mprotect(whole, SLOT_PAGES * P, Prot::READ_WRITE);
            }
            5..=6 => c.munmap(at, len).unwrap(),
            7..=8 => {
                c.mmap(at, len, Prot::READ_WRITE, fixed).unwrap();
            }
            _ => {
                let _ = c.madvise(at, len, Advice::DONTNEED);
            }
        }
    }
    sync.editing.fetch_sub(1, Ordering::Relaxed);
}

fn stress(design: Design, seed: u64) {
    let end = slot_start(SLOTS);
    let space = AddressSpace::builder()
        .design(design)
        .address_range(BASE, end + 64 * P)
        // Every page of every slot, plus per-core cache slack: a fault never runs out.
        .memory((SLOTS * SLOT_PAGES + 64 * 8) * P)
        .frame_batch(4)
        .max_cores(FAULTERS + EDITORS + 1)
        .build()
        .unwrap();
    let mut main = space.attach().unwrap();
    let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
    for slot in 0..SLOTS {
        main.mmap(slot_start(slot), SLOT_PAGES * P, Prot::READ_WRITE, fixed)
            .unwrap();
    }
    let sync = Progress {
        editing: AtomicUsize::new(EDITORS),
        edited: AtomicUsize::new(0),
        faulted: AtomicUsize::new(0),
    };
    std::thread::scope(|s| {
        let sync = &sync;
        for t in 0..FAULTERS {
            let c = space.attach().unwrap();
            s.spawn(move || faulter(c, seed ^ ((t as u64 + 1) * 0x9e37), design, sync));
        }
        for t in 0..EDITORS {
            let c = space.attach().unwrap();
            s.spawn(move || editor(c, seed ^ ((t as u64 + 101) * 0x9e37), sync));
        }
    });
    let maps = space.maps();
    let mut mapped = 0;
    let mut prev_end = 0;
    for r in &maps {
        assert!(
            r.start < r.end && r.start >= prev_end,
            "{design:?}: {maps:?}"
        );
        let slot = (r.start - BASE) / (2 * SLOT_PAGES * P);
        assert!(
            slot < SLOTS && r.end <= slot_start(slot) + SLOT_PAGES * P,
            "{design:?}: a region outside the slots {r:?}"
        );
        mapped += (r.end - r.start) / P;
        prev_end = r.end;
    }
    let st = space.stats();
    assert!(
        st.faults > 100 && st.shootdowns > 0,
        "{design:?}: too few fills or shootdowns to mean anything: {st:?}"
    );
    eprintln!(
        "{design:?}: {} faults ({:?} by stage), {} fills, {} shootdowns",
        st.faults, st.fault_stages, st.fills, st.shootdowns
    );
    assert_eq!(st.regions, maps.len() as u64, "{design:?}");
    assert!(
        st.frames_in_use <= mapped,
        "{design:?}: {} frames in use for {mapped} mapped pages",
        st.frames_in_use
    );
    main.munmap(BASE, end - BASE).unwrap();
    if !space.stats().page_table_bytes_per_core.is_empty() {
        // Per-core page tables (`radix`) keep the empty tables at the edges of an unmapped
        // range until their core discards them (`designs/radix.rs`, "Departures"); the other
        // cores detached, which discarded theirs.
        main.discard_page_tables().unwrap();
    }
    let st = space.stats();
    assert_eq!(st.regions, 0, "{design:?}");
    assert_eq!(
        st.frames_in_use, 0,
        "{design:?}: a frame leaked (seed {seed})"
    );
    assert_eq!(
        st.page_tables,
        (st.page_table_bytes_per_core.len() as u64).max(1),
        "{design:?}: a page table leaked (seed {seed}): only the roots remain"
    );
}

#[test]
fn fault_stress_faults_against_splits_merges_reprotects_and_unmaps_on_every_design() {
    let seed = seed();
    for &design in Design::ALL {
        stress(design, seed);
    }
}
