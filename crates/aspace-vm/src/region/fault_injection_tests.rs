//! A region store that cannot allocate (`fault_inject::REGION_RESERVE`), seen through
//! the public API: every system call that edits regions fails with `ENOMEM`
//! (`Limit::Memory`) and changes nothing (regions, contents, frames, tables), and the same call
//! succeeds next.

use crate::fault_inject::REGION_RESERVE;

fn fail_nth_region_reserve(n: u64) {
    REGION_RESERVE.fail_nth(n);
}
use crate::{AddressSpace, Advice, CoreHandle, Design, Limit, MapFlags, Prot, VmError, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;
const NOMEM: VmError = VmError::OutOfMemory(Limit::Memory);

/// Runs `call` with the store's next reservation failing: it must fail with `NOMEM` and leave
/// the space as it was; then it must succeed.
fn fails_then_succeeds<T: std::fmt::Debug>(
    s: &AddressSpace,
    c: &mut CoreHandle,
    a: u64,
    mut call: impl FnMut(&mut CoreHandle) -> Result<T, VmError>,
) {
    let (maps, stats) = (s.maps(), s.stats());
    let mut before = vec![0u8; 4 * P as usize];
    c.read(a, &mut before).unwrap();
    fail_nth_region_reserve(1);
    assert_eq!(call(c).unwrap_err(), NOMEM);
    assert_eq!(s.maps(), maps, "regions unchanged");
    let after = s.stats();
    assert_eq!(
        (after.frames_in_use, after.page_tables, after.regions),
        (stats.frames_in_use, stats.page_tables, stats.regions)
    );
    let mut now = vec![0u8; 4 * P as usize];
    c.read(a, &mut now).unwrap();
    assert_eq!(now, before, "contents unchanged");
    call(c).unwrap();
}

#[test]
fn every_region_edit_fails_cleanly_when_the_store_cannot_allocate() {
    let s = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(64 * P)
        .build()
        .unwrap();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0x100_0000, 4 * P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[5; 4 * 4096]).unwrap();
    // MAP_FIXED over written pages: the old contents must survive the failure.
    fails_then_succeeds(&s, &mut c, a, |c| {
        c.mmap(a + 4 * P, P, Prot::READ, PA | MapFlags::FIXED)
    });
    fails_then_succeeds(&s, &mut c, a, |c| c.mprotect(a + P, P, Prot::READ));
    fails_then_succeeds(&s, &mut c, a, |c| c.madvise(a, 2 * P, Advice::RANDOM));
    fails_then_succeeds(&s, &mut c, a, |c| c.mmap(0, P, Prot::READ, PA));
    fails_then_succeeds(&s, &mut c, a, |c| c.munmap(a + 4 * P, P));
    c.munmap(0x1_0000, s.config().max_addr - 0x1_0000).unwrap();
    let st = s.stats();
    assert_eq!((st.frames_in_use, st.page_tables, st.regions), (0, 1, 0));
}

/// Review (issue 19): the same for every design (the test above runs `coarse` only; `faultlock`
/// maps `mmap(NULL)` through a resolved `MAP_FIXED_NOREPLACE` under its write side, `interval`
/// reserves in its window), and a failed shared `mmap` uses up no shmem number (the next
/// shared mapping is still number 1, as in a history without the failed call).
#[test]
fn every_design_fails_region_edits_cleanly_when_the_store_cannot_allocate() {
    for &design in Design::ALL {
        let s = AddressSpace::builder()
            .design(design)
            // `interval`'s arena claim is a CAS that reserves nothing in a store: off, so that
            // its `mmap(NULL)` is placed through a window like the others'.
            .arenas(crate::config::Arenas::Off)
            .memory(64 * P)
            .build()
            .unwrap();
        let mut c = s.attach().unwrap();
        let a = c.mmap(0x100_0000, 4 * P, Prot::READ_WRITE, PA).unwrap();
        c.write(a, &[5; 4 * 4096]).unwrap();
        fails_then_succeeds(&s, &mut c, a, |c| {
            c.mmap(a + 4 * P, P, Prot::READ, PA | MapFlags::FIXED)
        });
        fails_then_succeeds(&s, &mut c, a, |c| c.mprotect(a + P, P, Prot::READ));
        fails_then_succeeds(&s, &mut c, a, |c| c.madvise(a, 2 * P, Advice::RANDOM));
        fails_then_succeeds(&s, &mut c, a, |c| c.mmap(0, P, Prot::READ, PA));
        fails_then_succeeds(&s, &mut c, a, |c| c.mmap(0x200_0000, P, Prot::READ, PA));
        fails_then_succeeds(&s, &mut c, a, |c| c.munmap(a + 4 * P, P));
        let shared = MapFlags::SHARED | MapFlags::ANONYMOUS;
        let before = s.maps();
        fail_nth_region_reserve(1);
        assert_eq!(
            c.mmap(0, P, Prot::READ, shared).unwrap_err(),
            NOMEM,
            "{design:?}"
        );
        assert_eq!(s.maps(), before, "{design:?}");
        let m = c.mmap(0, P, Prot::READ, shared).unwrap();
        let info = s.maps().into_iter().find(|r| r.start == m).unwrap();
        assert_eq!(
            info.inode, 1,
            "{design:?}: the failed shared mmap used up a number"
        );
        c.munmap(0x1_0000, s.config().max_addr - 0x1_0000).unwrap();
        let st = s.stats();
        assert_eq!((st.frames_in_use, st.regions), (0, 0), "{design:?}");
    }
}
