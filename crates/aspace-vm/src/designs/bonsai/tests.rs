//! Deterministic tests of the `bonsai` design's lock-free fault against edits, on the real
//! space: a fault stopped between its lock-free lookup and its leaf lock
//! (`fault_inject::STAGE1_BEFORE_FILL`) while another core edits, then let go.
//!
//! - the stale fill: `munmap` / `mprotect(PROT_NONE)` of the fault's region, after an edit that
//!   path-copied its node, must make the fault refuse its fill (`Unmapped` / `Protection`);
//! - the split: an `mprotect` of the half of the region the fault's page is in answers
//!   `Protection`; of the other half, the fault succeeds with the right half's rights;
//! - path copies do not make faults retry: an edit of the neighbours, which copies the fault's
//!   node, leaves its region unmarked, and the fault completes lock-free (stage 0);
//! - a failed publish (injected node allocation failure) is `ENOMEM` with nothing changed.
//!
//! Mutations tried (session report): `replace_window` marking every old region of the window
//! (unchanged ones too) fails `path_copies_never_make_a_fault_retry`; not marking the regions
//! it removes fails the stale-fill and split tests.

use super::Bonsai;
use crate::designs::Designs;
use crate::types::{Access, Advice, MapFlags, Prot, PAGE_SIZE as P};
use crate::{AddressSpace, CoreHandle, Design, Fault};

fn design(space: &AddressSpace) -> &Bonsai {
    match &*space.space.design {
        Designs::Bonsai(d) => d,
        other => panic!("not the bonsai design: {other:?}"),
    }
}

const BASE: u64 = 0x4000_0000;
/// The start of a leaf table's 2 MiB.
const X: u64 = BASE + 512 * P;

fn space() -> AddressSpace {
    AddressSpace::builder()
        .design(Design::Bonsai)
        .address_range(BASE, BASE + 4096 * P)
        .memory(256 * P)
        .max_cores(2)
        .build()
        .unwrap()
}

/// A = `[X, X+P)` r, B = `[X+P, X+3P)` rw NORESERVE (written: it has an anon identity and
/// cannot merge), C = `[X+3P, X+4P)` r, one leaf table. Core F stops a write fault at `fault_at`
/// between its lock-free lookup and its leaf lock; core E runs `edits`; F goes on. Returns F's
/// result (and its fault stage counts), the space and E.
fn stopped_fault(
    fault_at: u64,
    edits: impl FnOnce(&mut CoreHandle) + Send,
) -> (Result<(), Fault>, AddressSpace, CoreHandle) {
    let space = space();
    let mut e = space.attach().unwrap();
    let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
    e.mmap(X, P, Prot::READ, fixed).unwrap();
    e.mmap(X + P, 2 * P, Prot::READ_WRITE, fixed | MapFlags::NORESERVE)
        .unwrap();
    e.mmap(X + 3 * P, P, Prot::READ, fixed).unwrap();
    e.write(X + P, &[1]).unwrap();
    assert_eq!(space.maps().len(), 3);
    let mut f = space.attach().unwrap();
    let (at_lookup, stopped) = std::sync::mpsc::channel::<()>();
    let (go_on, resume) = std::sync::mpsc::channel::<()>();
    let r = std::thread::scope(|s| {
        let fault = s.spawn(move || {
            crate::fault_inject::STAGE1_BEFORE_FILL.arm(move || {
                at_lookup.send(()).unwrap();
                resume.recv().unwrap();
            });
            f.write(fault_at, &[0xaa; 8])
        });
        stopped.recv().unwrap(); // F holds B's region object, before its leaf lock.
        edits(&mut e);
        go_on.send(()).unwrap();
        fault.join().unwrap()
    });
    (r, space, e)
}

/// An edit that changes A and C (not B): its commit path-copies the tree around B.
fn copy_around_b(e: &mut CoreHandle) {
    // B stays apart (NORESERVE): `path_copies_never_make_a_fault_retry` checks the count.
    e.mprotect(X, 4 * P, Prot::READ_WRITE).unwrap();
}

