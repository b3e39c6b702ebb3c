//! The shared Linux bodies over the per-core organisation (`page_table/per_core/owner.rs`):
//! every core maps the owner tree's frame of a page (review finding L1, first half), `munmap`
//! frees the owner's frames after its shootdown (L1, second half: they leaked), the zero-page
//! upgrade path across cores, and the lock-free fault (`fault_rcu`) over per-core trees.

use super::*;
use crate::config::Builder;
use crate::page_table::organisation::Organisation;
use crate::region::rcu_store::RcuTree;
use crate::region::store::BTreeStore;

/// A space of organisation `org` (targeted shootdown, 4 core slots) with two attached cores.
fn space(org: Organisation) -> (Shared, Core, Core) {
    let config = Builder::default()
        .memory(4 << 20)
        .max_cores(4)
        .validated()
        .unwrap();
    let sh = Shared::new(config, ShootdownPolicy::Targeted, org, None).unwrap();
    let (c0, c1) = (Core::attach(&sh).unwrap(), Core::attach(&sh).unwrap());
    (sh, c0, c1)
}

/// A private read-write anonymous mapping of `pages` pages anywhere.
fn private_rw(pages: u64) -> MmapRequest {
    MmapRequest {
        placement: Placement::Anywhere,
        len: pages * PAGE_SIZE,
        prot: Prot::READ_WRITE,
        sharing: Ok(Sharing::Private),
        flags: 0,
        populate: false,
    }
}

/// The frame and prot of `va` in core `core`'s tree.
fn entry(sh: &Shared, core: &Core, va: u64) -> Option<(Frame, Prot)> {
    sh.tables
        .tree(core.id)
        .lookup(va)
        .map(|p| (p.frame(), p.prot()))
}

fn detach(sh: &Shared, cores: [Core; 2]) {
    for mut c in cores {
        c.cache.drain(sh.pool());
        c.detach(sh);
    }
}

/// Review L1 (was `#[ignore]`d on `review-ptseam`: "two cores map the same private page to
/// different frames", `Frame(0)` against `Frame(64)`).
#[test]
fn per_core_bodies_map_one_frame_for_a_page_on_every_core() {
    let (sh, mut c0, mut c1) = space(Organisation::PerCore);
    let mut regions = BTreeStore::default();
    let a = mmap_locked(&sh, &mut c0, &mut regions, private_rw(1)).unwrap();
    fault_locked(&sh, &mut c0, &regions, a, Access::Write).unwrap();
    fault_locked(&sh, &mut c1, &regions, a, Access::Read).unwrap();
    let (f0, f1) = (entry(&sh, &c0, a), entry(&sh, &c1, a));
    assert!(f0.is_some());
    assert_eq!(
        f0.map(|e| e.0),
        f1.map(|e| e.0),
        "two cores map the same private page to different frames"
    );
    assert_eq!(sh.pool().in_use(), 1, "one frame taken for the page");
    detach(&sh, [c0, c1]);
}

/// Review L1, second half (was `#[ignore]`d: "the unmapped page's frame was never freed", 1
/// frame in use where 0 is expected), on two cores.
#[test]
fn per_core_munmap_frees_the_owner_frames_after_the_shootdown() {
    let (sh, mut c0, mut c1) = space(Organisation::PerCore);
    let mut regions = BTreeStore::default();
    let a = mmap_locked(&sh, &mut c0, &mut regions, private_rw(2)).unwrap();
    fault_locked(&sh, &mut c0, &regions, a, Access::Write).unwrap();
    fault_locked(&sh, &mut c1, &regions, a, Access::Read).unwrap();
    fault_locked(&sh, &mut c1, &regions, a + PAGE_SIZE, Access::Write).unwrap();
    assert_eq!(sh.pool().in_use(), 2);
    munmap_locked(&sh, &mut c0, &mut regions, a..a + 2 * PAGE_SIZE).unwrap();
    // What the handle does after the call: zero the freed frames into the cache.
    c0.release_freed(&sh);
    c0.cache.drain(sh.pool());
    assert_eq!(
        sh.pool().in_use(),
        0,
        "the unmapped page's frame was never freed"
    );
    assert_eq!((entry(&sh, &c0, a), entry(&sh, &c1, a)), (None, None));
    // No region is left: every tree, the owner's included, is back to its root.
    assert_eq!(
        (sh.tables.per_core(), sh.tables.owner_table_count()),
        (vec![1, 1], 1)
    );
    detach(&sh, [c0, c1]);
}

/// Control for the leak reproduction: the same steps over the shared tree free the frame.
#[test]
fn shared_munmap_frees_the_unmapped_frames() {
    let (sh, mut c0, c1) = space(Organisation::Shared);
    let mut regions = BTreeStore::default();
    let a = mmap_locked(&sh, &mut c0, &mut regions, private_rw(1)).unwrap();
    fault_locked(&sh, &mut c0, &regions, a, Access::Write).unwrap();
    munmap_locked(&sh, &mut c0, &mut regions, a..a + PAGE_SIZE).unwrap();
    // What the handle does after the call: zero the freed frames into the cache.
    c0.release_freed(&sh);
    c0.cache.drain(sh.pool());
    assert_eq!(
        sh.pool().in_use(),
        0,
        "the unmapped page's frame was never freed"
    );
    detach(&sh, [c0, c1]);
}

