//! Multi-threaded stress tests of an address space, with invariants, bounded in work (a few
//! hundred operations per thread; fewer in debug builds) so they stop by themselves in well under
//! a few seconds in release.
//!
//! `private_and_shared_ranges_keep_invariants`: several cores, each on its own thread, work in
//! a private sub-range (fixed `mmap`, `munmap`, `mprotect`, `DONTNEED`, whole-page pattern
//! writes and reads) that no other core touches, checked exactly against a per-thread sequential
//! [`Model`] (results, faults, contents); and all of them race fixed `mmap`, `munmap`,
//! `mprotect` and `DONTNEED` over one shared range, where page `i` is written only by core
//! `i % cores`: a page its owner reads back is all zero (replaced, dropped) or exactly the
//! owner's last successful write, never an older write of its own and never another page's
//! pattern (a stale TLB entry or a frame reused while still mapped shows up as one of those, in
//! the shared range or in some core's private range). While they run: `frames_in_use <=
//! frames_total` (no double free inflating the pool) and `maps()` sorted, disjoint and merged.
//! After: each private range's regions equal its model's, `stats().regions == maps().len()`,
//! the frames in use are at most the mapped pages, and once everything is unmapped no frame is in
//! use, only the root page table is left, no core is attached.
//!
//! `concurrent_anywhere_mmaps_never_overlap`: cores `mmap` anywhere (address 0) in a small space,
//! fill every page with their own pattern, keep a few mappings alive, verify them, unmap them: two
//! cores given overlapping ranges would read each other's patterns.
//!
//! Not for: security properties against readers of foreign mappings (tests/security.rs), or
//! performance.

use super::model::{Model, P};
use super::{check_region_set, fixed, lines, PA};
use aspace_vm::{Access, Advice, CoreHandle, Design, Fault, Prot, RegionInfo};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

const THREADS: u64 = 4;
const PRIVATE_PAGES: u64 = 24;
const SHARED_PAGES: u64 = 16;
const BASE: u64 = 0x10_0000;

fn iterations() -> usize {
    if cfg!(debug_assertions) {
        60
    } else {
        400
    }
}

fn private_base(t: u64) -> u64 {
    BASE + t * (PRIVATE_PAGES + 1) * P
}

fn shared_base() -> u64 {
    private_base(THREADS) + P
}

/// The tag of a write: core and generation.
fn tag(t: u64, generation: u64) -> u64 {
    (t << 40) | generation
}

/// A whole page of the write tagged `tag` at `addr`: the tag, the address, then words derived
/// from both.
fn page_pattern(tag: u64, addr: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(P as usize);
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&addr.to_le_bytes());
    let mut x = tag ^ addr.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15;
    while out.len() < P as usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Decodes a page read back: `None` for all zeroes, else the tag it carries, after checking the
/// page is exactly that tag's pattern for `addr`.
fn decode(buf: &[u8], addr: u64) -> Option<u64> {
    if buf.iter().all(|&b| b == 0) {
        return None;
    }
    let tag = u64::from_le_bytes(buf[..8].try_into().unwrap());
    let at = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    assert_eq!(
        at, addr,
        "page {addr:#x} holds the pattern of page {at:#x} (tag {tag:#x})"
    );
    assert!(
        buf == page_pattern(tag, addr),
        "page {addr:#x}: torn or corrupt pattern of tag {tag:#x}"
    );
    Some(tag)
}

fn random_subrange(rng: &mut SmallRng, base: u64, pages: u64) -> (u64, u64) {
    let first = rng.gen_range(0..pages);
    let n = rng.gen_range(1..=(pages - first).min(8));
    (base + first * P, n * P)
}