#[test]
fn lock_free_fault_never_fills_after_munmap_of_its_region() {
    for copy_first in [false, true] {
        let (r, space, mut e) = stopped_fault(X + 2 * P, |e| {
            if copy_first {
                copy_around_b(e);
            }
            e.munmap(X + P, 2 * P).unwrap();
        });
        assert_eq!(
            r,
            Err(Fault::Unmapped { addr: X + 2 * P }),
            "copy first: {copy_first}: a write to a page unmapped before it went on succeeded"
        );
        let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
        e.mmap(X + P, 2 * P, Prot::READ_WRITE, fixed).unwrap();
        let mut buf = [0xffu8; 8];
        e.read(X + 2 * P, &mut buf).unwrap();
        assert_eq!(buf, [0; 8], "a new mapping read the stale fill's bytes");
        e.munmap(X, 4 * P).unwrap();
        let st = space.stats();
        assert_eq!((st.frames_in_use, st.page_tables), (0, 1), "a frame leaked");
        design(&space).check();
    }
}

#[test]
fn lock_free_fault_never_fills_after_mprotect_none_of_its_region() {
    for copy_first in [false, true] {
        let (r, space, mut e) = stopped_fault(X + 2 * P, |e| {
            if copy_first {
                copy_around_b(e);
            }
            e.mprotect(X + P, 2 * P, Prot::NONE).unwrap();
        });
        assert_eq!(r, Err(Fault::Protection { addr: X + 2 * P }));
        assert_eq!(
            e.touch(X + 2 * P, Access::Write),
            Err(Fault::Protection { addr: X + 2 * P }),
            "the page is still writable after mprotect(PROT_NONE) returned"
        );
        design(&space).check();
    }
}

#[test]
fn a_fault_during_a_split_never_uses_the_other_half() {
    // The fault's page goes read-only: it must not be written through B's old rights.
    let (r, space, mut e) = stopped_fault(X + 2 * P, |e| {
        e.mprotect(X + 2 * P, P, Prot::READ).unwrap();
    });
    assert_eq!(r, Err(Fault::Protection { addr: X + 2 * P }));
    assert_eq!(
        e.touch(X + 2 * P, Access::Write),
        Err(Fault::Protection { addr: X + 2 * P })
    );
    design(&space).check();
    // The other half goes read-only: the fault's half keeps its rights, the write succeeds.
    let (r, space, mut e) = stopped_fault(X + 2 * P, |e| {
        e.mprotect(X + P, P, Prot::READ).unwrap();
    });
    assert_eq!(r, Ok(()));
    let mut buf = [0u8; 8];
    e.read(X + 2 * P, &mut buf).unwrap();
    assert_eq!(buf, [0xaa; 8]);
    assert_eq!(
        e.touch(X + P, Access::Write),
        Err(Fault::Protection { addr: X + P })
    );
    design(&space).check();
}

#[test]
fn path_copies_never_make_a_fault_retry() {
    let (r, space, _e) = stopped_fault(X + 2 * P, |e| {
        copy_around_b(e);
        e.madvise(X, P, Advice::RANDOM).unwrap();
    });
    assert_eq!(r, Ok(()));
    assert_eq!(space.maps().len(), 3, "A (its hint changed), B, C");
    let st = space.stats();
    // E's faults: its first write (stage 1: no anon identity yet). F's: one, at stage 0.
    assert_eq!(
        st.fault_stages,
        [1, 1],
        "a fault on a region no edit changed went to the space lock"
    );
    design(&space).check();
}

#[test]
fn a_failed_publish_is_enomem_and_changes_nothing() {
    let space = space();
    let mut e = space.attach().unwrap();
    let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
    e.mmap(X, 3 * P, Prot::READ_WRITE, fixed).unwrap();
    e.write(X + P, &[5; 8]).unwrap();
    let before = space.maps();
    design(&space).regions.fail_allocations_after(Some(0));
    let r = e.munmap(X + P, P);
    design(&space).regions.fail_allocations_after(None);
    assert_eq!(
        r,
        Err(crate::VmError::OutOfMemory(crate::error::Limit::Memory))
    );
    assert_eq!(space.maps(), before);
    // The region stays marked: faults on it are answered under the space lock, correctly.
    let mut buf = [0u8; 8];
    e.read(X + P, &mut buf).unwrap();
    assert_eq!(buf, [5; 8], "the failed munmap dropped data");
    e.munmap(X + P, P).unwrap();
    assert_eq!(space.maps().len(), 2);
    design(&space).check();
}