/// The zero-page-like path across cores: core 0's read fault maps the page without `WRITE`;
/// core 1's write fault gives the region its identity and upgrades the owner entry and its own
/// copy; core 0's copy keeps its read-only right until its own write faults, which copies the
/// upgraded entry. One frame throughout; `mprotect` to read-only then names both cores.
#[test]
fn per_core_zero_page_read_then_writes_on_two_cores_upgrade_one_frame() {
    let (sh, mut c0, mut c1) = space(Organisation::PerCore);
    let mut regions = BTreeStore::default();
    let a = mmap_locked(&sh, &mut c0, &mut regions, private_rw(1)).unwrap();
    fault_locked(&sh, &mut c0, &regions, a, Access::Read).unwrap();
    let (f, prot) = entry(&sh, &c0, a).unwrap();
    assert_eq!(
        prot,
        Prot::READ,
        "a read fault without identity maps without WRITE"
    );
    fault_locked(&sh, &mut c1, &regions, a, Access::Write).unwrap();
    assert_eq!(entry(&sh, &c1, a), Some((f, Prot::READ_WRITE)));
    assert_eq!(
        entry(&sh, &c0, a),
        Some((f, Prot::READ)),
        "core 0's copy is upgraded by its own fault"
    );
    fault_locked(&sh, &mut c0, &regions, a, Access::Write).unwrap();
    assert_eq!(entry(&sh, &c0, a), Some((f, Prot::READ_WRITE)));
    assert_eq!(sh.pool().in_use(), 1);
    let rounds = sh.shootdown.sent();
    mprotect_locked(&sh, &mut c0, &mut regions, a..a + PAGE_SIZE, Prot::READ).unwrap();
    assert_eq!(
        (entry(&sh, &c0, a), entry(&sh, &c1, a)),
        (Some((f, Prot::READ)), Some((f, Prot::READ)))
    );
    assert_eq!(sh.shootdown.sent(), rounds + 1);
    munmap_locked(&sh, &mut c0, &mut regions, a..a + PAGE_SIZE).unwrap();
    // What the handle does after the call: zero the freed frames into the cache.
    c0.release_freed(&sh);
    c0.cache.drain(sh.pool());
    assert_eq!(sh.pool().in_use(), 0);
    detach(&sh, [c0, c1]);
}

/// The lock-free fault (`fault_rcu`) over per-core trees: a read fault of a page another core
/// filled copies its frame, a read fault of an empty page (its tables in place) takes a frame
/// into the owner tree and the other core's lock-free fault then shares it; `munmap` frees
/// both frames.
#[test]
fn per_core_lock_free_faults_share_the_owner_frames() {
    let (sh, mut c0, mut c1) = space(Organisation::PerCore);
    let (tree, mut token) = RcuTree::new(sh.domain.clone());
    let a = mmap_locked(&sh, &mut c0, &mut tree.edit(&mut token), private_rw(2)).unwrap();
    // The first write gives the region its identity: only a locked fault may.
    assert!(fault_rcu(&sh, &mut c0, &tree, a, Access::Write).is_err());
    fault_locked(&sh, &mut c0, &*tree.stable(&token), a, Access::Write).unwrap();
    assert_eq!(fault_rcu(&sh, &mut c1, &tree, a, Access::Read), Ok(Ok(())));
    assert_eq!(
        entry(&sh, &c1, a).map(|e| e.0),
        entry(&sh, &c0, a).map(|e| e.0)
    );
    let b = a + PAGE_SIZE;
    assert_eq!(fault_rcu(&sh, &mut c1, &tree, b, Access::Write), Ok(Ok(())));
    assert_eq!(fault_rcu(&sh, &mut c0, &tree, b, Access::Read), Ok(Ok(())));
    let (fb, _) = entry(&sh, &c1, b).unwrap();
    assert_eq!(entry(&sh, &c0, b), Some((fb, Prot::READ_WRITE)));
    assert_eq!(sh.pool().in_use(), 2);
    munmap_locked(
        &sh,
        &mut c1,
        &mut tree.edit(&mut token),
        a..a + 2 * PAGE_SIZE,
    )
    .unwrap();
    // What the handle does after the call: zero the freed frames into the cache.
    c1.release_freed(&sh);
    c1.cache.drain(sh.pool());
    assert_eq!(sh.pool().in_use(), 0);
    assert_eq!(
        (sh.tables.per_core(), sh.tables.owner_table_count()),
        (vec![1, 1], 1)
    );
    drop(tree);
    detach(&sh, [c0, c1]);
}
