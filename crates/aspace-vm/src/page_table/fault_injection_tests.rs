//! Page-table allocation failing at the N-th call (`fault_inject::TABLE_ALLOC`), seen
//! through the public API: the fault fails with `Fault::OutOfMemory`, no frame is taken, the
//! regions are unchanged, the tables installed before the failing one stay (and are reused by
//! the retry, or freed with the range), and the next call succeeds.

use crate::fault_inject::TABLE_ALLOC;

fn fail_nth_table_alloc(n: u64) {
    TABLE_ALLOC.fail_nth(n);
}
use crate::{AddressSpace, Design, Fault, MapFlags, Prot, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

#[test]
fn a_fault_whose_nth_table_cannot_be_allocated_fails_and_the_retry_succeeds() {
    // A fresh space has only the root: the first fault allocates levels 3, 2 and 1.
    for k in 1..=3u64 {
        let s = AddressSpace::builder()
            .design(Design::Coarse)
            .memory(64 * P)
            .build()
            .unwrap();
        let mut c = s.attach().unwrap();
        let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
        let maps = s.maps();
        fail_nth_table_alloc(k);
        assert_eq!(
            c.write(a, b"x"),
            Err(Fault::OutOfMemory { addr: a }),
            "k = {k}"
        );
        let st = s.stats();
        assert_eq!(
            (st.frames_in_use, st.fills),
            (0, 0),
            "k = {k}: no frame taken"
        );
        assert_eq!(
            st.page_tables, k,
            "k = {k}: the root and the tables installed before"
        );
        assert_eq!(s.maps(), maps, "k = {k}: regions unchanged");
        c.write(a, b"x").unwrap();
        let st = s.stats();
        assert_eq!((st.frames_in_use, st.page_tables), (1, 4), "k = {k}");
        c.munmap(a, 4 * P).unwrap();
        let st = s.stats();
        assert_eq!(
            (st.frames_in_use, st.page_tables),
            (0, 1),
            "k = {k}: nothing leaked"
        );
    }
}

#[test]
fn a_failed_table_leaves_the_partial_path_freeable_by_munmap() {
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(64 * P)
        .build()
        .unwrap();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    fail_nth_table_alloc(3); // the leaf
    assert_eq!(c.write(a, b"x"), Err(Fault::OutOfMemory { addr: a }));
    assert_eq!(s.stats().page_tables, 3);
    c.munmap(a, P).unwrap();
    assert_eq!(
        s.stats().page_tables,
        1,
        "the empty intermediate tables went with the range"
    );
}

#[test]
fn populate_stops_at_a_failed_table_and_still_succeeds_like_linux() {
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(64 * P)
        .build()
        .unwrap();
    let mut c = s.attach().unwrap();
    fail_nth_table_alloc(1);
    let a = c
        .mmap(0, 4 * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
        .unwrap();
    assert_eq!(s.stats().frames_in_use, 0, "nothing populated");
    c.write(a + 3 * P, b"y").unwrap();
    c.munmap(a, 4 * P).unwrap();
    let st = s.stats();
    assert_eq!((st.frames_in_use, st.page_tables), (0, 1));
}
