//! Review tests (issue 19) of `faultlock`'s own step: what holds while an `mmap` is between
//! its placement search (fault lock read side, dropped) and its edit (write side), stopped
//! there with `fault_inject::FAULTLOCK_BETWEEN_GUARDS`.

use super::FaultLock;
use crate::designs::Designs;
use crate::types::{MapFlags, Prot, PAGE_SIZE as P};
use crate::{AddressSpace, Design};
use std::sync::mpsc::channel;

fn design(space: &AddressSpace) -> &FaultLock {
    match &*space.space.design {
        Designs::FaultLock(d) => d,
        other => panic!("not the faultlock design: {other:?}"),
    }
}

fn space(d: Design) -> AddressSpace {
    AddressSpace::builder()
        .design(d)
        .address_range(0x10_0000, 0x10_0000 + 64 * P)
        // Room for two cores' frame batches (a core's cache is not raided by another's fault).
        .memory(512 * P)
        .max_cores(3)
        .build()
        .unwrap()
}

const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

/// While `mmap(NULL)` is stopped between its guards: the space mutex is held (every other
/// system call waits), the fault lock is free (faults, `maps()` and `stats()` go on), and a
/// first-write fault that gives the region above the chosen gap its anon identity is seen by
/// the edit: the outcome (address, merge, `maps()`) is the sequential one of `coarse` with
/// the write first. `MAP_POPULATE` then runs after both locks are released (no deadlock) and
/// fills every page.
#[test]
fn a_fault_between_the_search_and_the_edit_is_seen_by_the_edit() {
    for populate in [false, true] {
        let s = space(Design::FaultLock);
        let top = s.config().max_addr;
        let mut a = s.attach().unwrap();
        let mut b = s.attach().unwrap();
        a.mmap(top - 2 * P, 2 * P, Prot::READ_WRITE, PA | MapFlags::FIXED)
            .unwrap();
        let flags = if populate {
            PA | MapFlags::POPULATE
        } else {
            PA
        };
        let (at_pause, paused) = channel::<()>();
        let (go_on, resume) = channel::<()>();
        let got = std::thread::scope(|sc| {
            let t = sc.spawn(move || {
                crate::fault_inject::FAULTLOCK_BETWEEN_GUARDS.arm(move || {
                    at_pause.send(()).unwrap();
                    resume.recv().unwrap();
                });
                a.mmap(0, P, Prot::READ_WRITE, flags)
            });
            paused.recv().unwrap();
            let d = design(&s);
            assert!(
                d.space.is_locked(),
                "the space mutex is held between the guards"
            );
            assert!(
                d.regions.try_write().is_some(),
                "no fault-lock guard is held between the guards"
            );
            b.write(top - P, &[3]).unwrap(); // the region's anon identity, under the read side
            let _ = (s.maps(), s.stats());
            go_on.send(()).unwrap();
            t.join().unwrap()
        });
        let c = space(Design::Coarse);
        let mut ca = c.attach().unwrap();
        ca.mmap(top - 2 * P, 2 * P, Prot::READ_WRITE, PA | MapFlags::FIXED)
            .unwrap();
        ca.write(top - P, &[3]).unwrap();
        let want = ca.mmap(0, P, Prot::READ_WRITE, flags);
        assert_eq!(got, want);
        assert_eq!(s.maps(), c.maps(), "populate {populate}");
        assert_eq!(
            s.stats().frames_in_use,
            c.stats().frames_in_use,
            "populate {populate}"
        );
    }
}

/// A panic while `mmap` holds the space mutex (here between its guards) unwinds through it:
/// the mutex is released (`parking_lot`: no poisoning), nothing changed, and the next call of
/// any core goes through.
#[test]
fn a_panic_between_the_guards_releases_the_space_mutex_and_changes_nothing() {
    let s = space(Design::FaultLock);
    let mut a = s.attach().unwrap();
    let mut b = s.attach().unwrap();
    let x = a.mmap(0, 2 * P, Prot::READ_WRITE, PA).unwrap();
    a.write(x, &[1]).unwrap();
    let (maps, stats) = (s.maps(), s.stats());
    crate::fault_inject::FAULTLOCK_BETWEEN_GUARDS.arm(|| panic!("injected"));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a.mmap(0, P, Prot::READ_WRITE, PA)
    }));
    assert!(r.is_err());
    assert!(!design(&s).space.is_locked(), "the space mutex is released");
    assert_eq!(s.maps(), maps);
    assert_eq!(
        (s.stats().regions, s.stats().frames_in_use),
        (stats.regions, stats.frames_in_use)
    );
    let y = b.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    assert_eq!(y, x - P, "placed below the first mapping");
    a.munmap(y, 3 * P).unwrap();
    assert_eq!(s.stats().regions, 0);
}
