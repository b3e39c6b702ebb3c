//! Review tests (issue 22) of `coarse`'s upgradable space lock: which paths keep it light and
//! which upgrade it, the light handover between threads, and the region-count copy.

use super::Coarse;
use crate::designs::Designs;
use crate::types::{MapFlags, Prot, PAGE_SIZE as P};
use crate::{AddressSpace, Design};

fn design(space: &AddressSpace) -> &Coarse {
    match &*space.space.design {
        Designs::Coarse(d) => d,
        other => panic!("not the coarse design: {other:?}"),
    }
}

fn space() -> AddressSpace {
    AddressSpace::builder()
        .design(Design::Coarse)
        .address_range(0x10_0000, 0x10_0000 + 64 * P)
        .memory(512 * P)
        .max_cores(3)
        .build()
        .unwrap()
}

const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

/// `stats()` keeps the lone core light; `maps()` with that core attached (even from the
/// core's own thread) upgrades the lock for good. So every suite that checks `maps()` after
/// each step (the conformance suite's `check_cheap`, the differential engine's `snapshot`)
/// runs the light mode for its first step only.
#[test]
fn maps_with_a_lone_core_attached_upgrades_for_good_and_stats_does_not() {
    let s = space();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 2 * P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[1]).unwrap();
    assert!(!design(&s).group.is_thread_safe(), "one core: light");
    assert_eq!(s.stats().regions, 1);
    assert!(
        !design(&s).group.is_thread_safe(),
        "stats() does not upgrade"
    );
    assert_eq!(s.maps().len(), 1);
    assert!(
        design(&s).group.is_thread_safe(),
        "maps() beside an attached core upgrades"
    );
    drop(c);
    // No downgrade.
    let mut c = s.attach().unwrap();
    c.munmap(a, 2 * P).unwrap();
    assert!(design(&s).group.is_thread_safe());
    assert_eq!(s.stats().regions, 0);
}

/// A lone core detached on one thread and a new lone core attached on another: light again
/// (one member), the data written in the first light sections is seen by the second (the
/// group's join mutex orders the two threads' plain lock-word accesses).
#[test]
fn a_lone_core_handed_over_between_threads_stays_light_and_consistent() {
    let s = space();
    let a = std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut c = s.attach().unwrap();
            let a = c.mmap(0, 4 * P, Prot::READ_WRITE, PA).unwrap();
            c.write(a + P, &7u64.to_le_bytes()).unwrap();
            a
        })
        .join()
        .unwrap()
    });
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut c = s.attach().unwrap();
            assert!(!design(&s).group.is_thread_safe(), "one member: light");
            let mut buf = [0u8; 8];
            c.read(a + P, &mut buf).unwrap();
            assert_eq!(u64::from_le_bytes(buf), 7);
            c.munmap(a, P).unwrap();
            assert_eq!(s.stats().regions, 1);
        });
    });
    // A core handle sent to another thread keeps its member: still light.
    let mut c = s.attach().unwrap();
    c.mmap(0, P, Prot::READ, PA).unwrap();
    let mut c = std::thread::spawn(move || {
        c.munmap(a + P, 3 * P).unwrap();
        c
    })
    .join()
    .unwrap();
    assert!(!design(&s).group.is_thread_safe());
    // Two handles on one thread: the second attach upgrades (two members).
    let mut d = s.attach().unwrap();
    assert!(design(&s).group.is_thread_safe());
    d.mmap(0, P, Prot::READ, PA).unwrap();
    c.mmap(0, P, Prot::READ, PA).unwrap();
    assert_eq!(s.stats().regions as usize, s.maps().len());
}
