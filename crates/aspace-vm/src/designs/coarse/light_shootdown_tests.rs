//! `coarse`'s light write sections send no shootdown round (issue 22, module doc "One core"):
//! the lone core's own TLB is flushed instead, so its next access of an unmapped or downgraded
//! page faults; once a second core attached, every such change sends a round again.

use crate::error::Fault;
use crate::types::{Advice, MapFlags, Prot, PAGE_SIZE as P};
use crate::{AddressSpace, Design};

const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

fn space() -> AddressSpace {
    AddressSpace::builder()
        .design(Design::Coarse)
        .memory(256 * P)
        .build()
        .unwrap()
}

#[test]
fn a_lone_core_flushes_its_own_tlb_and_sends_no_round() {
    let s = space();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, 3 * P, Prot::READ_WRITE, PA).unwrap();
    for p in 0..3 {
        c.write(a + p * P, &[p as u8 + 1]).unwrap();
    }
    // Every page is in the TLB now: each change below must drop its translation.
    c.munmap(a, P).unwrap();
    assert_eq!(
        c.read(a, &mut [0]).unwrap_err(),
        Fault::Unmapped { addr: a },
        "the unmapped page's translation survived in the lone core's TLB"
    );
    c.mprotect(a + P, P, Prot::READ).unwrap();
    assert_eq!(
        c.write(a + P, &[9]).unwrap_err(),
        Fault::Protection { addr: a + P },
        "the write right survived the mprotect in the lone core's TLB"
    );
    c.madvise(a + 2 * P, P, Advice::DONTNEED).unwrap();
    let mut b = [7u8];
    c.read(a + 2 * P, &mut b).unwrap();
    assert_eq!(
        b,
        [0],
        "the dropped page's old frame was read after DONTNEED"
    );
    let st = s.stats();
    assert_eq!(
        (st.shootdowns, st.shootdown_targets),
        (0, 0),
        "a light section sends no round"
    );
    c.munmap(a, 3 * P).unwrap();
}

#[test]
fn after_a_second_attach_every_change_sends_a_round() {
    let s = space();
    let mut c = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[1]).unwrap();
    c.munmap(a, P).unwrap();
    assert_eq!(s.stats().shootdowns, 0);
    // The second core upgrades the lock; it stays upgraded after it leaves.
    let d = s.attach().unwrap();
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[1]).unwrap();
    c.munmap(a, P).unwrap();
    assert_eq!(s.stats().shootdowns, 1, "a thread-safe section shoots down");
    drop(d);
    let a = c.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    c.write(a, &[1]).unwrap();
    c.munmap(a, P).unwrap();
    assert_eq!(
        s.stats().shootdowns,
        2,
        "no downgrade: the lock stays thread-safe after the second core left"
    );
    assert_eq!(
        c.read(a, &mut [0]).unwrap_err(),
        Fault::Unmapped { addr: a }
    );
}

/// Regression (review of issue 22): a lone core whose fault handler panicked (caught by its
/// user, as `session.rs` allows) lost its member on unwind, so the group counted no member;
/// a second core then attached without upgrading (one member), ran its sections light and
/// skipped the shootdown round, while the first core, still attached, kept the unmapped
/// page's translation in its TLB and read the frame after `munmap` returned (and after the
/// frame was reused).
#[test]
fn a_core_whose_fault_panicked_still_gets_the_shootdown_of_a_later_core() {
    let s = space();
    let mut a = s.attach().unwrap();
    let x = a.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    let y = a.mmap(0, P, Prot::READ_WRITE, PA).unwrap();
    a.write(x, &[0xaa]).unwrap(); // x's translation is in a's TLB now.
    crate::fault_inject::COARSE_FAULT_IN_SECTION.arm(|| panic!("injected panic in a fault"));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.read(y, &mut [0])));
    assert!(r.is_err(), "the injected panic did not happen");
    let mut b = s.attach().unwrap();
    b.munmap(x, P).unwrap();
    // The freed frame is reused by b's next page (its frame cache), with new content; at an
    // address of its own, so that `x` stays unmapped.
    let z = b
        .mmap(x.min(y) - 16 * P, P, Prot::READ_WRITE, PA | MapFlags::FIXED)
        .unwrap();
    b.write(z, &[0xbb]).unwrap();
    assert_eq!(s.maps().len(), 2, "x unmapped, y and z mapped");
    let mut buf = [0u8];
    assert_eq!(
        a.read(x, &mut buf),
        Err(Fault::Unmapped { addr: x }),
        "a read after munmap returned used a stale translation (read {buf:?})"
    );
}
