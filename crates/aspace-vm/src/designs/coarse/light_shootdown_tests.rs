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