/// One core's private work, every step compared with its model.
fn private_step(
    h: &mut CoreHandle,
    model: &mut Model,
    rng: &mut SmallRng,
    t: u64,
    generation: u64,
) {
    let base = private_base(t);
    let (addr, len) = random_subrange(rng, base, PRIVATE_PAGES);
    match rng.gen_range(0..10) {
        0..=2 => {
            let prot =
                [Prot::READ_WRITE, Prot::READ_WRITE, Prot::READ, Prot::NONE][rng.gen_range(0..4)];
            let got = h.mmap(addr, len, prot, fixed(PA)).map_err(|e| e.errno());
            assert_eq!(
                got,
                model.mmap(addr, len, prot, fixed(PA), addr),
                "core {t}: mmap {addr:#x}"
            );
        }
        3 => {
            let got = h.munmap(addr, len).map_err(|e| e.errno());
            assert_eq!(got, model.munmap(addr, len), "core {t}: munmap {addr:#x}");
            let expected = model.read(addr, 1).map(|_| ());
            assert_eq!(
                h.read(addr, &mut [0u8; 1]),
                expected,
                "core {t}: read after munmap"
            );
        }
        4 => {
            let prot = [Prot::READ_WRITE, Prot::READ, Prot::NONE][rng.gen_range(0..3)];
            let got = h.mprotect(addr, len, prot).map_err(|e| e.errno());
            assert_eq!(
                got,
                model.mprotect(addr, len, prot),
                "core {t}: mprotect {addr:#x}"
            );
        }
        5 => {
            let got = h
                .madvise(addr, len, Advice::DONTNEED)
                .map_err(|e| e.errno());
            assert_eq!(
                got,
                model.madvise(addr, len, Advice::DONTNEED),
                "core {t}: dontneed {addr:#x}"
            );
        }
        6..=8 => {
            for a in (addr..addr + len).step_by(P as usize) {
                let data = page_pattern(tag(t, generation), a);
                assert_eq!(
                    h.write(a, &data),
                    model.write(a, &data),
                    "core {t}: write {a:#x}"
                );
            }
        }
        _ => {
            let mut buf = vec![0u8; len as usize];
            let got = h.read(addr, &mut buf).map(|()| buf);
            let expected = model.read(addr, len);
            assert!(
                got == expected,
                "core {t}: read {addr:#x}+{len:#x} differs from its model"
            );
        }
    }
}

/// Verifies a core's whole private range against its model.
fn verify_private(h: &mut CoreHandle, model: &mut Model, t: u64) {
    let mut buf = vec![0u8; P as usize];
    for i in 0..PRIVATE_PAGES {
        let a = private_base(t) + i * P;
        let expected = model.read(a, P);
        let got = h.read(a, &mut buf).map(|()| buf.clone());
        assert!(
            got == expected,
            "core {t}: page {a:#x} differs from its model at the end"
        );
        if model.page(a).is_some_and(|p| !p.prot.allows(Access::Write)) {
            assert_eq!(
                h.touch(a, Access::Write),
                Err(Fault::Protection { addr: a })
            );
        }
    }
}

/// One core's move in the shared range.
fn shared_step(
    h: &mut CoreHandle,
    rng: &mut SmallRng,
    t: u64,
    generation: u64,
    last: &mut [Option<u64>],
) {
    let (addr, len) = random_subrange(rng, shared_base(), SHARED_PAGES);
    let enomem_ok = |r: Result<(), aspace_vm::VmError>, what: &str| match r {
        Ok(()) => {}
        Err(e) => assert_eq!(e.errno(), libc::ENOMEM, "core {t}: {what} {addr:#x}: {e}"),
    };
    match rng.gen_range(0..12) {
        0 | 1 => {
            let prot = [Prot::READ_WRITE, Prot::READ_WRITE, Prot::READ][rng.gen_range(0..3)];
            assert_eq!(
                h.mmap(addr, len, prot, fixed(PA)),
                Ok(addr),
                "core {t}: shared mmap"
            );
        }
        2 => assert_eq!(h.munmap(addr, len), Ok(()), "core {t}: shared munmap"),
        3 => {
            let prot = [Prot::READ_WRITE, Prot::READ, Prot::NONE][rng.gen_range(0..3)];
            enomem_ok(h.mprotect(addr, len, prot), "mprotect");
        }
        4 => enomem_ok(h.madvise(addr, len, Advice::DONTNEED), "madvise"),
        _ => {
            // Write, then read back, one of this core's own pages.
            let own: Vec<u64> = (0..SHARED_PAGES).filter(|i| i % THREADS == t).collect();
            let i = own[rng.gen_range(0..own.len())];
            let a = shared_base() + i * P;
            if rng.gen_bool(0.5) {
                let tg = tag(t, generation);
                match h.write(a, &page_pattern(tg, a)) {
                    Ok(()) => last[i as usize] = Some(tg),
                    Err(Fault::Unmapped { addr }) | Err(Fault::Protection { addr }) => {
                        assert_eq!(addr, a)
                    }
                    Err(f) => panic!("core {t}: write {a:#x}: {f:?}"),
                }
            }
            let mut buf = vec![0u8; P as usize];
            match h.read(a, &mut buf) {
                Ok(()) => {
                    if let Some(tg) = decode(&buf, a) {
                        assert_eq!(
                            tg >> 40,
                            t,
                            "core {t}: page {a:#x} written by core {}",
                            tg >> 40
                        );
                        assert_eq!(
                            Some(tg),
                            last[i as usize],
                            "core {t}: page {a:#x} holds an older write"
                        );
                    }
                }
                Err(Fault::Unmapped { addr }) | Err(Fault::Protection { addr }) => {
                    assert_eq!(addr, a)
                }
                Err(f) => panic!("core {t}: read {a:#x}: {f:?}"),
            }
        }
    }
}

