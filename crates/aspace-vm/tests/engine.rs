//! Engine tests through the public API: the access path (round trips across pages, faults,
//! TLB-cached translations seeing munmap and mprotect), Linux region behaviour the handle
//! exposes (merging, splitting, holes, limits), and core attach/detach.

#![cfg(not(loom))]

use aspace_vm::{
    Access, AddressSpace, Advice, Arenas, Config, ConfigField, Design, Fault, Limit, MapFlags,
    Prot, VmError, PAGE_SIZE,
};

const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;
const P: u64 = PAGE_SIZE;

fn space(memory: u64) -> AddressSpace {
    AddressSpace::builder()
        .design(Design::Coarse)
        .memory(memory)
        .build()
        .unwrap()
}

#[test]
fn write_then_read_round_trips_across_pages() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 3 * P, Prot::READ_WRITE, PA).unwrap();
    let data: Vec<u8> = (0..2 * P as usize + 100).map(|i| i as u8).collect();
    c.write(a + 50, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    c.read(a + 50, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(s.stats().frames_in_use, 3);
    assert_eq!(s.stats().fills, 3);
}

#[test]
fn write_only_page_is_readable_before_its_first_write_like_x86() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::WRITE, PA).unwrap();
    let mut buf = [1u8; 8];
    c.read(a, &mut buf).unwrap();
    assert_eq!(buf, [0; 8]);
    c.touch(a, Access::Read).unwrap();
    assert_eq!(c.touch(a, Access::Exec), Err(Fault::Protection { addr: a }));
    c.write(a, &[9; 8]).unwrap();
    c.read(a, &mut buf).unwrap();
    assert_eq!(buf, [9; 8]);
}

#[test]
fn written_region_made_read_only_stays_apart_from_a_fresh_read_only_neighbour() {
    // Linux: VM_ACCOUNT survives mprotect(PROT_READ) once the region has an anon_vma.
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let fixed = PA | MapFlags::FIXED;
    let a = c.mmap(0x10_0000, 2 * P, Prot::READ_WRITE, fixed).unwrap();
    c.write(a, &[1]).unwrap();
    c.mprotect(a, 2 * P, Prot::READ).unwrap();
    c.mmap(a + 2 * P, P, Prot::READ, fixed).unwrap();
    assert_eq!(s.maps().len(), 2);
    // Never written: mprotect drops VM_ACCOUNT and the neighbours merge.
    let b = c.mmap(0x20_0000, 2 * P, Prot::READ_WRITE, fixed).unwrap();
    c.mprotect(b, 2 * P, Prot::READ).unwrap();
    c.mmap(b + 2 * P, P, Prot::READ, fixed).unwrap();
    assert!(s.maps().iter().any(|r| r.start == b && r.end == b + 3 * P));
}

#[test]
fn fresh_pages_read_as_zero() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 2 * P, Prot::READ, PA).unwrap();
    let mut buf = vec![1u8; 2 * P as usize];
    c.read(a, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn read_after_munmap_faults_and_frames_are_returned() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[7; 4 * 4096]).unwrap();
    c.munmap(a, 4 * P).unwrap();
    assert_eq!(c.touch(a, Access::Read), Err(Fault::Unmapped { addr: a }));
    let st = s.stats();
    assert_eq!(st.frames_in_use, 0);
    assert_eq!(st.page_tables, 1, "tables freed with the neighbouring gaps");
    assert_eq!(st.regions, 0);
    // A lone core's write sections run in the light mode: its own TLB is flushed, no round is
    // sent (designs/coarse.rs, "One core"); the touch above faulting is what shows the flush.
    assert_eq!(st.shootdowns_sent, 0);
    // With a second core attached, the same munmap sends a round.
    let _other = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[7]).unwrap();
    c.munmap(a, P).unwrap();
    assert_eq!(c.touch(a, Access::Read), Err(Fault::Unmapped { addr: a }));
    assert_eq!(s.stats().shootdowns_sent, 1);
}

