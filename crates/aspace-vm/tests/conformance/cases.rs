//! The conformance suite's explicit edge cases: one function of the design each, named for the
//! behaviour it checks, instantiated as a `#[test]` by `address_space_conformance!`.
//!
//! Not for: random sequences (`ops.rs`, `harness.rs`) or concurrency beyond a few attached cores
//! (`stress.rs`).

use super::checks::{empty_tables, lines, unmap_everything_and_check_empty};
use super::harness::{fixed, space, PA, UNKNOWN_MAP_BIT, UNKNOWN_PROT_BIT};
use super::model::{self, P};
use aspace_vm::{
    Access, AddressSpace, Advice, CoreHandle, Design, Fault, MapFlags, Prot, RegionInfo, Sharing,
};

/// A space over `[64 KiB, 64 KiB + 256 pages)` with 64 frames and default limits.
fn small(design: Design) -> (AddressSpace, CoreHandle) {
    let s = space(design, 0x1_0000, 0x1_0000 + 256 * P, 64, 65_530);
    let h = s.attach().expect("attach");
    (s, h)
}

/// Reads one byte.
fn byte(h: &mut CoreHandle, addr: u64) -> Result<u8, Fault> {
    let mut b = [0u8; 1];
    h.read(addr, &mut b).map(|()| b[0])
}

fn region(start: u64, end: u64, prot: Prot) -> RegionInfo {
    RegionInfo {
        start,
        end,
        prot,
        sharing: Sharing::Private,
        offset: 0,
        inode: 0,
    }
}

