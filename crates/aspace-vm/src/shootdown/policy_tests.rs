//! The shootdown policies on a whole space: whom `munmap`, `mprotect` and `madvise` target,
//! what `stats()` counts, and that a core left out of a targeted shootdown really held nothing
//! (it faults afterwards like everyone else). Sequential on purpose: each step's effect on the
//! counters is exact. The races are the loom models' (`page_table/users/loom_tests.rs`) and the
//! protocol tests' (`tests/protocol_zap_reuse.rs`, `tests/security.rs`, both policies).

use crate::config::Builder;
use crate::shootdown::ShootdownPolicy;
use crate::{Access, AddressSpace, Advice, CoreHandle, Design, Fault, MapFlags, Prot, PAGE_SIZE};

const RW: Prot = Prot::READ_WRITE;
const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

fn space(policy: ShootdownPolicy, max_cores: usize) -> AddressSpace {
    Builder::default()
        .design(Design::Coarse)
        .memory(4 << 20)
        .max_cores(max_cores)
        .shootdown_policy(policy)
        .build()
        .unwrap()
}

/// The flush requests sent to `core` so far.
fn requests(space: &AddressSpace, core: &CoreHandle) -> u64 {
    space.space.shared.shootdown.current_request(core.core_id())
}

/// (shootdowns, targets, waits).
fn rounds(space: &AddressSpace) -> (u64, u64, u64) {
    let s = space.stats();
    assert_eq!(s.shootdowns, s.shootdowns_sent);
    (s.shootdowns, s.shootdown_targets, s.shootdown_waits)
}

#[test]
fn the_coarse_design_broadcasts_and_tests_can_choose_targeted() {
    let coarse = AddressSpace::builder()
        .design(Design::Coarse)
        .build()
        .unwrap();
    assert_eq!(
        coarse.space.shared.shootdown_policy,
        ShootdownPolicy::Broadcast
    );
    let t = AddressSpace::builder()
        .design(Design::Coarse)
        .targeted_shootdown_for_testing()
        .build()
        .unwrap();
    assert_eq!(t.space.shared.shootdown_policy, ShootdownPolicy::Targeted);
}

#[test]
fn a_targeted_munmap_spares_a_core_that_never_touched_the_range() {
    let space = space(ShootdownPolicy::Targeted, 4);
    let mut a = space.attach().unwrap();
    let mut b = space.attach().unwrap();
    let b_requests = requests(&space, &b);
    let p = a.mmap(0, PAGE_SIZE, RW, PA).unwrap();
    a.write(p, b"a's").unwrap();
    a.munmap(p, PAGE_SIZE).unwrap();
    assert_eq!(
        rounds(&space),
        (0, 0, 0),
        "only the unmapping core held the translation: it flushed its own TLB, no round"
    );
    assert_eq!(requests(&space, &b), b_requests, "b was not asked to flush");
    // a's next access faults (its TLB was flushed directly, not by a request); b's does not
    // flush either.
    let received = space.stats().shootdowns_received;
    assert_eq!(a.touch(p, Access::Read), Err(Fault::Unmapped { addr: p }));
    let q = b.mmap(0, PAGE_SIZE, RW, PA).unwrap();
    b.touch(q, Access::Write).unwrap();
    assert_eq!(
        space.stats().shootdowns_received,
        received,
        "nobody flushed by request"
    );
}

#[test]
fn a_targeted_munmap_targets_every_core_that_read_the_page_and_they_fault_after() {
    let space = space(ShootdownPolicy::Targeted, 4);
    let mut a = space.attach().unwrap();
    let mut b = space.attach().unwrap();
    let mut idle = space.attach().unwrap();
    let idle_requests = requests(&space, &idle);
    let p = a.mmap(0, 2 * PAGE_SIZE, RW, PA).unwrap();
    a.write(p, &[1; 8]).unwrap();
    let mut buf = [0u8; 8];
    b.read(p, &mut buf).unwrap();
    assert_eq!(buf, [1; 8]);
    let b_requests = requests(&space, &b);
    a.munmap(p, 2 * PAGE_SIZE).unwrap();
    assert_eq!(rounds(&space), (1, 1, 0), "b; a flushed its own TLB");
    assert_eq!(requests(&space, &b), b_requests + 1, "b was asked to flush");
    assert_eq!(requests(&space, &idle), idle_requests);
    assert_eq!(b.read(p, &mut buf), Err(Fault::Unmapped { addr: p }));
    assert_eq!(
        idle.touch(p, Access::Read),
        Err(Fault::Unmapped { addr: p })
    );
    assert_eq!(space.stats().frames_in_use, 0);
}