/// See the module doc.
pub fn private_and_shared_ranges_keep_invariants(design: Design) {
    let top = shared_base() + SHARED_PAGES * P + 16 * P;
    let frames = THREADS * PRIVATE_PAGES + SHARED_PAGES + 64;
    let space = super::space(design, 0x1_0000, top, frames, 65_530);
    let failed = AtomicBool::new(false);
    let barrier = Barrier::new(THREADS as usize);
    let models: Vec<Model> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (space, barrier, failed) = (&space, &barrier, &failed);
                sc.spawn(move || {
                    let c = space.config().clone();
                    let mut h = space.attach().expect("attach");
                    let mut model = Model::new(c.min_addr, c.max_addr, c.max_map_count);
                    let mut rng = SmallRng::seed_from_u64(0x5eed ^ t);
                    let mut last = vec![None; SHARED_PAGES as usize];
                    barrier.wait();
                    for generation in 1..=iterations() as u64 {
                        if failed.load(Ordering::Relaxed) {
                            break;
                        }
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            if rng.gen_bool(0.5) {
                                private_step(&mut h, &mut model, &mut rng, t, generation);
                            } else {
                                shared_step(&mut h, &mut rng, t, generation, &mut last);
                            }
                            if generation % 32 == 0 {
                                let st = space.stats();
                                assert!(st.frames_in_use <= st.frames_total, "{st:?}");
                                check_region_set(&space.maps());
                            }
                        }));
                        if let Err(e) = r {
                            failed.store(true, Ordering::Relaxed);
                            std::panic::resume_unwind(e);
                        }
                    }
                    verify_private(&mut h, &mut model, t);
                    model
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|j| j.join().expect("a stress core failed"))
            .collect()
    });
    let maps = space.maps();
    check_region_set(&maps);
    for (t, model) in models.iter().enumerate() {
        let lo = private_base(t as u64);
        let hi = lo + PRIVATE_PAGES * P;
        let inside: Vec<RegionInfo> = maps
            .iter()
            .filter(|r| r.end > lo && r.start < hi)
            .map(|r| RegionInfo {
                start: r.start.max(lo),
                end: r.end.min(hi),
                ..*r
            })
            .collect();
        assert_eq!(
            inside,
            model.regions(),
            "core {t}'s range:\n{}",
            lines(&maps)
        );
    }
    let st = space.stats();
    assert_eq!(st.regions, maps.len() as u64, "{st:?}");
    assert_eq!(st.cores, 0, "{st:?}");
    let mapped: u64 = maps.iter().map(|r| (r.end - r.start) / P).sum();
    assert!(
        st.frames_in_use <= mapped,
        "{} frames for {mapped} mapped pages: {st:?}",
        st.frames_in_use
    );
    let mut h = space.attach().unwrap();
    super::unmap_everything_and_check_empty(&space, &mut h);
}

/// See the module doc.
pub fn concurrent_anywhere_mmaps_never_overlap(design: Design) {
    let (min, max) = (0x1_0000, 0x1_0000 + 256 * P);
    let space = super::space(design, min, max, 256, 65_530);
    let barrier = Barrier::new(THREADS as usize);
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (space, barrier) = (&space, &barrier);
            sc.spawn(move || {
                let mut h = space.attach().expect("attach");
                let mut rng = SmallRng::seed_from_u64(0xa110c ^ t);
                let mut live: Vec<(u64, u64, u64)> = Vec::new();
                barrier.wait();
                for generation in 1..=iterations() as u64 / 2 {
                    let len = rng.gen_range(1..=6) * P;
                    let a = h.mmap(0, len, Prot::READ_WRITE, PA).expect("mmap anywhere");
                    assert!(
                        a % P == 0 && a >= min && a + len <= max,
                        "{a:#x}+{len:#x} out of bounds"
                    );
                    let tg = tag(t, generation);
                    for p in (a..a + len).step_by(P as usize) {
                        h.write(p, &page_pattern(tg, p))
                            .expect("write a fresh mapping");
                    }
                    live.push((a, len, tg));
                    if live.len() > 3 {
                        let (a, len, tg) = live.remove(rng.gen_range(0..live.len()));
                        let mut buf = vec![0u8; P as usize];
                        for p in (a..a + len).step_by(P as usize) {
                            h.read(p, &mut buf).expect("read a live mapping");
                            assert_eq!(
                                decode(&buf, p),
                                Some(tg),
                                "core {t}: {p:#x} overwritten: overlapping mmaps"
                            );
                        }
                        assert_eq!(h.munmap(a, len), Ok(()));
                    }
                }
                for (a, len, _) in live {
                    assert_eq!(h.munmap(a, len), Ok(()));
                }
            });
        }
    });
    let st = space.stats();
    assert_eq!(
        (
            st.regions,
            st.frames_in_use,
            st.page_tables <= super::empty_tables(&st),
            st.cores
        ),
        (0, 0, true, 0),
        "{st:?}"
    );
    assert!(space.maps().is_empty());
}