#[test]
fn protection_faults_are_accerr_and_unmapped_are_maperr() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ, PA).unwrap();
    let e = c.write(a + 8, &[1]).unwrap_err();
    assert_eq!(e, Fault::Protection { addr: a + 8 });
    assert_eq!(e.si_code(), Some(2));
    assert_eq!(c.touch(a, Access::Exec), Err(Fault::Protection { addr: a }));
    let none = c.mmap(0, P, Prot::NONE, PA).unwrap();
    assert_eq!(
        c.touch(none, Access::Read),
        Err(Fault::Protection { addr: none })
    );
    let e = c.touch(0x10_0000, Access::Read).unwrap_err();
    assert_eq!(e.si_code(), Some(1));
}

#[test]
fn a_failing_multi_page_write_writes_nothing() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 2 * P, Prot::READ_WRITE, PA).unwrap();
    c.mprotect(a + P, P, Prot::READ).unwrap();
    let e = c.write(a + P - 4, &[9; 8]).unwrap_err();
    assert_eq!(e, Fault::Protection { addr: a + P });
    let mut b = [1u8; 4];
    c.read(a + P - 4, &mut b).unwrap();
    assert_eq!(b, [0; 4]);
}

#[test]
fn mprotect_downgrade_is_seen_through_the_tlb() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[5]).unwrap();
    c.write(a, &[6]).unwrap(); // TLB hit
    c.mprotect(a, P, Prot::READ).unwrap();
    assert_eq!(c.write(a, &[7]), Err(Fault::Protection { addr: a }));
    let mut b = [0];
    c.read(a, &mut b).unwrap();
    assert_eq!(b, [6]);
    c.mprotect(a, P, Prot::READ_WRITE).unwrap();
    c.write(a, &[8]).unwrap();
    c.read(a, &mut b).unwrap();
    assert_eq!(b, [8]);
}

#[test]
fn mprotect_over_a_hole_applies_the_prefix_then_fails() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 3 * P, Prot::READ_WRITE, PA).unwrap();
    c.munmap(a + P, P).unwrap();
    assert_eq!(
        c.mprotect(a, 3 * P, Prot::READ),
        Err(VmError::OutOfMemory(Limit::Hole))
    );
    let m = s.maps();
    assert_eq!(m.len(), 2);
    assert_eq!((m[0].start, m[0].prot), (a, Prot::READ));
    assert_eq!((m[1].start, m[1].prot), (a + 2 * P, Prot::READ_WRITE));
    assert_eq!(
        c.mprotect(a + P, P, Prot::READ).unwrap_err().errno(),
        libc::ENOMEM
    );
}

#[test]
fn madvise_dontneed_zeroes_private_pages_even_across_a_hole() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 3 * P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[1]).unwrap();
    c.write(a + 2 * P, &[2]).unwrap();
    c.munmap(a + P, P).unwrap();
    assert_eq!(
        c.madvise(a, 3 * P, Advice::DONTNEED),
        Err(VmError::OutOfMemory(Limit::Hole))
    );
    let mut b = [9];
    c.read(a, &mut b).unwrap();
    assert_eq!(b, [0]);
    c.read(a + 2 * P, &mut b).unwrap();
    assert_eq!(b, [0]);
    assert_eq!(s.stats().frames_in_use, 2, "two fresh zero pages");
}

#[test]
fn madvise_dontneed_keeps_shared_contents() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let flags = MapFlags::SHARED | MapFlags::ANONYMOUS;
    let a = c.mmap(0, P, Prot::READ_WRITE, flags).unwrap();
    c.write(a, &[7]).unwrap();
    c.madvise(a, P, Advice::DONTNEED).unwrap();
    let mut b = [0];
    c.read(a, &mut b).unwrap();
    assert_eq!(b, [7]);
}

#[test]
fn fixed_replaces_and_noreplace_fails_with_eexist() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0x20_0000, 2 * P, Prot::READ_WRITE, PA).unwrap();
    assert_eq!(a, 0x20_0000, "a free hint is honoured");
    c.write(a, &[3]).unwrap();
    assert_eq!(
        c.mmap(a, P, Prot::READ, PA | MapFlags::FIXED_NOREPLACE),
        Err(VmError::Exists)
    );
    assert_eq!(c.mmap(a, P, Prot::READ, PA | MapFlags::FIXED).unwrap(), a);
    let mut b = [9];
    c.read(a, &mut b).unwrap();
    assert_eq!(b, [0], "the replaced page's contents are gone");
    assert_eq!(s.maps().len(), 2);
    // An occupied hint is moved elsewhere.
    let h = c.mmap(a, P, Prot::READ, PA).unwrap();
    assert_ne!(h, a);
}

