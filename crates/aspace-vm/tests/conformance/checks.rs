//! The invariants the conformance suite checks of a space: of any region list
//! ([`check_region_set`]), against the model after every step ([`check_cheap`]: `maps()`, counts,
//! frame bounds, page tables), of the whole state ([`check_full`]: every page's contents or fault,
//! the pages around every region), and that unmapping everything leaves nothing behind.
//!
//! Not for: running sequences (`harness.rs`).

use super::model::{Model, P};
use aspace_vm::{Access, AddressSpace, CoreHandle, Fault, RegionInfo, Stats};

/// Checks what must hold of any region list: sorted, disjoint, page aligned, non-empty, only
/// known protection bits. (Whether adjacent regions merge depends on their history, Linux's
/// `anon_vma`s, so that is checked against the model, not here.)
pub fn check_region_set(maps: &[RegionInfo]) {
    for r in maps {
        assert!(r.start < r.end, "empty region {r}");
        assert!(r.start % P == 0 && r.end % P == 0, "unaligned region {r}");
        assert!(!r.prot.has_unknown_bits(), "region with unknown bits {r}");
    }
    for w in maps.windows(2) {
        assert!(
            w[0].end <= w[1].start,
            "regions overlap or unsorted: {} / {}",
            w[0],
            w[1]
        );
    }
}

/// Page tables left when no region is mapped and every freeable table was freed: the root of
/// each tree (the one shared tree, or, under per-core page tables, one per core slot that ever
/// attached: `Stats::page_table_bytes_per_core` has an entry per slot).
pub fn empty_tables(st: &Stats) -> u64 {
    (st.page_table_bytes_per_core.len() as u64).max(1)
}

/// Whether the space keeps one page-table tree per core (`radix`). Its cores keep the empty
/// tables of a small unmapped range until the range is reused, a larger `munmap` covers them
/// or the core discards its tree (RadixVM §3.3; `designs/radix.rs`, "Departures"), so an empty
/// region list bounds its tables only after an `munmap` of everything (or a discard).
pub fn per_core_tables(st: &Stats) -> bool {
    !st.page_table_bytes_per_core.is_empty()
}

/// Checks the cheap invariants: `maps()` equals the model's regions, region count, frame bounds,
/// the page tables.
pub fn check_cheap(space: &AddressSpace, model: &Model) {
    let maps = space.maps();
    check_region_set(&maps);
    let expected = model.regions();
    if maps != expected {
        panic!(
            "maps() differs from the model\nengine:\n{}\nmodel:\n{}",
            lines(&maps),
            lines(&expected)
        );
    }
    let st = space.stats();
    assert_eq!(
        st.regions,
        maps.len() as u64,
        "stats().regions vs maps(): {st:?}"
    );
    let (must, may) = model.frame_bounds();
    assert!(
        must <= st.frames_in_use && st.frames_in_use <= may,
        "frames_in_use {} outside [{must}, {may}] (pages that must / may hold frames): {st:?}",
        st.frames_in_use
    );
    assert!(st.frames_in_use <= st.frames_total, "{st:?}");
    assert!(
        st.page_tables >= 1,
        "the root table is always there: {st:?}"
    );
    if maps.is_empty() {
        assert!(
            per_core_tables(&st) || st.page_tables <= empty_tables(&st),
            "no region: only the root table remains: {st:?}"
        );
        assert_eq!(st.frames_in_use, 0, "no region: no frame in use: {st:?}");
    }
}

/// `/proc/self/maps` lines of `maps`.
pub fn lines(maps: &[RegionInfo]) -> String {
    maps.iter().map(|r| format!("{r}\n")).collect()
}

/// Checks everything: [`check_cheap`], then every mapped page's contents (or its fault for
/// each kind of access it lacks), and that the pages just outside every region fault
/// `Unmapped`. Reads fault pages in, so the model is told (`Model::read`).
pub fn check_full(space: &AddressSpace, h: &mut CoreHandle, model: &mut Model) {
    check_cheap(space, model);
    let pages: Vec<u64> = model.pages().keys().copied().collect();
    let mut buf = vec![0u8; P as usize];
    for v in pages {
        let a = v * P;
        let prot = model.page(a).expect("mapped").prot;
        if prot.allows(Access::Read) {
            let expected = model.read(a, P).expect("readable in the model");
            h.read(a, &mut buf)
                .unwrap_or_else(|f| panic!("read of readable page {a:#x} faulted: {f:?}"));
            if buf != expected {
                let at = buf
                    .iter()
                    .zip(&expected)
                    .position(|(x, y)| x != y)
                    .unwrap_or(0);
                panic!(
                    "page {a:#x}: byte {at} is {} but the model has {}",
                    buf[at], expected[at]
                );
            }
        } else {
            assert_eq!(
                h.read(a, &mut buf),
                Err(Fault::Protection { addr: a }),
                "PROT_NONE page {a:#x}"
            );
        }
        for access in [Access::Read, Access::Write, Access::Exec] {
            if !prot.allows(access) {
                assert_eq!(
                    h.touch(a + 8, access),
                    Err(Fault::Protection { addr: a + 8 }),
                    "{access:?} of {a:#x} ({prot:?})"
                );
            }
        }
    }
    for r in model.regions() {
        for a in [r.start.wrapping_sub(P), r.end] {
            if a < (1 << 57) && model.page(a).is_none() {
                assert_eq!(
                    h.read(a, &mut buf[..1]),
                    Err(Fault::Unmapped { addr: a }),
                    "below/above {r}"
                );
                assert_eq!(h.touch(a, Access::Write), Err(Fault::Unmapped { addr: a }));
            }
        }
    }
    check_cheap(space, model);
}

/// Unmaps the whole space and checks that nothing is left: no region, no frame, only the root
/// page table, and stats that say so.
pub fn unmap_everything_and_check_empty(space: &AddressSpace, h: &mut CoreHandle) {
    let c = space.config().clone();
    h.munmap(c.min_addr, c.max_addr - c.min_addr)
        .expect("munmap of the whole space");
    assert!(space.maps().is_empty(), "{}", lines(&space.maps()));
    let st = space.stats();
    assert_eq!(
        (
            st.regions,
            st.frames_in_use,
            st.page_tables <= empty_tables(&st)
        ),
        (0, 0, true),
        "{st:?}"
    );
}
