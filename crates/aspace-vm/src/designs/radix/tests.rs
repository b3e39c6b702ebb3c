//! Tests of the `radix` design's RadixVM properties through the public API: per-core page
//! tables that share frames, shootdowns sent only to the cores that copied a translation (none
//! for a page only its own core touched), frames returned after `munmap`, discardable per-core
//! tables, and the metadata the stats report.

use crate::types::{Access, Advice, MapFlags, Prot, PAGE_SIZE as P};
use crate::{AddressSpace, CoreHandle, Design};

fn space(cores: usize) -> AddressSpace {
    AddressSpace::builder()
        .design(Design::Radix)
        .memory(4 << 20)
        .max_cores(cores)
        .build()
        .unwrap()
}

fn map(h: &mut CoreHandle, len: u64) -> u64 {
    h.mmap(
        0,
        len,
        Prot::READ | Prot::WRITE,
        MapFlags::PRIVATE_ANONYMOUS,
    )
    .unwrap()
}

#[test]
fn a_page_only_its_own_core_touched_sends_no_shootdown() {
    let space = space(2);
    let mut a = space.attach().unwrap();
    let _b = space.attach().unwrap();
    for i in 0..100u64 {
        let x = map(&mut a, P);
        a.write(x, &i.to_le_bytes()).unwrap();
        let mut buf = [0u8; 8];
        a.read(x, &mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), i);
        a.munmap(x, P).unwrap();
    }
    let st = space.stats();
    assert_eq!(st.shootdowns, 0, "no other core held a copy: {st:?}");
    assert_eq!(st.shootdown_targets, 0);
    assert_eq!(st.regions, 0);
    assert_eq!(
        st.frames_in_use, 0,
        "every unmapped frame went back to the pool (the caches hold none here: {st:?})"
    );
}

#[test]
fn munmap_shoots_down_exactly_the_one_core_that_copied_the_page() {
    let space = space(4);
    let mut a = space.attach().unwrap();
    let mut b = space.attach().unwrap();
    let _idle = space.attach().unwrap();
    let x = map(&mut a, P);
    a.write(x, &7u64.to_le_bytes()).unwrap();
    let mut buf = [0u8; 8];
    b.read(x, &mut buf).unwrap();
    assert_eq!(u64::from_le_bytes(buf), 7, "both cores map the one frame");
    b.write(x, &9u64.to_le_bytes()).unwrap();
    a.read(x, &mut buf).unwrap();
    assert_eq!(
        u64::from_le_bytes(buf),
        9,
        "a write through one core's copy is seen by the other"
    );
    a.munmap(x, P).unwrap();
    let st = space.stats();
    assert_eq!(st.shootdowns, 1, "{st:?}");
    assert_eq!(st.shootdown_targets, 1, "only b, not the idle core: {st:?}");
    assert_eq!(
        b.touch(x, Access::Read),
        Err(crate::Fault::Unmapped { addr: x })
    );
}

#[test]
fn each_core_faults_once_into_its_own_tree_and_tables_are_per_core() {
    let space = space(2);
    let mut a = space.attach().unwrap();
    let mut b = space.attach().unwrap();
    let x = map(&mut a, 4 * P);
    for p in 0..4 {
        a.touch(x + p * P, Access::Write).unwrap();
    }
    let before = space.stats();
    for p in 0..4 {
        b.touch(x + p * P, Access::Read).unwrap();
    }
    let after = space.stats();
    assert_eq!(
        after.faults - before.faults,
        4,
        "b fills its own tree once per page"
    );
    assert_eq!(after.fills, before.fills, "no new frame: b copies a's");
    let per_core = &after.page_table_bytes_per_core;
    assert!(
        per_core.len() >= 2 && per_core[0] > 0 && per_core[1] > 0,
        "{after:?}"
    );
    assert!(after.metadata_bytes > 0, "{after:?}");
}

#[test]
fn discarded_tables_are_refilled_by_faults_with_the_same_memory() {
    let space = space(2);
    let mut a = space.attach().unwrap();
    let x = map(&mut a, 8 * P);
    for p in 0..8u64 {
        a.write(x + p * P, &p.to_le_bytes()).unwrap();
    }
    let freed = a.discard_page_tables().unwrap();
    assert!(freed > 0, "the core had tables of its own");
    let faults = space.stats().faults;
    for p in 0..8u64 {
        let mut buf = [0u8; 8];
        a.read(x + p * P, &mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), p, "contents survive a discard");
    }
    assert_eq!(
        space.stats().faults - faults,
        8,
        "every page faulted back in"
    );
    a.munmap(x, 8 * P).unwrap();
    assert_eq!(space.stats().frames_in_use, 0);
}

#[test]
fn dontneed_and_mprotect_reach_every_copy() {
    let space = space(2);
    let mut a = space.attach().unwrap();
    let mut b = space.attach().unwrap();
    let x = map(&mut a, 2 * P);
    a.write(x, &5u64.to_le_bytes()).unwrap();
    b.touch(x, Access::Read).unwrap();
    a.madvise(x, 2 * P, Advice::DONTNEED).unwrap();
    let mut buf = [0u8; 8];
    b.read(x, &mut buf).unwrap();
    assert_eq!(u64::from_le_bytes(buf), 0, "DONTNEED dropped b's copy too");
    b.write(x, &3u64.to_le_bytes()).unwrap();
    a.mprotect(x, 2 * P, Prot::READ).unwrap();
    assert!(
        b.touch(x, Access::Write).is_err(),
        "b's copy lost its write right"
    );
    a.read(x, &mut buf).unwrap();
    assert_eq!(u64::from_le_bytes(buf), 3);
}

#[test]
fn maps_are_linux_regions_with_merges() {
    let space = space(1);
    let mut a = space.attach().unwrap();
    let rw = Prot::READ | Prot::WRITE;
    let x = map(&mut a, 4 * P);
    a.mprotect(x + P, P, Prot::READ).unwrap();
    assert_eq!(space.maps().len(), 3);
    a.mprotect(x + P, P, rw).unwrap();
    assert_eq!(space.maps().len(), 1, "Linux merges the pieces back");
    a.munmap(x + P, 2 * P).unwrap();
    let m = space.maps();
    assert_eq!((m.len(), m[0].start, m[1].end), (2, x, x + 4 * P));
}

#[test]
/// The window holds only the range and a page on each side; the gap beyond the space's bounds
/// counts as free (nothing can be mapped there), so the tables straddling them go too.
fn a_munmap_of_the_whole_space_frees_every_table_of_every_tree() {
    let space = AddressSpace::builder()
        .design(Design::Radix)
        .address_range(0x1_0000, 0x1_0000 + 256 * P)
        .memory(16 * P)
        .max_map_count(100)
        .max_cores(16)
        .tlb_entries(8)
        .frame_batch(4)
        .build()
        .unwrap();
    let mut a = space.attach().unwrap();
    let x = map(&mut a, 4 * P);
    a.write(x, &1u64.to_le_bytes()).unwrap();
    a.munmap(x, 4 * P).unwrap();
    let c = space.config().clone();
    assert_eq!(
        space.stats().page_tables,
        4,
        "a small munmap keeps the tables"
    );
    a.munmap(c.min_addr, c.max_addr - c.min_addr).unwrap();
    let st = space.stats();
    assert_eq!((st.page_tables, st.metadata_bytes > 0), (1, true), "{st:?}");
}