#[test]
fn adjacent_mappings_merge_in_maps() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    let b = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    assert_eq!(b + P, a, "top-down placement directly below");
    let m = s.maps();
    assert_eq!(m.len(), 1);
    assert_eq!((m[0].start, m[0].end), (b, a + P));
}

#[test]
fn map_count_limit_is_enomem_with_nothing_changed() {
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(1 << 20)
        .max_map_count(2)
        .build()
        .unwrap();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
    c.mprotect(a, P, Prot::READ).unwrap();
    assert_eq!(s.maps().len(), 2);
    let before = s.maps();
    assert_eq!(
        c.mprotect(a + 2 * P, P, Prot::READ),
        Err(VmError::OutOfMemory(Limit::MapCount))
    );
    assert_eq!(
        c.munmap(a + 2 * P, P),
        Err(VmError::OutOfMemory(Limit::MapCount))
    );
    assert_eq!(
        c.mmap(0, P, Prot::NONE, PA).unwrap_err(),
        VmError::OutOfMemory(Limit::MapCount)
    );
    // A mapping that merges with its neighbour needs no new region.
    c.mmap(0, P, Prot::READ, PA).unwrap();
    assert_eq!(s.maps().len(), 2);
    c.munmap(a - P, P).unwrap();
    assert_eq!(s.maps(), before);
}

#[test]
fn frame_exhaustion_is_enomem_and_changes_nothing() {
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(4 * P)
        .frame_batch(2)
        .build()
        .unwrap();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 8 * P, Prot::READ_WRITE, PA).unwrap();
    for i in 0..4 {
        c.write(a + i * P, &[1]).unwrap();
    }
    let before = s.stats();
    assert_eq!(
        c.write(a + 4 * P, &[1]),
        Err(Fault::OutOfMemory { addr: a + 4 * P })
    );
    let after = s.stats();
    assert_eq!(after.frames_in_use, before.frames_in_use);
    assert_eq!(s.maps().len(), 1);
    c.munmap(a, P).unwrap();
    c.write(a + 4 * P, &[1]).unwrap();
}

#[test]
fn populate_fills_every_page() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    c.mmap(0, 5 * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
        .unwrap();
    assert_eq!(s.stats().frames_in_use, 5);
    assert_eq!(s.stats().faults, 0);
}

#[test]
fn detach_returns_cached_frames_and_frees_the_slot() {
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(1 << 20)
        .max_cores(1)
        .build()
        .unwrap();
    let mut c = s.attach().unwrap();
    assert_eq!(s.attach().unwrap_err(), VmError::TooManyCores(1));
    let a = c.mmap(0, 8 * P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[1; 8 * 4096]).unwrap();
    c.munmap(a, 8 * P).unwrap();
    drop(c);
    let st = s.stats();
    assert_eq!(st.cores, 0);
    assert_eq!(st.frames_in_use, 0);
    assert_eq!(st.fills, 8, "counters survive the detach");
    let c2 = s.attach().unwrap();
    drop(c2);
}

#[test]
fn a_handle_moves_to_another_thread() {
    let s = space(1 << 20);
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[4]).unwrap();
    let mut c = std::thread::spawn(move || {
        let mut b = [0];
        c.read(a, &mut b).unwrap();
        assert_eq!(b, [4]);
        c
    })
    .join()
    .unwrap();
    c.munmap(a, P).unwrap();
}

#[test]
fn two_cores_see_each_others_writes_and_unmaps() {
    let s = space(1 << 20);
    let mut c1 = s.attach().unwrap();
    let mut c2 = s.attach().unwrap();
    let a = c1.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    c1.write(a, &[1]).unwrap();
    let mut b = [0];
    c2.read(a, &mut b).unwrap(); // c2 caches the translation
    assert_eq!(b, [1]);
    c1.munmap(a, P).unwrap();
    assert_eq!(c2.read(a, &mut b), Err(Fault::Unmapped { addr: a }));
    assert!(s.stats().shootdowns_received >= 1);
}

