//! Unit tests of the `interval` design's internals after concurrent use: the skiplist's own
//! invariants, Linux's region invariants (no overlap, no unmerged mergeable neighbours), and
//! the region counter equal to the number of regions (so the limit it enforces is exact).

use super::IntervalDesign;
use crate::config::Arenas;
use crate::designs::Designs;
use crate::region::store::{check_regions, RegionRef};
use crate::types::{MapFlags, Prot, PAGE_SIZE as P};
use crate::{AddressSpace, Design};
use aspace_map::{IntervalMap, KEY_SPACE_END};
use std::ops::ControlFlow;

fn design(space: &AddressSpace) -> &IntervalDesign {
    match &*space.space.design {
        Designs::Interval(d) => d,
        other => panic!("not the interval design: {other:?}"),
    }
}

/// Checks every invariant of the design at rest.
fn check(d: &IntervalDesign) {
    d.map.check_invariants();
    let reader = d.map.domain().register();
    let guard = reader.read();
    let mut regions = Vec::new();
    d.map
        .visit(0..KEY_SPACE_END, &guard, &mut |iv, v| {
            regions.push(RegionRef::new(iv.start, iv.end, v).region());
            ControlFlow::Continue(())
        })
        .unwrap();
    check_regions(regions.iter().copied());
    assert_eq!(
        d.count.sum(),
        d.map.len() as u64,
        "the region counter is exact"
    );
}

#[test]
fn concurrent_mmaps_edits_and_faults_keep_every_invariant_and_the_count_exact() {
    let base = 0x40_0000;
    let space = AddressSpace::builder()
        .design(Design::Interval)
        .arenas(Arenas::Layout {
            count: 2,
            size: 128 * P,
            base,
        })
        .address_range(base, base + 1024 * P)
        .memory(512 * P)
        .max_cores(3)
        .build()
        .unwrap();
    let pa = MapFlags::PRIVATE_ANONYMOUS;
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let mut h = space.attach().unwrap();
            s.spawn(move || {
                let shared = base + 512 * P;
                for i in 0..400u64 {
                    // The space fills up (half the mappings stay): ENOMEM is fine then.
                    if let Ok(a) = h.mmap(0, (1 + i % 3) * P, Prot::READ_WRITE, pa) {
                        h.write(a, &[1]).unwrap();
                        if i % 2 == 0 {
                            h.munmap(a, P).unwrap();
                        }
                    }
                    let off = ((i * 7 + t) % 24) * P;
                    let _ = h.mmap(shared + off, 2 * P, Prot::READ_WRITE, pa | MapFlags::FIXED);
                    let _ = h.mprotect(shared + off + P, P, Prot::READ);
                    let _ = h.write(shared + off, &[2]);
                    if i % 5 == 0 {
                        let _ = h.munmap(shared + off, 3 * P);
                    }
                }
            });
        }
    });
    check(design(&space));
    let mut h = space.attach().unwrap();
    h.munmap(base, 1024 * P).unwrap();
    check(design(&space));
    assert_eq!(design(&space).map.len(), 0);
    assert_eq!(space.stats().page_tables, 1);
}

#[test]
fn auto_arenas_are_aligned_so_that_no_page_table_serves_two() {
    for cores in [1, 2, 4, 64, 128, 256] {
        let config = crate::Config {
            max_cores: cores,
            ..crate::Config::default()
        };
        let l = super::arena_layout(&config).expect("the default range has arenas");
        let raw = (config.max_addr - config.min_addr) / 32 / l.count as u64;
        // 8 GiB: a line of level-3 entries (the default range gives 128 arenas >= 24 GiB).
        let align: u64 = 8 << 30;
        assert_eq!(l.base % align, 0, "{cores} cores: base {:#x}", l.base);
        assert_eq!(l.size % align, 0, "{cores} cores: size {:#x}", l.size);
        assert!(
            l.size * 3 >= raw * 2,
            "{cores} cores: alignment cost over a third"
        );
        assert!(l.base + l.count as u64 * l.size <= config.max_addr);
    }
    // A small range: aligned to leaves (2 MiB) or pages, never off when 64 pages fit.
    let config = crate::Config {
        max_cores: 4,
        min_addr: 0x1_0000,
        max_addr: 1 << 34,
        ..crate::Config::default()
    };
    let l = super::arena_layout(&config).unwrap();
    assert_eq!((l.base % (2 << 20), l.size % (2 << 20)), (0, 0));
}