#[test]
fn a_broadcast_munmap_targets_every_attached_core() {
    let space = space(ShootdownPolicy::Broadcast, 4);
    let mut a = space.attach().unwrap();
    let b = space.attach().unwrap();
    let b_requests = requests(&space, &b);
    let p = a.mmap(0, PAGE_SIZE, RW, PA).unwrap();
    a.write(p, b"a's").unwrap();
    a.munmap(p, PAGE_SIZE).unwrap();
    assert_eq!(rounds(&space), (1, 2, 0));
    assert_eq!(requests(&space, &b), b_requests + 1);
}

#[test]
fn a_targeted_unmap_of_pages_no_core_walked_sends_no_shootdown() {
    let space = space(ShootdownPolicy::Targeted, 4);
    let mut a = space.attach().unwrap();
    let _b = space.attach().unwrap();
    let populate = PA | MapFlags::POPULATE;
    let p = a.mmap(0, 4 * PAGE_SIZE, RW, populate).unwrap();
    assert_eq!(space.stats().frames_in_use, 4);
    a.madvise(p, 4 * PAGE_SIZE, Advice::DONTNEED).unwrap();
    assert_eq!(
        space.stats().frames_in_use,
        0,
        "frames freed without a round"
    );
    let q = a.mmap(0, 4 * PAGE_SIZE, RW, populate).unwrap();
    a.munmap(q, 4 * PAGE_SIZE).unwrap();
    a.munmap(p, 4 * PAGE_SIZE).unwrap();
    assert_eq!(rounds(&space), (0, 0, 0));
    assert_eq!(space.stats().frames_in_use, 0);
}

#[test]
fn a_targeted_mprotect_takes_the_right_from_the_cores_that_cached_it() {
    let space = space(ShootdownPolicy::Targeted, 4);
    let mut a = space.attach().unwrap();
    let mut b = space.attach().unwrap();
    let idle = space.attach().unwrap();
    let idle_requests = requests(&space, &idle);
    let p = a.mmap(0, PAGE_SIZE, RW, PA).unwrap();
    a.write(p, b"x").unwrap();
    // b's write caches a writable translation.
    b.write(p, b"y").unwrap();
    a.mprotect(p, PAGE_SIZE, Prot::READ).unwrap();
    assert_eq!(rounds(&space), (1, 1, 0), "b; a flushed its own TLB");
    assert_eq!(requests(&space, &idle), idle_requests);
    assert_eq!(b.write(p, b"z"), Err(Fault::Protection { addr: p }));
    let mut buf = [0u8; 1];
    b.read(p, &mut buf).unwrap();
    assert_eq!(&buf, b"y");
    // Giving rights back sends nothing.
    a.mprotect(p, PAGE_SIZE, RW).unwrap();
    assert_eq!(rounds(&space).0, 1);
}

#[test]
fn cores_that_share_a_bit_are_targeted_as_a_class() {
    use crate::page_table::{UserBit, USER_BITS};
    let n = USER_BITS + 1;
    let space = space(ShootdownPolicy::Targeted, n);
    let mut cores: Vec<CoreHandle> = (0..n).map(|_| space.attach().unwrap()).collect();
    assert_eq!(cores[USER_BITS].core_id().index(), USER_BITS);
    assert!(!UserBit::of(USER_BITS, n).exclusive());
    assert!(UserBit::of(1, n).exclusive());
    let before: Vec<u64> = cores.iter().map(|c| requests(&space, c)).collect();
    let toucher = &mut cores[USER_BITS];
    let p = toucher.mmap(0, PAGE_SIZE, RW, PA).unwrap();
    toucher.write(p, b"t").unwrap();
    cores[1].munmap(p, PAGE_SIZE).unwrap();
    // Bit 0 stands for cores 0 and USER_BITS; core 1 (the shooter) never walked the leaf.
    assert_eq!(rounds(&space), (1, 2, 0));
    for (i, c) in cores.iter().enumerate() {
        let bumped = requests(&space, c) - before[i];
        assert_eq!(bumped, u64::from(i == 0 || i == USER_BITS), "core {i}");
    }
    assert_eq!(
        cores[USER_BITS].touch(p, Access::Read),
        Err(Fault::Unmapped { addr: p })
    );
}