/// `build` refuses `b` with `BadConfig { field, value }` (`EINVAL`), and so does `validate`: the
/// refusal comes before anything is allocated.
fn refused(b: aspace_vm::Builder, field: ConfigField, value: u64) {
    let err = b.config().validate().unwrap_err();
    assert!(
        matches!(err, VmError::BadConfig { field: f, value: v, .. } if f == field && v == value),
        "{field:?} = {value}: {err:?}"
    );
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(b.build().err(), Some(err));
}

/// `build` accepts `b` (the space is built, a core attaches and faults a page in).
fn accepted(b: aspace_vm::Builder) {
    let what = format!("{:?}", b.config());
    let s = b.build().unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[1]).unwrap();
}

#[test]
fn every_builder_value_is_accepted_at_its_bounds_and_refused_past_them_with_einval() {
    use ConfigField as F;
    let small = || AddressSpace::builder().memory(1 << 20);
    assert_eq!(Config::MAX_MEMORY, u64::from(u32::MAX) * P);
    assert_eq!(Config::MAX_ADDR_LIMIT, 1 << 48);
    assert_eq!(Config::MAX_MAP_COUNT, i32::MAX as usize);
    assert_eq!(Config::MAX_CORES, 8192);
    assert_eq!(Config::MAX_TLB_ENTRIES, 1 << 16);
    assert_eq!(Config::MAX_FRAME_BATCH, 1 << 16);
    assert_eq!(Config::MAX_ARENAS, 8192);

    // memory: 4096..=MAX_MEMORY. The top is only validated here: reserving 16 TiB may fail
    // with ENOMEM on a machine without overcommit, which is not a configuration error.
    accepted(AddressSpace::builder().memory(P));
    refused(AddressSpace::builder().memory(P - 1), F::Memory, P - 1);
    let top = AddressSpace::builder().memory(Config::MAX_MEMORY);
    top.config().validate().unwrap();
    match top.build() {
        Ok(_) | Err(VmError::OutOfMemory(Limit::Frames)) => {}
        Err(e) => panic!("memory at its bound: {e:?}"),
    }
    let over = Config::MAX_MEMORY + 1;
    refused(AddressSpace::builder().memory(over), F::Memory, over);
    refused(
        AddressSpace::builder().memory(u64::MAX),
        F::Memory,
        u64::MAX,
    );

    // address_range: multiples of 4096, min_addr < max_addr <= 2^48.
    accepted(small().address_range(0, 1 << 48));
    accepted(small().address_range((1 << 48) - 2 * P, (1 << 48) - P));
    refused(
        small().address_range(0, (1 << 48) + P),
        F::MaxAddr,
        (1 << 48) + P,
    );
    refused(small().address_range(0, !(P - 1)), F::MaxAddr, !(P - 1));
    refused(
        small().address_range(0, (1 << 40) + 1),
        F::MaxAddr,
        (1 << 40) + 1,
    );
    refused(small().address_range(P, P), F::MinAddr, P);
    refused(small().address_range(1, 1 << 40), F::MinAddr, 1);

    // max_map_count: 1..=2^31 - 1.
    accepted(small().max_map_count(1));
    accepted(small().max_map_count(Config::MAX_MAP_COUNT));
    refused(small().max_map_count(0), F::MaxMapCount, 0);
    let over = Config::MAX_MAP_COUNT + 1;
    refused(small().max_map_count(over), F::MaxMapCount, over as u64);
    refused(small().max_map_count(usize::MAX), F::MaxMapCount, u64::MAX);

    // max_cores: 1..=8192, under both designs (1 << 40 aborted on allocation, above u32::MAX
    // an assertion in the shootdown slots panicked).
    for &design in Design::ALL {
        let b = || small().design(design);
        accepted(b().max_cores(1));
        accepted(b().max_cores(Config::MAX_CORES));
        refused(b().max_cores(0), F::MaxCores, 0);
        refused(b().max_cores(Config::MAX_CORES + 1), F::MaxCores, 8193);
        refused(b().max_cores(1 << 40), F::MaxCores, 1 << 40);
        refused(b().max_cores(usize::MAX), F::MaxCores, u64::MAX);
    }

    // tlb_entries: a power of two in 1..=2^16 (a huge one aborted at attach).
    accepted(small().tlb_entries(1));
    accepted(small().tlb_entries(Config::MAX_TLB_ENTRIES));
    refused(small().tlb_entries(0), F::TlbEntries, 0);
    refused(small().tlb_entries(3), F::TlbEntries, 3);
    refused(small().tlb_entries(1 << 17), F::TlbEntries, 1 << 17);
    refused(small().tlb_entries(1 << 40), F::TlbEntries, 1 << 40);

    // frame_batch: 1..=2^16 (near usize::MAX, `2 * batch` overflowed; from 2^62 concurrent
    // refills could wrap the high-water index).
    accepted(small().frame_batch(1));
    accepted(small().frame_batch(Config::MAX_FRAME_BATCH));
    refused(small().frame_batch(0), F::FrameBatch, 0);
    let over = Config::MAX_FRAME_BATCH + 1;
    refused(small().frame_batch(over), F::FrameBatch, over as u64);
    refused(small().frame_batch(1 << 62), F::FrameBatch, 1 << 62);
    refused(small().frame_batch(usize::MAX), F::FrameBatch, u64::MAX);

    // arenas: count 1..=8192, size a positive multiple of 4096, the span inside the range.
    let (lo, hi) = (1 << 16, 1 << 40);
    let arenas = |count, size, base| {
        small()
            .design(Design::Interval)
            .address_range(lo, hi)
            .arenas(Arenas::Layout { count, size, base })
    };
    accepted(arenas(1, P, lo));
    accepted(arenas(Config::MAX_ARENAS, 64 * P, lo));
    accepted(arenas(1, hi - lo, lo));
    refused(arenas(0, P, lo), F::ArenaCount, 0);
    refused(arenas(Config::MAX_ARENAS + 1, P, lo), F::ArenaCount, 8193);
    refused(arenas(1 << 45, P, lo), F::ArenaCount, 1 << 45);
    refused(arenas(1, 0, lo), F::ArenaSize, 0);
    refused(arenas(1, P + 1, lo), F::ArenaSize, P + 1);
    refused(arenas(1, P, lo - P), F::ArenaBase, lo - P);
    refused(arenas(1, P, lo + 1), F::ArenaBase, lo + 1);
    refused(arenas(1, hi - lo + P, lo), F::ArenaBase, hi + P);
    refused(arenas(8192, !(P - 1), lo), F::ArenaBase, u64::MAX);
    // The layout is checked whatever the design.
    refused(
        small().arenas(Arenas::Layout {
            count: 0,
            size: P,
            base: 1 << 16,
        }),
        F::ArenaCount,
        0,
    );
}

/// Review of issue 22: `MAP_FIXED | MAP_POPULATE` over a populated mapping in a space whose
/// frames are all in use. Linux frees the old pages before it populates the new mapping, so
/// the populate finds them; here the zapped frames must be back in the core's cache before
/// `mmap`'s populate step, not only after the call returned.
#[test]
fn map_fixed_populate_over_a_full_pool_reuses_the_frames_it_unmapped() {
    for &design in Design::ALL {
        let s = AddressSpace::builder()
            .design(design)
            .memory(4 * P)
            .build()
            .unwrap();
        let mut c = s.attach().unwrap();
        let a = c
            .mmap(0, 4 * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
            .unwrap();
        assert_eq!(s.stats().frames_in_use, 4, "{design:?}");
        let fixed = PA | MapFlags::FIXED | MapFlags::POPULATE;
        c.mmap(a, 4 * P, Prot::READ_WRITE, fixed).unwrap();
        assert_eq!(
            s.stats().frames_in_use,
            4,
            "{design:?}: MAP_POPULATE left pages unpopulated"
        );
        let faults = s.stats().faults;
        c.write(a, &[1; 4 * 4096]).unwrap();
        assert_eq!(s.stats().faults, faults, "{design:?}");
    }
}