/// Threads of the table churn (`churn_then_unmap_everything_frees_every_page_table`).
const CHURN_THREADS: u64 = 64;

/// A 64-core churn over a 2^47 space (arenas on where the design has them): each core maps
/// anywhere, at a hint of its own above the arenas and populated, writes, unmaps parts,
/// round-trips `mprotect`, drops pages with `DONTNEED`; then unmaps everything it mapped and
/// detaches. After that the space is back at its baseline: no region, no frame, and only the
/// page tables and metadata it started with (the root; under per-core page tables each slot's
/// empty tree), whatever arenas the unmapped ranges crossed
/// (issue 21: separators at arena boundaries once kept 8 tables above the arenas).
pub fn churn_then_unmap_everything_frees_every_page_table(design: Design) {
    let rounds: u64 = if cfg!(debug_assertions) { 4 } else { 24 };
    let space = aspace_vm::AddressSpace::builder()
        .design(design)
        .address_range(0x1_0000, 1 << 47)
        .memory(CHURN_THREADS * 64 * P)
        .max_cores(CHURN_THREADS as usize)
        .build()
        .expect("build the address space");
    // The baseline: every core slot attached once (a per-core design, `radix`, gives each
    // slot its own tree at its first attach and keeps the empty root after a detach).
    let handles: Vec<CoreHandle> = (0..CHURN_THREADS)
        .map(|_| space.attach().expect("attach"))
        .collect();
    drop(handles);
    let baseline = space.stats();
    let barrier = Barrier::new(CHURN_THREADS as usize);
    std::thread::scope(|sc| {
        for t in 0..CHURN_THREADS {
            let (space, barrier) = (&space, &barrier);
            sc.spawn(move || {
                let mut h = space.attach().expect("attach");
                let mut rng = SmallRng::seed_from_u64(0xc4u64 << 8 ^ t);
                // Hints of this core: 64 MiB apart, high in the space (above any arena).
                let home = (1 << 46) + t * (64 << 20);
                let mut live: Vec<(u64, u64)> = Vec::new();
                barrier.wait();
                for round in 0..rounds {
                    let len = rng.gen_range(1..=4) * P;
                    let (addr, flags) = match round % 3 {
                        0 => (0, PA),
                        1 => (home + rng.gen_range(0..64) * 8 * P, PA),
                        _ => (0, PA | aspace_vm::MapFlags::POPULATE),
                    };
                    let a = h.mmap(addr, len, Prot::READ_WRITE, flags).expect("mmap");
                    h.write(a, &[t as u8 + 1]).expect("write a fresh mapping");
                    h.write(a + len - P, &[t as u8 + 1])
                        .expect("write its last page");
                    live.push((a, len));
                    let i = rng.gen_range(0..live.len());
                    let (b, blen) = live[i];
                    match rng.gen_range(0..4) {
                        0 if blen > P => {
                            // Unmap the last page: the mapping shrinks.
                            assert_eq!(h.munmap(b + blen - P, P), Ok(()));
                            live[i].1 -= P;
                        }
                        1 => {
                            assert_eq!(h.mprotect(b, P, Prot::READ), Ok(()));
                            assert_eq!(h.mprotect(b, P, Prot::READ_WRITE), Ok(()));
                        }
                        2 => assert_eq!(h.madvise(b, blen, Advice::DONTNEED), Ok(())),
                        _ => {
                            assert_eq!(h.munmap(b, blen), Ok(()));
                            live.swap_remove(i);
                        }
                    }
                }
                for (a, len) in live {
                    assert_eq!(h.munmap(a, len), Ok(()));
                }
            });
        }
    });
    let st = space.stats();
    assert!(space.maps().is_empty());
    let resources = |s: &aspace_vm::Stats| {
        (
            s.regions,
            s.frames_in_use,
            s.cores,
            s.page_tables,
            s.page_table_bytes_per_core.clone(),
            // Under per-core page tables (`radix`) the metadata is also the region map's radix
            // nodes, which Refcache frees epochs after they empty (driven by later operations,
            // `aspace_map::RadixMap`), not at detach; its owner tree's tables are reclaimed at
            // every detach (`Windowed::reclaim_tables`) but are only part of the figure.
            (s.page_table_bytes_per_core.is_empty()).then_some(s.metadata_bytes),
        )
    };
    assert_eq!(
        resources(&st),
        resources(&baseline),
        "{design:?}: regions, frames, cores, page tables (all, per core) and metadata back to \
         the baseline after everything was unmapped and every core detached\n\
         baseline {baseline:?}\nafter    {st:?}"
    );
}