#[test]
fn a_failed_publish_does_not_leave_a_staying_region_marked_control() {
    assert_eq!(failed_publish_stages_marked(false), [1, 1]);
}

fn failed_publish_stages_marked(fail: bool) -> [u64; 2] {
    let space = space();
    let mut e = space.attach().unwrap();
    let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
    e.mmap(X, 4 * P, Prot::READ_WRITE, fixed).unwrap();
    e.write(X, &[1]).unwrap(); // Stage 1: the anon identity; the leaf table exists from here.
    if fail {
        design(&space).regions.fail_allocations_after(Some(0));
    }
    let r = e.munmap(X + 3 * P, P);
    design(&space).regions.fail_allocations_after(None);
    assert_eq!(
        r.is_err(),
        fail,
        "the munmap fails exactly when its publish is made to fail"
    );
    // An edit elsewhere: the region is not in its window.
    e.mmap(X + 100 * P, P, Prot::READ, fixed).unwrap();
    let mut buf = [0u8; 8];
    e.read(X + 2 * P, &mut buf).unwrap(); // A read fault on a page not present, leaf present.
    design(&space).check();
    let stages = space.stats().fault_stages;
    // Counts are exact after the failed edit: everything comes back.
    e.munmap(X, 4 * P).unwrap();
    e.munmap(X + 100 * P, P).unwrap();
    let st = space.stats();
    assert_eq!(space.maps().len(), 0);
    assert_eq!(
        (st.frames_in_use, st.page_tables),
        (0, 1),
        "a frame or table leaked"
    );
    design(&space).check();
    stages
}

/// Review (issue 19, review 2): retry termination. A stream of edits that changes the bounds
/// of the fault's region at every lock-free try (split, merge, split, ...) makes the fault take
/// the space mutex after `RCU_TRIES` tries; it never loops.
#[test]
fn a_stream_of_edits_sends_the_fault_to_the_lock_after_its_tries() {
    use std::sync::mpsc::{channel, Receiver, Sender};
    fn arm_stream(at: Sender<()>, resume: Receiver<()>) {
        crate::fault_inject::STAGE1_BEFORE_FILL.arm(move || {
            if at.send(()).is_ok() && resume.recv().is_ok() {
                arm_stream(at, resume);
            }
        });
    }
    let space = space();
    let mut e = space.attach().unwrap();
    let fixed = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
    e.mmap(X, 3 * P, Prot::READ_WRITE, fixed).unwrap();
    e.write(X, &[1]).unwrap();
    let mut f = space.attach().unwrap();
    let (at, stopped) = channel::<()>();
    let (go_on, resume) = channel::<()>();
    let (r, stops) = std::thread::scope(|s| {
        let fault = s.spawn(move || {
            arm_stream(at, resume);
            let mut buf = [0u8; 8];
            let r = f.read(X + 2 * P, &mut buf);
            drop(f);
            r
        });
        let mut stops = 0;
        while stopped.recv().is_ok() {
            let prot = if stops % 2 == 0 {
                Prot::READ
            } else {
                Prot::READ_WRITE
            };
            e.mprotect(X, P, prot).unwrap(); // Split, then merge back: the bounds change.
            stops += 1;
            if go_on.send(()).is_err() {
                break;
            }
            if stops > 10 {
                break;
            }
        }
        drop(go_on);
        (fault.join().unwrap(), stops)
    });
    assert_eq!(r, Ok(()));
    assert_eq!(
        stops,
        super::RCU_TRIES,
        "lock-free tries under a stream of edits"
    );
    assert_eq!(
        space.stats().fault_stages,
        [0, 2],
        "E's first write and F: stage 1"
    );
    design(&space).check();
}