pub fn fixed_mmap_replaces_and_zeroes(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    assert_eq!(h.mmap(a, 4 * P, Prot::READ_WRITE, fixed(PA)), Ok(a));
    h.write(a, &[7u8; 4 * P as usize]).unwrap();
    let before = s.stats().frames_in_use;
    assert_eq!(before, 4);
    assert_eq!(h.mmap(a + P, 2 * P, Prot::READ, fixed(PA)), Ok(a + P));
    assert_eq!(
        s.maps(),
        vec![
            region(a, a + P, Prot::READ_WRITE),
            region(a + P, a + 3 * P, Prot::READ),
            region(a + 3 * P, a + 4 * P, Prot::READ_WRITE)
        ]
    );
    assert_eq!(byte(&mut h, a), Ok(7));
    assert_eq!(byte(&mut h, a + P), Ok(0), "replaced page reads zero");
    assert_eq!(byte(&mut h, a + 3 * P - 1), Ok(0));
    assert_eq!(byte(&mut h, a + 3 * P), Ok(7));
    assert!(
        s.stats().frames_in_use <= 4,
        "the replaced pages' frames were freed: {:?}",
        s.stats()
    );
    assert_eq!(h.write(a + P, &[1]), Err(Fault::Protection { addr: a + P }));
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn fixed_noreplace_fails_with_eexist_and_changes_nothing(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    assert_eq!(
        h.mmap(a, 2 * P, Prot::READ_WRITE, PA | MapFlags::FIXED_NOREPLACE),
        Ok(a)
    );
    h.write(a, &[9u8; 2 * P as usize]).unwrap();
    let maps = s.maps();
    for (addr, len) in [(a, P), (a + P, 4 * P), (a - P, 2 * P), (a - 3 * P, 8 * P)] {
        let r = h.mmap(addr, len, Prot::READ, PA | MapFlags::FIXED_NOREPLACE);
        assert_eq!(
            r.map_err(|e| e.errno()),
            Err(libc::EEXIST),
            "noreplace at {addr:#x}+{len:#x}"
        );
    }
    assert_eq!(s.maps(), maps);
    assert_eq!(byte(&mut h, a + P), Ok(9));
    assert_eq!(
        h.mmap(
            a + 2 * P,
            P,
            Prot::READ_WRITE,
            PA | MapFlags::FIXED_NOREPLACE
        ),
        Ok(a + 2 * P)
    );
    assert_eq!(
        s.maps(),
        vec![region(a, a + 3 * P, Prot::READ_WRITE)],
        "merged with its neighbour"
    );
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn free_hint_is_honoured(design: Design) {
    let (s, mut h) = small(design);
    let hint = 0x8_0000;
    assert_eq!(h.mmap(hint, 3 * P, Prot::READ_WRITE, PA), Ok(hint));
    // An unaligned hint is rounded down.
    assert_eq!(
        h.mmap(hint + 5 * P + 123, P, Prot::READ, PA),
        Ok(hint + 5 * P)
    );
    // An occupied hint is not honoured, and the result is free.
    let other = h
        .mmap(hint + P, 2 * P, Prot::READ, PA)
        .expect("mmap anywhere");
    assert!(
        other + 2 * P <= hint || other >= hint + 3 * P,
        "{other:#x} overlaps"
    );
    assert!(other != hint + 5 * P && (other + 2 * P <= hint + 5 * P || other >= hint + 6 * P));
    assert_eq!(s.maps().len(), 3);
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn partial_munmap_splits_and_mprotect_makes_three_regions(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    assert_eq!(h.mmap(a, 8 * P, Prot::READ_WRITE, fixed(PA)), Ok(a));
    h.write(a, &[3u8; 8 * P as usize]).unwrap();
    assert_eq!(h.mprotect(a + 2 * P, 2 * P, Prot::READ), Ok(()));
    assert_eq!(
        s.maps(),
        vec![
            region(a, a + 2 * P, Prot::READ_WRITE),
            region(a + 2 * P, a + 4 * P, Prot::READ),
            region(a + 4 * P, a + 8 * P, Prot::READ_WRITE)
        ],
        "mprotect of the middle: 3 regions from 1"
    );
    assert_eq!(s.stats().regions, 3);
    assert_eq!(
        h.write(a + 3 * P, &[1]),
        Err(Fault::Protection { addr: a + 3 * P })
    );
    assert_eq!(h.mprotect(a + 2 * P, 2 * P, Prot::READ_WRITE), Ok(()));
    assert_eq!(
        s.maps(),
        vec![region(a, a + 8 * P, Prot::READ_WRITE)],
        "merged back"
    );
    assert_eq!(h.munmap(a + 3 * P, 2 * P), Ok(()));
    assert_eq!(
        s.maps(),
        vec![
            region(a, a + 3 * P, Prot::READ_WRITE),
            region(a + 5 * P, a + 8 * P, Prot::READ_WRITE)
        ]
    );
    assert_eq!(
        byte(&mut h, a + 4 * P),
        Err(Fault::Unmapped { addr: a + 4 * P })
    );
    assert_eq!(
        h.write(a + 3 * P - 1, &[1, 2]),
        Err(Fault::Unmapped { addr: a + 3 * P })
    );
    assert_eq!(
        byte(&mut h, a + 3 * P - 1),
        Ok(3),
        "a failed write copied nothing"
    );
    assert_eq!(byte(&mut h, a + 5 * P), Ok(3));
    assert_eq!(s.stats().frames_in_use, 6);
    // Unmapping nothing is fine.
    assert_eq!(h.munmap(a + 3 * P, 2 * P), Ok(()));
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn mprotect_over_a_hole_changes_the_prefix_and_fails_enomem(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    assert_eq!(h.mmap(a, 2 * P, Prot::READ_WRITE, fixed(PA)), Ok(a));
    assert_eq!(
        h.mmap(a + 3 * P, 2 * P, Prot::READ_WRITE, fixed(PA)),
        Ok(a + 3 * P)
    );
    let err = h.mprotect(a, 5 * P, Prot::READ).map_err(|e| e.errno());
    assert_eq!(err, Err(libc::ENOMEM));
    assert_eq!(
        s.maps(),
        vec![
            region(a, a + 2 * P, Prot::READ),
            region(a + 3 * P, a + 5 * P, Prot::READ_WRITE)
        ],
        "Linux changes the regions before the hole"
    );
    // Starting in a hole: nothing changes.
    let maps = s.maps();
    assert_eq!(
        h.mprotect(a + 2 * P, 3 * P, Prot::NONE)
            .map_err(|e| e.errno()),
        Err(libc::ENOMEM)
    );
    assert_eq!(
        h.mprotect(a - P, 3 * P, Prot::NONE).map_err(|e| e.errno()),
        Err(libc::ENOMEM)
    );
    assert_eq!(s.maps(), maps);
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn prot_none_and_missing_rights_fault_with_protection(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    assert_eq!(h.mmap(a, P, Prot::NONE, fixed(PA)), Ok(a));
    assert_eq!(h.mmap(a + P, P, Prot::READ, fixed(PA)), Ok(a + P));
    assert_eq!(h.mmap(a + 2 * P, P, Prot::WRITE, fixed(PA)), Ok(a + 2 * P));
    assert_eq!(h.mmap(a + 3 * P, P, Prot::EXEC, fixed(PA)), Ok(a + 3 * P));
    for access in [Access::Read, Access::Write, Access::Exec] {
        assert_eq!(
            h.touch(a + 5, access),
            Err(Fault::Protection { addr: a + 5 })
        );
    }
    assert_eq!(byte(&mut h, a), Err(Fault::Protection { addr: a }));
    assert_eq!(h.touch(a + P, Access::Read), Ok(()));
    assert_eq!(
        h.touch(a + P, Access::Write),
        Err(Fault::Protection { addr: a + P })
    );
    assert_eq!(
        h.touch(a + P, Access::Exec),
        Err(Fault::Protection { addr: a + P })
    );
    assert_eq!(
        h.write(a + 2 * P, &[5]),
        Ok(()),
        "write-only page is writable"
    );
    assert_eq!(byte(&mut h, a + 2 * P), Ok(5), "and readable (x86)");
    assert_eq!(
        h.touch(a + 2 * P, Access::Exec),
        Err(Fault::Protection { addr: a + 2 * P })
    );
    assert_eq!(h.touch(a + 3 * P, Access::Exec), Ok(()));
    assert_eq!(
        h.touch(a + 3 * P, Access::Read),
        Ok(()),
        "exec implies read (x86)"
    );
    assert_eq!(
        h.touch(a + 3 * P, Access::Write),
        Err(Fault::Protection { addr: a + 3 * P })
    );
    assert_eq!(
        h.touch(a + 4 * P, Access::Read),
        Err(Fault::Unmapped { addr: a + 4 * P })
    );
    assert_eq!(Fault::Unmapped { addr: 0 }.si_code(), Some(1));
    // A read spanning a readable and a PROT_NONE page faults at the second page.
    assert_eq!(h.mprotect(a, P, Prot::READ), Ok(()));
    assert_eq!(h.mprotect(a + P, P, Prot::NONE), Ok(()));
    let mut buf = [0u8; 16];
    assert_eq!(
        h.read(a + P - 8, &mut buf),
        Err(Fault::Protection { addr: a + P })
    );
    // Contents survive PROT_NONE.
    assert_eq!(h.mprotect(a + 2 * P, P, Prot::NONE), Ok(()));
    assert_eq!(
        byte(&mut h, a + 2 * P),
        Err(Fault::Protection { addr: a + 2 * P })
    );
    assert_eq!(h.mprotect(a + 2 * P, P, Prot::READ), Ok(()));
    assert_eq!(byte(&mut h, a + 2 * P), Ok(5));
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn dontneed_zeroes_private_pages_and_frees_their_frames(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    assert_eq!(h.mmap(a, 4 * P, Prot::READ_WRITE, fixed(PA)), Ok(a));
    h.write(a, &[4u8; 4 * P as usize]).unwrap();
    assert_eq!(s.stats().frames_in_use, 4);
    assert_eq!(h.madvise(a + P, 2 * P, Advice::DONTNEED), Ok(()));
    assert_eq!(s.stats().frames_in_use, 2);
    assert_eq!(byte(&mut h, a + P), Ok(0));
    assert_eq!(byte(&mut h, a + 3 * P - 1), Ok(0));
    assert_eq!(byte(&mut h, a), Ok(4));
    assert_eq!(byte(&mut h, a + 3 * P), Ok(4));
    assert_eq!(
        s.maps(),
        vec![region(a, a + 4 * P, Prot::READ_WRITE)],
        "DONTNEED does not split"
    );
    // Over a hole: the mapped parts are dropped, then ENOMEM.
    h.write(a, &[4u8; 4 * P as usize]).unwrap();
    assert_eq!(h.munmap(a + P, P), Ok(()));
    let r = h.madvise(a, 4 * P, Advice::DONTNEED).map_err(|e| e.errno());
    assert_eq!(r, Err(libc::ENOMEM));
    assert_eq!(byte(&mut h, a), Ok(0));
    assert_eq!(byte(&mut h, a + 3 * P), Ok(0));
    // Also on PROT_NONE pages.
    h.write(a, &[4u8; 1]).unwrap();
    assert_eq!(h.mprotect(a, P, Prot::NONE), Ok(()));
    assert_eq!(h.madvise(a, P, Advice::DONTNEED), Ok(()));
    assert_eq!(h.mprotect(a, P, Prot::READ), Ok(()));
    assert_eq!(byte(&mut h, a), Ok(0));
    assert_eq!(
        h.madvise(a + 5 * P, P, Advice::DONTNEED)
            .map_err(|e| e.errno()),
        Err(libc::ENOMEM)
    );
    assert_eq!(
        h.madvise(a, P, Advice::from_raw(12345))
            .map_err(|e| e.errno()),
        Err(libc::EINVAL)
    );
    unmap_everything_and_check_empty(&s, &mut h);
}

/// Errno of each bad call, and that none changed anything.
pub fn bad_input_gets_linux_errno_and_changes_nothing(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    let top = s.config().max_addr;
    assert_eq!(h.mmap(a, 4 * P, Prot::READ_WRITE, fixed(PA)), Ok(a));
    h.write(a, &[6u8; 4 * P as usize]).unwrap();
    let maps = s.maps();
    let frames = s.stats().frames_in_use;
    let rw = Prot::READ_WRITE;
    let e = |r: Result<(), aspace_vm::VmError>| r.map_err(|e| e.errno());
    let m = |r: Result<u64, aspace_vm::VmError>| r.map(|_| ()).map_err(|e| e.errno());
    let bad = [
        // Zero length.
        (m(h.mmap(a, 0, rw, fixed(PA))), libc::EINVAL, "mmap len 0"),
        (m(h.mmap(0, 0, rw, PA)), libc::EINVAL, "mmap len 0 anywhere"),
        (e(h.munmap(a, 0)), libc::EINVAL, "munmap len 0"),
        // Unaligned.
        (
            m(h.mmap(a + 1, P, rw, fixed(PA))),
            libc::EINVAL,
            "mmap fixed unaligned",
        ),
        (
            m(h.mmap(a + 1, P, rw, PA | MapFlags::FIXED_NOREPLACE)),
            libc::EINVAL,
            "noreplace unaligned",
        ),
        (e(h.munmap(a + 1, P)), libc::EINVAL, "munmap unaligned"),
        (
            e(h.mprotect(a + 1, P, Prot::NONE)),
            libc::EINVAL,
            "mprotect unaligned",
        ),
        (
            e(h.mprotect(a + 1, 0, Prot::NONE)),
            libc::EINVAL,
            "mprotect unaligned len 0",
        ),
        (
            e(h.madvise(a + 1, P, Advice::DONTNEED)),
            libc::EINVAL,
            "madvise unaligned",
        ),
        // Past the top / overflow.
        (
            m(h.mmap(a, u64::MAX - P + 2, rw, fixed(PA))),
            libc::ENOMEM,
            "mmap len wraps",
        ),
        (
            m(h.mmap(0, u64::MAX - 2 * P, rw, PA)),
            libc::ENOMEM,
            "mmap len > space",
        ),
        (
            m(h.mmap(top - P, 2 * P, rw, fixed(PA))),
            libc::ENOMEM,
            "mmap fixed past the top",
        ),
        (
            m(h.mmap(top, P, rw, fixed(PA))),
            libc::ENOMEM,
            "mmap fixed at the top",
        ),
        (
            m(h.mmap(top - P + 1, 2 * P, rw, fixed(PA))),
            libc::ENOMEM,
            "past the top before unaligned",
        ),
        (
            e(h.munmap(a, u64::MAX - P)),
            libc::EINVAL,
            "munmap len wraps",
        ),
        (
            e(h.munmap(top - P, 2 * P)),
            libc::EINVAL,
            "munmap past the top",
        ),
        (e(h.munmap(top, P)), libc::EINVAL, "munmap at the top"),
        (
            e(h.mprotect(a, u64::MAX - P, Prot::NONE)),
            libc::ENOMEM,
            "mprotect end wraps",
        ),
        (
            e(h.mprotect(a, u64::MAX - 1, Prot::NONE)),
            libc::ENOMEM,
            "mprotect len rounds to 0",
        ),
        (
            e(h.madvise(a, u64::MAX - P, Advice::DONTNEED)),
            libc::EINVAL,
            "madvise end wraps",
        ),
        (
            e(h.madvise(a, u64::MAX - 1, Advice::DONTNEED)),
            libc::EINVAL,
            "madvise len rounds to 0",
        ),
        // Unknown or bad bits.
        (
            m(h.mmap(a, P, rw, MapFlags::ANONYMOUS | MapFlags::FIXED)),
            libc::EINVAL,
            "no MAP_TYPE",
        ),
        (
            m(h.mmap(
                a,
                P,
                rw,
                MapFlags::SHARED_VALIDATE | MapFlags::ANONYMOUS | MapFlags::FIXED,
            )),
            libc::EINVAL,
            "anon SHARED_VALIDATE",
        ),
        (
            m(h.mmap(a, P, rw, MapFlags::from_bits_retain(0x0f | 0x20 | 0x10))),
            libc::EINVAL,
            "MAP_TYPE 0xf",
        ),
        (
            m(h.mmap(a, P, rw, fixed(MapFlags::PRIVATE))),
            libc::EBADF,
            "not anonymous",
        ),
        (
            m(h.mmap(a, 0, rw, MapFlags::PRIVATE)),
            libc::EBADF,
            "not anonymous before len 0",
        ),
        (
            e(h.mprotect(a, P, Prot::from_bits_retain(0x1 | UNKNOWN_PROT_BIT))),
            libc::EINVAL,
            "mprotect unknown bit",
        ),
        (
            e(h.mprotect(a, P, Prot::from_bits_retain(0x1 | model::PROT_GROWSDOWN))),
            libc::EINVAL,
            "mprotect GROWSDOWN",
        ),
        (
            e(h.madvise(a, P, Advice::from_raw(12345))),
            libc::EINVAL,
            "madvise unknown advice",
        ),
        (
            e(h.madvise(a, 0, Advice::from_raw(12345))),
            libc::EINVAL,
            "unknown advice before len 0",
        ),
    ];
    for (got, errno, what) in bad {
        assert_eq!(got, Err(errno), "{what}");
    }
    assert_eq!(s.maps(), maps, "bad input changed the regions");
    assert_eq!(s.stats().frames_in_use, frames);
    assert_eq!(byte(&mut h, a + 3 * P), Ok(6));
    // Zero lengths that Linux accepts.
    assert_eq!(h.mprotect(a, 0, Prot::NONE), Ok(()));
    assert_eq!(h.madvise(a, 0, Advice::DONTNEED), Ok(()));
    assert_eq!(s.maps(), maps);
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn unknown_bits_linux_ignores_are_ignored(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    let unknown = MapFlags::from_bits_retain(UNKNOWN_MAP_BIT);
    assert_eq!(
        h.mmap(a, P, Prot::READ_WRITE, fixed(PA) | unknown),
        Ok(a),
        "unknown MAP_ bit"
    );
    let prot = Prot::from_bits_retain(Prot::READ.bits() | UNKNOWN_PROT_BIT);
    assert_eq!(
        h.mmap(a + P, P, prot, fixed(PA)),
        Ok(a + P),
        "unknown PROT_ bit in mmap"
    );
    assert_eq!(
        s.maps(),
        vec![
            region(a, a + P, Prot::READ_WRITE),
            region(a + P, a + 2 * P, Prot::READ)
        ],
        "the unknown bits are not kept"
    );
    let sem = Prot::from_bits_retain(Prot::READ_WRITE.bits() | model::PROT_SEM);
    assert_eq!(
        h.mprotect(a + P, P, sem),
        Ok(()),
        "PROT_SEM is accepted by mprotect"
    );
    assert_eq!(s.maps(), vec![region(a, a + 2 * P, Prot::READ_WRITE)]);
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn max_map_count_gives_enomem_and_changes_nothing(design: Design) {
    let s = space(design, 0x1_0000, 0x1_0000 + 64 * P, 64, 3);
    let mut h = s.attach().unwrap();
    let a = 0x2_0000;
    for i in 0..3 {
        assert_eq!(
            h.mmap(a + 4 * i * P, 3 * P, Prot::READ_WRITE, fixed(PA)),
            Ok(a + 4 * i * P)
        );
    }
    h.write(a, &[8u8; 3 * P as usize]).unwrap();
    let maps = s.maps();
    assert_eq!(maps.len(), 3);
    let enomem = Err(libc::ENOMEM);
    assert_eq!(
        h.mmap(a + 20 * P, P, Prot::READ, fixed(PA))
            .map_err(|e| e.errno()),
        enomem
    );
    assert_eq!(
        h.mmap(0, P, Prot::READ, PA).map_err(|e| e.errno()),
        enomem,
        "anywhere"
    );
    assert_eq!(
        h.munmap(a + P, P).map(|()| 0).map_err(|e| e.errno()),
        enomem,
        "munmap that splits"
    );
    assert_eq!(
        h.mprotect(a + P, P, Prot::READ)
            .map(|()| 0)
            .map_err(|e| e.errno()),
        enomem,
        "mprotect that splits"
    );
    assert_eq!(
        h.mmap(a + P, P, Prot::READ, fixed(PA))
            .map_err(|e| e.errno()),
        enomem,
        "fixed that splits"
    );
    assert_eq!(s.maps(), maps, "nothing changed");
    assert_eq!(byte(&mut h, a + P), Ok(8));
    // What does not add a region still works at the limit.
    assert_eq!(
        h.mmap(a + 3 * P, P, Prot::READ_WRITE, fixed(PA)),
        Ok(a + 3 * P),
        "merges"
    );
    assert_eq!(h.munmap(a, P), Ok(()), "trims an end");
    assert_eq!(h.mprotect(a + P, P, Prot::READ), Ok(()), "changes an end");
    assert_eq!(
        h.mprotect(a + P, 3 * P, Prot::READ_WRITE),
        Ok(()),
        "merges back"
    );
    assert_eq!(
        h.mmap(a + 8 * P, 3 * P, Prot::READ, fixed(PA)),
        Ok(a + 8 * P),
        "replaces a whole region"
    );
    assert_eq!(
        s.stats().regions,
        2,
        "the mmap at a + 3P joined two regions"
    );
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn address_space_size_limit_gives_enomem(design: Design) {
    let (min, max) = (0x1_0000, 0x1_0000 + 16 * P);
    let s = space(design, min, max, 64, 100);
    let mut h = s.attach().unwrap();
    let enomem = Err(libc::ENOMEM);
    assert_eq!(
        h.mmap(0, 17 * P, Prot::READ, PA).map_err(|e| e.errno()),
        enomem
    );
    let a = h.mmap(0, 10 * P, Prot::READ, PA).expect("fits");
    assert!(a >= min && a + 10 * P <= max);
    assert_eq!(
        h.mmap(0, 7 * P, Prot::READ, PA).map_err(|e| e.errno()),
        enomem,
        "only 6 pages left"
    );
    let b = h
        .mmap(0, 6 * P, Prot::READ_WRITE, PA)
        .expect("exactly fits");
    assert!(b >= min && b + 6 * P <= max && (b + 6 * P <= a || b >= a + 10 * P));
    assert_eq!(
        h.mmap(0, P, Prot::READ, PA).map_err(|e| e.errno()),
        enomem,
        "full"
    );
    assert_eq!(
        h.mmap(max, P, Prot::READ, fixed(PA)).map_err(|e| e.errno()),
        enomem
    );
    assert_eq!(
        h.mmap(max - P, 2 * P, Prot::READ, fixed(PA))
            .map_err(|e| e.errno()),
        enomem
    );
    let maps = s.maps();
    assert_eq!(maps.iter().map(|r| r.end - r.start).sum::<u64>(), 16 * P);
    assert_eq!(h.munmap(a, 10 * P), Ok(()));
    assert!(
        h.mmap(0, 10 * P, Prot::READ, PA).is_ok(),
        "space reusable after munmap"
    );
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn frame_exhaustion_faults_out_of_memory_and_frees_make_it_usable(design: Design) {
    let s = space(design, 0x1_0000, 0x1_0000 + 256 * P, 16, 100);
    let mut h = s.attach().unwrap();
    let total = s.stats().frames_total;
    assert_eq!(total, 16);
    let a = h.mmap(0, 2 * total * P, Prot::READ_WRITE, PA).unwrap();
    for i in 0..total {
        h.write(a + i * P, &[i as u8 + 1; 8])
            .unwrap_or_else(|f| panic!("page {i}: {f:?}"));
    }
    assert_eq!(s.stats().frames_in_use, total);
    let next = a + total * P;
    assert_eq!(h.write(next, &[1]), Err(Fault::OutOfMemory { addr: next }));
    assert_eq!(
        h.touch(next, Access::Write),
        Err(Fault::OutOfMemory { addr: next })
    );
    // A write spanning a backed and an unbackable page copies nothing.
    assert_eq!(
        h.write(next - 4, &[0xee; 8]),
        Err(Fault::OutOfMemory { addr: next })
    );
    assert_eq!(
        byte(&mut h, next - 4),
        Ok(0),
        "the backed page was not written either"
    );
    let maps = s.maps();
    assert_eq!(maps.len(), 1);
    let st = s.stats();
    assert_eq!(st.frames_in_use, total, "nothing changed: {st:?}");
    // A read of an untouched page either maps a zero page or also runs out.
    match byte(&mut h, next) {
        Ok(0) | Err(Fault::OutOfMemory { .. }) => {}
        other => panic!("read of an unbackable page: {other:?}"),
    }
    for i in 0..total {
        assert_eq!(byte(&mut h, a + i * P), Ok(i as u8 + 1));
    }
    // Freeing makes frames usable again: DONTNEED one, munmap two.
    assert_eq!(h.madvise(a, P, Advice::DONTNEED), Ok(()));
    assert_eq!(h.munmap(a + P, 2 * P), Ok(()));
    assert_eq!(s.stats().frames_in_use, total - 3);
    for i in 0..3 {
        h.write(next + i * P, &[0xaa])
            .unwrap_or_else(|f| panic!("after frees, page {i}: {f:?}"));
    }
    assert_eq!(s.stats().frames_in_use, total);
    assert_eq!(byte(&mut h, next + 2 * P), Ok(0xaa));
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn detach_returns_the_cores_cached_frames(design: Design) {
    let s = space(design, 0x1_0000, 0x1_0000 + 256 * P, 16, 100);
    let total = s.stats().frames_total;
    fn cycle(h: &mut CoreHandle, total: u64) {
        let a = h.mmap(0, total * P, Prot::READ_WRITE, PA).unwrap();
        for i in 0..total {
            h.write(a + i * P, &[1])
                .unwrap_or_else(|f| panic!("page {i} of {total}: {f:?}"));
        }
        assert_eq!(h.munmap(a, total * P), Ok(()));
    }
    for _ in 0..3 {
        let mut h = s.attach().unwrap();
        cycle(&mut h, total);
        assert_eq!(s.stats().frames_in_use, 0);
        assert_eq!(s.stats().cores, 1);
        drop(h);
        assert_eq!(s.stats().cores, 0);
    }
    // Two cores in turn on other threads: each gets every frame once the other detached.
    for _ in 0..2 {
        let s2 = s.clone();
        std::thread::spawn(move || {
            let mut h = s2.attach().unwrap();
            cycle(&mut h, total);
        })
        .join()
        .unwrap();
    }
    let mut h = s.attach().unwrap();
    cycle(&mut h, total);
    unmap_everything_and_check_empty(&s, &mut h);
}

pub fn many_cores_attached_work_in_parallel(design: Design) {
    let n = 16u64;
    let s = space(design, 0x1_0000, 0x1_0000 + 1024 * P, 256, 1000);
    let barrier = std::sync::Barrier::new(n as usize + 1);
    let base = 0x2_0000;
    std::thread::scope(|sc| {
        for t in 0..n {
            let (s, barrier) = (&s, &barrier);
            sc.spawn(move || {
                let mut h = s.attach().unwrap();
                let a = base + t * 4 * P;
                assert_eq!(h.mmap(a, 2 * P, Prot::READ_WRITE, fixed(PA)), Ok(a));
                h.write(a + P - 2, &[t as u8 + 1; 4]).unwrap();
                barrier.wait();
                barrier.wait();
                let mut buf = [0u8; 4];
                h.read(a + P - 2, &mut buf).unwrap();
                assert_eq!(buf, [t as u8 + 1; 4]);
                assert_eq!(h.munmap(a, 2 * P), Ok(()));
            });
        }
        barrier.wait();
        let st = s.stats();
        assert_eq!(st.cores, n, "{st:?}");
        assert_eq!(st.regions, n);
        assert_eq!(st.frames_in_use, 2 * n);
        barrier.wait();
    });
    let st = s.stats();
    assert_eq!(
        (
            st.cores,
            st.regions,
            st.frames_in_use,
            st.page_tables <= empty_tables(&st)
        ),
        (0, 0, 0, true),
        "{st:?}"
    );
}

pub fn attach_beyond_max_cores_is_too_many_cores(design: Design) {
    let s = AddressSpace::builder()
        .design(design)
        .memory(64 * P)
        .max_cores(2)
        .build()
        .unwrap();
    let h1 = s.attach().unwrap();
    let h2 = s.attach().unwrap();
    match s.attach() {
        Err(e) => {
            assert_eq!(e, aspace_vm::VmError::TooManyCores(2));
            assert_eq!(e.errno(), libc::EAGAIN);
        }
        Ok(_) => panic!("a third core attached with max_cores 2"),
    }
    assert_eq!(s.stats().cores, 2);
    drop(h1);
    let h3 = s.attach().expect("a slot is free again");
    assert_eq!(s.stats().cores, 2);
    drop((h2, h3));
    assert_eq!(s.stats().cores, 0);
}

pub fn populate_and_shared_mappings_behave_like_linux(design: Design) {
    let (s, mut h) = small(design);
    let a = 0x2_0000;
    let flags = fixed(PA) | MapFlags::POPULATE;
    assert_eq!(h.mmap(a, 4 * P, Prot::READ_WRITE, flags), Ok(a));
    assert!(s.stats().frames_in_use <= 4);
    assert_eq!(byte(&mut h, a + 3 * P), Ok(0));
    // Two adjacent shared mappings stay two regions (two shmem objects in Linux).
    let shared = MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED;
    assert_eq!(
        h.mmap(a + 8 * P, 2 * P, Prot::READ_WRITE, shared),
        Ok(a + 8 * P)
    );
    assert_eq!(
        h.mmap(a + 10 * P, 2 * P, Prot::READ_WRITE, shared),
        Ok(a + 10 * P)
    );
    let regions = s.maps();
    assert_eq!(regions.len(), 3, "{}", lines(&regions));
    assert_eq!(regions[1].sharing, Sharing::Shared);
    // A shared page keeps its contents across DONTNEED (it lives in the shmem object).
    h.write(a + 8 * P, &[5]).unwrap();
    assert_eq!(h.madvise(a + 8 * P, P, Advice::DONTNEED), Ok(()));
    assert_eq!(
        byte(&mut h, a + 8 * P),
        Ok(5),
        "shared anonymous page after DONTNEED"
    );
    unmap_everything_and_check_empty(&s, &mut h);
}
