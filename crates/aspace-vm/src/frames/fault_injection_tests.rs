//! Frame allocation failing at the N-th call (`fault_inject::FRAME_ALLOC`), seen through the
//! public API of an address space: the access fails with `Fault::OutOfMemory` at the page whose
//! frame could not be had, no byte is copied, no frame or page table leaks, the regions are
//! unchanged, and the next call succeeds.

use crate::fault_inject::FRAME_ALLOC;

fn fail_nth_frame_alloc(n: u64) {
    FRAME_ALLOC.fail_nth(n);
}
use crate::{Access, AddressSpace, Design, Fault, MapFlags, Prot, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

fn space() -> AddressSpace {
    AddressSpace::builder()
        .design(Design::Coarse)
        .memory(64 * P)
        .frame_batch(2)
        .build()
        .unwrap()
}

#[test]
fn a_write_fault_without_a_frame_fails_changes_nothing_and_the_next_succeeds() {
    let s = space();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
    let maps = s.maps();
    fail_nth_frame_alloc(1);
    assert_eq!(
        c.write(a + 8, b"x"),
        Err(Fault::OutOfMemory { addr: a + 8 })
    );
    let st = s.stats();
    assert_eq!(st.frames_in_use, 0, "no frame taken");
    assert_eq!(st.fills, 0);
    // The intermediate tables installed on the way to the leaf stay (fill's contract), and are
    // the same ones the retry uses: root + level 3 + level 2 + leaf.
    assert_eq!(st.page_tables, 4);
    assert_eq!(s.maps(), maps, "regions unchanged");
    // The next call succeeds, with the same tables.
    c.write(a + 8, b"x").unwrap();
    let st = s.stats();
    assert_eq!((st.frames_in_use, st.fills, st.page_tables), (1, 1, 4));
    let mut b = [0u8; 1];
    c.read(a + 8, &mut b).unwrap();
    assert_eq!(&b, b"x");
    c.munmap(a, 4 * P).unwrap();
    let st = s.stats();
    assert_eq!((st.frames_in_use, st.page_tables), (0, 1), "nothing leaked");
}

#[test]
fn a_multi_page_write_failing_on_its_second_page_copies_nothing() {
    let s = space();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
    // The first page's fault gets its frame, the second's does not.
    fail_nth_frame_alloc(2);
    let data = vec![7u8; 2 * P as usize];
    assert_eq!(
        c.write(a + P / 2, &data),
        Err(Fault::OutOfMemory { addr: a + P })
    );
    assert_eq!(s.stats().frames_in_use, 1, "only the first page was filled");
    let mut page = vec![1u8; P as usize];
    c.read(a, &mut page).unwrap();
    assert!(
        page.iter().all(|&x| x == 0),
        "no byte of the failed write landed"
    );
    assert_eq!(s.stats().frames_in_use, 1);
    // Retried, it succeeds.
    c.write(a + P / 2, &data).unwrap();
    let mut back = vec![0u8; 2 * P as usize];
    c.read(a + P / 2, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(s.stats().frames_in_use, 3);
    c.munmap(a, 4 * P).unwrap();
    let st = s.stats();
    assert_eq!((st.frames_in_use, st.page_tables), (0, 1), "nothing leaked");
}

#[test]
fn a_read_fault_and_a_touch_without_a_frame_fail_the_same_way() {
    let s = space();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 2 * P, Prot::READ, PA).unwrap();
    fail_nth_frame_alloc(1);
    let mut b = [0u8; 4];
    assert_eq!(c.read(a, &mut b), Err(Fault::OutOfMemory { addr: a }));
    fail_nth_frame_alloc(1);
    assert_eq!(
        c.touch(a + P, Access::Read),
        Err(Fault::OutOfMemory { addr: a + P })
    );
    assert_eq!(s.stats().frames_in_use, 0);
    c.read(a, &mut b).unwrap();
    c.touch(a + P, Access::Read).unwrap();
    assert_eq!(s.stats().frames_in_use, 2);
    c.munmap(a, 2 * P).unwrap();
    let st = s.stats();
    assert_eq!((st.frames_in_use, st.page_tables), (0, 1));
}

#[test]
fn populate_stops_at_the_failed_frame_and_still_succeeds_like_linux() {
    let s = space();
    let mut c = s.attach().unwrap();
    // The third page's frame fails: Linux's MAP_POPULATE still returns the mapping.
    fail_nth_frame_alloc(3);
    let a = c
        .mmap(0, 4 * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
        .unwrap();
    assert_eq!(s.stats().frames_in_use, 2, "populated up to the failure");
    assert_eq!(s.maps().len(), 1);
    // The rest faults in on use.
    c.write(a + 3 * P, b"y").unwrap();
    assert_eq!(s.stats().frames_in_use, 3);
    c.munmap(a, 4 * P).unwrap();
    let st = s.stats();
    assert_eq!((st.frames_in_use, st.page_tables), (0, 1));
}

/// Review (issue 19): the out-of-memory paths above for every design (they ran `coarse`
/// only): `faultlock`'s fault under the fault lock's read side and `interval`'s lock-free
/// `fault_rcu` (a read fault of a written region, a write of a present zero-page-like entry)
/// and its stage 2 (the first write). The fault fails with `OutOfMemory` at the page, takes no
/// frame, changes no region; the retry succeeds; populate stops at the failure.
#[test]
fn every_design_fails_a_fault_without_a_frame_cleanly() {
    for &design in Design::ALL {
        let s = AddressSpace::builder()
            .design(design)
            .memory(64 * P)
            .frame_batch(2)
            .build()
            .unwrap();
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
        let maps = s.maps();
        // First write (stage 2 in interval: the region gets its identity there).
        fail_nth_frame_alloc(1);
        assert_eq!(
            c.write(a, b"x"),
            Err(Fault::OutOfMemory { addr: a }),
            "{design:?}"
        );
        assert_eq!(s.stats().frames_in_use, 0, "{design:?}");
        c.write(a, b"x").unwrap();
        // A read fault of the region, now with its identity (interval: lock-free).
        let mut b = [0u8; 1];
        fail_nth_frame_alloc(1);
        assert_eq!(
            c.read(a + P, &mut b),
            Err(Fault::OutOfMemory { addr: a + P }),
            "{design:?}"
        );
        assert_eq!(s.stats().frames_in_use, 1, "{design:?}");
        c.read(a + P, &mut b).unwrap();
        // A write of the page just read: an upgrade, no frame needed.
        fail_nth_frame_alloc(1);
        c.write(a + P, b"z").unwrap();
        fail_nth_frame_alloc(0);
        assert_eq!(s.maps(), maps, "{design:?}");
        assert_eq!(s.stats().frames_in_use, 2, "{design:?}");
        c.read(a, &mut b).unwrap();
        assert_eq!(&b, b"x", "{design:?}");
        // Populate stops at the failure, the mmap succeeds.
        fail_nth_frame_alloc(2);
        let p = c
            .mmap(0, 4 * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
            .unwrap();
        assert_eq!(
            s.stats().frames_in_use,
            3,
            "{design:?}: populated up to the failure"
        );
        c.write(p + 3 * P, b"y").unwrap();
        c.munmap(a, 4 * P).unwrap();
        c.munmap(p, 4 * P).unwrap();
        assert_eq!(s.stats().frames_in_use, 0, "{design:?}: nothing leaked");
        assert_eq!(s.stats().regions, 0, "{design:?}");
    }
}
