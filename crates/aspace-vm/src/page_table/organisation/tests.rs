//! Tests of the seam (`SpaceTables`): the per-core organisation's behaviours (fill on one core
//! invisible to another core's walk, every core mapping the owner tree's frame; an edit clears
//! the owner tree and the copies of exactly the cores its leaves record, and names the cores
//! whose copies changed; the upgrade path; discard and refill; frees through the grace period,
//! the copies' tables included; detach), the shared organisation through the same interface,
//! and the access path over both.

use super::*;
use crate::access::AccessWindow;
use crate::config::Builder;
use crate::core_state::Core;
use crate::shared::Shared;
use crate::shootdown::{CoreSet, ShootdownPolicy};
use crate::types::{Access, PAGE_SIZE};

/// Core slots of the tables under test.
const CORES: usize = 4;
/// A page, and one in the next leaf table of the same level-2 table (so the pair has 4 tables
/// below the root: one level-3, one level-2, two leaves).
const A: u64 = 0x4000_0000;
const B: u64 = A + 512 * PAGE_SIZE;

fn id(c: usize) -> CoreId {
    CoreId::for_tests(c)
}

fn frame(i: u32) -> Frame {
    Frame::from_index(i)
}

fn set(cores: &[usize]) -> CoreSet {
    let mut s = CoreSet::new();
    for &c in cores {
        s.insert(id(c));
    }
    s
}

/// The cores a users mask names.
fn noted(users: &UserMask) -> Vec<usize> {
    let mut s = CoreSet::new();
    users.cores_into(CORES, &mut s);
    (0..CORES).filter(|&c| s.contains(id(c))).collect()
}

/// Per-core tables with cores `0..CORES` attached, their caches, a domain and a reader.
struct PerCore {
    t: SpaceTables,
    caches: Vec<PtCache>,
    domain: aspace_rcu::Domain,
    reader: aspace_rcu::Reader,
}

impl PerCore {
    fn new() -> PerCore {
        let t = SpaceTables::new(Organisation::PerCore, CORES);
        let caches = (0..CORES).map(|c| t.attach(id(c)).unwrap()).collect();
        let domain = aspace_rcu::Domain::new();
        let reader = domain.register();
        PerCore {
            t,
            caches,
            domain,
            reader,
        }
    }

    /// Core `c` fills `va` with `f` (the design's metadata frame).
    fn fill(&mut self, c: usize, va: u64, f: Frame) {
        let pte = self
            .t
            .fill(id(c), &mut self.caches[c], va, Prot::READ_WRITE, || Some(f))
            .unwrap();
        assert_eq!(pte.frame(), f);
    }

    /// Tables taken from the allocator so far.
    fn allocated(&self) -> u64 {
        let SpaceTables::PerCore(t) = &self.t else {
            unreachable!()
        };
        t.pool_allocated()
    }

    fn walk(&self, c: usize, va: u64) -> Option<Frame> {
        self.t.walk(id(c), va, None).map(|p| p.frame())
    }

    /// Clears `range` through the seam (`trees` passed along); returns (whether cleared,
    /// cores noted, the owner's frames handed back).
    fn clear(&self, trees: Targets<'_>, range: Range<u64>) -> (bool, Vec<usize>, Vec<Frame>) {
        let (mut out, mut users) = (Vec::new(), UserMask::default());
        let any = self
            .t
            .clear_range_noting(trees, &self.reader, range, &mut out, Some(&mut users));
        (any, noted(&users), out)
    }

    fn prot(&self, c: usize, va: u64) -> Option<Prot> {
        self.t.walk(id(c), va, None).map(|p| p.prot())
    }
}

impl Drop for PerCore {
    fn drop(&mut self) {
        for (c, cache) in self.caches.iter_mut().enumerate() {
            self.t.detach(id(c), cache, &self.domain);
            cache.drain(&self.domain);
        }
    }
}

#[test]
fn per_core_fill_on_one_core_is_invisible_to_another_cores_walk() {
    let mut p = PerCore::new();
    assert_eq!(p.t.organisation(), Organisation::PerCore);
    assert!(!p.t.records_users(), "a per-core tree is its core's record");
    p.fill(0, A, frame(7));
    assert_eq!(p.walk(0, A), Some(frame(7)));
    for c in 1..CORES {
        assert_eq!(p.walk(c, A), None, "core {c} sees core 0's fill");
    }
    // Core 2 faults on the same page: its own copy of the owner's entry, the same frame (its
    // frame closure is not even called).
    let pte =
        p.t.fill(id(2), &mut p.caches[2], A, Prot::READ_WRITE, || {
            panic!("a second frame taken for one page")
        })
        .unwrap();
    assert_eq!(pte.frame(), frame(7));
    assert_eq!((p.walk(2, A), p.walk(1, A)), (Some(frame(7)), None));
    // Each tree holds its own tables: root + level 3, 2 and 1 for cores 0 and 2, and the owner
    // tree (not counted among the per-core trees) as many.
    assert_eq!(p.t.per_core(), [4, 1, 4, 1]);
    assert_eq!(p.t.table_count(), 10);
    assert_eq!(p.t.owner_table_count(), 4);
}

#[test]
fn per_core_clear_visits_only_the_cores_that_copied_and_notes_those_whose_copy_it_cleared() {
    let mut p = PerCore::new();
    for c in 0..3 {
        p.fill(c, A, frame(1));
    }
    p.fill(3, B, frame(2));
    // Core 3 never faulted on A: a translation put in its tree behind the owner's back (no
    // record in the owner leaf) shows whether the clear visits its tree. It must not.
    let SpaceTables::PerCore(t) = &p.t else {
        unreachable!()
    };
    t.tree(id(3))
        .fill(&mut p.caches[3], A, Prot::READ, || Some(frame(9)))
        .unwrap();
    let (any, cores, out) = p.clear(Targets::Cores(&set(&[3])), A..A + PAGE_SIZE);
    assert_eq!(
        (any, cores, out),
        (true, vec![0, 1, 2], vec![frame(1)]),
        "the owner's frame once, the cores that copied it noted, the named set ignored"
    );
    assert_eq!(
        (p.walk(0, A), p.walk(1, A), p.walk(2, A)),
        (None, None, None)
    );
    assert_eq!(
        p.walk(3, A),
        Some(frame(9)),
        "a core that never faulted on A is not visited"
    );
    // The next leaf's page: only core 3 copied from that leaf.
    assert_eq!(
        p.clear(Targets::All, B..B + PAGE_SIZE),
        (true, vec![3], vec![frame(2)])
    );
    // Nothing left in the owner tree: nothing cleared, nobody visited or noted (core 3's
    // stray entry stays).
    assert_eq!(
        p.clear(Targets::All, A..B + PAGE_SIZE),
        (false, vec![], vec![])
    );
    assert_eq!(p.walk(3, A), Some(frame(9)));
    // A core whose copy was discarded is visited (its record stays) but not noted.
    p.fill(0, A, frame(4));
    let pte =
        p.t.fill(id(1), &mut p.caches[1], A, Prot::READ_WRITE, || {
            Some(frame(5))
        })
        .unwrap();
    assert_eq!(pte.frame(), frame(4), "one frame per page");
    assert_eq!(p.t.discard(id(0), &mut p.caches[0], &p.domain), 3);
    assert_eq!(
        p.clear(Targets::All, A..A + PAGE_SIZE),
        (true, vec![1], vec![frame(4)])
    );
}

#[test]
fn per_core_protect_downgrades_the_copies_of_the_recorded_cores_and_notes_those_that_lost_a_right()
{
    let mut p = PerCore::new();
    // The zero-page-like read fill first (no WRITE), then two cores that write.
    p.t.fill(id(2), &mut p.caches[2], A, Prot::READ, || Some(frame(1)))
        .unwrap();
    // Core 0 writes: its fill copies the owner's read-only entry, which it upgrades.
    let pte =
        p.t.fill(id(0), &mut p.caches[0], A, Prot::READ_WRITE, || None)
            .unwrap();
    assert_eq!(pte.prot(), Prot::READ, "the owner's prot is copied");
    p.t.upgrade(id(0), A, Prot::READ_WRITE);
    // Core 1's fill then copies the upgraded entry.
    let pte =
        p.t.fill(id(1), &mut p.caches[1], A, Prot::READ_WRITE, || None)
            .unwrap();
    assert_eq!(pte.prot(), Prot::READ_WRITE);
    assert_eq!(
        (p.prot(0, A), p.prot(1, A), p.prot(2, A)),
        (
            Some(Prot::READ_WRITE),
            Some(Prot::READ_WRITE),
            Some(Prot::READ)
        ),
        "an upgrade raises the owner entry and the upgrading core's copy only"
    );
    let mut users = UserMask::default();
    let removed = p.t.protect_range_noting(
        Targets::All,
        &p.reader,
        A..A + PAGE_SIZE,
        Prot::READ,
        Some(&mut users),
    );
    assert!(removed);
    assert_eq!(noted(&users), [0, 1], "core 2's copy lost nothing");
    for c in 0..3 {
        assert_eq!(p.prot(c, A), Some(Prot::READ));
    }
    assert_eq!(p.prot(3, A), None);
    // Adding a right back removes none: nobody to shoot down; every recorded copy gets it.
    let mut users = UserMask::default();
    assert!(!p.t.protect_range_noting(
        Targets::Cores(&set(&[0])),
        &p.reader,
        A..A + PAGE_SIZE,
        Prot::READ_WRITE,
        Some(&mut users),
    ));
    assert!(users.is_empty());
    for c in 0..3 {
        assert_eq!(p.prot(c, A), Some(Prot::READ_WRITE));
    }
    let SpaceTables::PerCore(t) = &p.t else {
        unreachable!()
    };
    assert_eq!(
        t.owner().lookup(A).map(|e| (e.frame(), e.prot())),
        Some((frame(1), Prot::READ_WRITE))
    );
}

#[test]
fn per_core_discard_empties_only_the_core_tree_and_refill_reuses_its_tables_after_a_grace_period() {
    let mut p = PerCore::new();
    p.fill(0, A, frame(1));
    p.fill(0, B, frame(2));
    p.fill(1, A, frame(1));
    let allocated = p.allocated();
    assert_eq!(p.t.per_core(), [5, 4, 1, 1]);
    // Core 0's level-3, level-2 and two leaves: one retire batch (4 under test) to RCU.
    assert_eq!(p.t.discard(id(0), &mut p.caches[0], &p.domain), 4);
    assert_eq!((p.walk(0, A), p.walk(0, B)), (None, None));
    assert_eq!(
        p.walk(1, A),
        Some(frame(1)),
        "another core's tree is untouched"
    );
    assert_eq!(p.t.per_core(), [1, 4, 1, 1]);
    assert_eq!(p.caches[0].retired_len(), 0, "the batch went to RCU");
    // After the grace period the refill takes exactly the discarded tables back.
    p.domain.barrier();
    p.fill(0, A, frame(1));
    p.fill(0, B, frame(2));
    assert_eq!(
        (p.walk(0, A), p.walk(0, B)),
        (Some(frame(1)), Some(frame(2)))
    );
    assert_eq!(
        p.allocated(),
        allocated,
        "the refill allocated no table (it reused the discarded ones)"
    );
    // The shared tree cannot be discarded (its entries own their frames).
    let shared = SpaceTables::new(Organisation::Shared, CORES);
    let mut c = shared.attach(id(0)).unwrap();
    shared
        .fill(id(0), &mut c, A, Prot::READ, || Some(frame(1)))
        .unwrap();
    assert_eq!(shared.discard(id(0), &mut c, &p.domain), 0);
    assert_eq!(
        shared.walk(id(0), A, None).map(|e| e.frame()),
        Some(frame(1))
    );
}

#[test]
fn per_core_free_tables_frees_every_named_tree_into_the_freeing_core_after_a_grace_period() {
    let mut p = PerCore::new();
    for c in [1, 2] {
        p.fill(c, A, frame(1));
        p.fill(c, B, frame(2));
    }
    let allocated = p.allocated();
    // A walker of another core, inside its read section from before the frees: no grace
    // period can pass until it leaves.
    let walker = p.domain.register();
    let section = walker.read();
    // munmap of both pages by core 0: clear, then free the empty range.
    assert_eq!(
        p.clear(Targets::All, A..B + PAGE_SIZE),
        (true, vec![1, 2], vec![frame(1), frame(2)])
    );
    assert_eq!(p.t.owner_table_count(), 5);
    let (cache0, reader) = (&mut p.caches[0], &p.reader);
    p.t.free_tables(Targets::All, reader, cache0, 0..1 << 47, &p.domain);
    assert_eq!(
        (p.t.per_core(), p.t.owner_table_count()),
        (vec![1, 1, 1, 1], 1),
        "both copies' trees and the owner tree are back to their roots"
    );
    // The owner's, core 1's and core 2's tables went to core 0's cache and on, in three
    // batches, to RCU: core 0's own fill (3 owner tables, 3 of its own) allocates while the
    // walker may still be inside them...
    p.fill(0, A, frame(3));
    assert_eq!(
        p.allocated(),
        allocated + 6,
        "nothing reused before the grace period"
    );
    // ... and takes them once the grace period passed.
    drop(section);
    p.domain.barrier();
    p.fill(0, 0x80_0000_0000, frame(4));
    assert_eq!(p.allocated(), allocated + 6, "reused after it");
}

/// Without the record kept by the level-2 table that stays (`LeafUsers::absorb` in
/// `PageTables::free_in` removed) the second free leaves core 1's level-2 table linked:
/// "left: ([1, 3, 2, 1], 2) right: ([1, 2, 2, 1], 2)".
#[test]
fn per_core_free_tables_frees_the_copies_tables_under_leaves_freed_earlier() {
    let mut p = PerCore::new();
    // Core 1 copies A, core 2 copies B (the next leaf under the same level-2 table).
    p.fill(1, A, frame(1));
    p.fill(2, B, frame(2));
    assert_eq!(
        p.clear(Targets::All, A..B + PAGE_SIZE),
        (true, vec![1, 2], vec![frame(1), frame(2)])
    );
    // First free: only A's leaf (B's leaf and the level-2 table above stay).
    let leaf_a = A..A + 512 * PAGE_SIZE;
    let (cache0, reader) = (&mut p.caches[0], &p.reader);
    p.t.free_tables(Targets::All, reader, cache0, leaf_a, &p.domain);
    assert_eq!(
        (p.t.per_core(), p.t.owner_table_count()),
        (vec![1, 3, 4, 1], 4),
        "A's leaf went from the owner tree and core 1's tree; core 2's tree untouched"
    );
    // Second free, of the whole GiB: the owner's remaining leaf records only core 2, but core
    // 1's level-2 and level-3 tables above A's freed leaf go too (the owner's level-2 table
    // kept A's record).
    let gib = A..A + (1 << 30);
    let (cache0, reader) = (&mut p.caches[0], &p.reader);
    p.t.free_tables(Targets::All, reader, cache0, gib, &p.domain);
    assert_eq!(
        (p.t.per_core(), p.t.owner_table_count()),
        (vec![1, 2, 2, 1], 2),
        "every level-2 table and leaf under the GiB freed, the level-3 tables kept"
    );
    let (cache0, reader) = (&mut p.caches[0], &p.reader);
    p.t.free_tables(Targets::All, reader, cache0, 0..1 << 39, &p.domain);
    assert_eq!(
        (p.t.per_core(), p.t.owner_table_count()),
        (vec![1, 1, 1, 1], 1)
    );
}

#[test]
fn per_core_detach_discards_the_tree_and_edits_skip_detached_cores() {
    let mut p = PerCore::new();
    p.fill(3, A, frame(1));
    // Core 3 detaches.
    let mut cache3 = p.caches.pop().unwrap();
    p.t.detach(id(3), &mut cache3, &p.domain);
    cache3.drain(&p.domain);
    assert_eq!(p.walk(3, A), None);
    assert_eq!(p.t.per_core()[3], 1, "a detached core's tree is empty");
    let SpaceTables::PerCore(t) = &p.t else {
        unreachable!()
    };
    let mask = |cores: &[usize]| {
        let mut m = UserMask::default();
        for &c in cores {
            m.insert(UserBit::of(c, CORES));
        }
        m
    };
    let mut visited = Vec::new();
    t.for_each_user(&mask(&[0, 1, 2, 3]), |c, _| visited.push(c));
    assert_eq!(visited, [0, 1, 2], "a detached core's tree is not visited");
    // A core attaching to the slot starts from the empty tree and is visited again.
    p.caches.push(p.t.attach(id(3)).unwrap());
    assert_eq!(p.walk(3, A), None);
    visited.clear();
    t.for_each_user(&mask(&[1, 3]), |c, _| visited.push(c));
    assert_eq!(visited, [1, 3]);
}

#[test]
fn shared_organisation_is_one_tree_whose_entries_own_their_frames() {
    let t = SpaceTables::new(Organisation::Shared, CORES);
    assert_eq!(t.organisation(), Organisation::Shared);
    assert!(t.records_users());
    let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
    let reader = domain.register();
    let mut c0 = t.attach(id(0)).unwrap();
    t.fill(id(0), &mut c0, A, Prot::READ_WRITE, || Some(frame(5)))
        .unwrap();
    assert_eq!(
        t.walk(id(3), A, None).map(|e| e.frame()),
        Some(frame(5)),
        "every core walks the one tree"
    );
    let u = UserBit::of(2, CORES);
    assert!(t.walk(id(2), A, Some(u)).is_some());
    let mut users = UserMask::default();
    assert!(t.protect_range_noting(
        Targets::Cores(&set(&[0])),
        &reader,
        A..A + PAGE_SIZE,
        Prot::READ,
        Some(&mut users)
    ));
    assert_eq!(
        noted(&users),
        [2],
        "the leaf's record, whatever trees were named"
    );
    let mut out = Vec::new();
    assert!(t.clear_range_noting(Targets::All, &reader, A..A + PAGE_SIZE, &mut out, None));
    assert_eq!(
        out,
        [frame(5)],
        "the shared tree's entries own their frames"
    );
    assert!(!t.clear_range_noting(Targets::All, &reader, A..A + PAGE_SIZE, &mut out, None));
    t.free_tables(Targets::All, &reader, &mut c0, 0..1 << 47, &domain);
    assert_eq!(
        (t.table_count(), t.per_core(), t.owner_table_count()),
        (1, vec![], 0)
    );
    c0.drain(&domain);
}

/// A `Shared` of organisation `org` with two attached cores.
fn space(org: Organisation) -> (Shared, Core, Core) {
    let config = Builder::default()
        .memory(4 << 20)
        .max_cores(CORES)
        .validated()
        .unwrap();
    let sh = Shared::new(config, ShootdownPolicy::Targeted, org, None).unwrap();
    let (c0, c1) = (Core::attach(&sh).unwrap(), Core::attach(&sh).unwrap());
    (sh, c0, c1)
}

/// Core `core` fills `va` with `f` through the seam, as a fault would.
fn fault(sh: &Shared, core: &mut Core, va: u64, f: Frame) {
    let pte = sh
        .tables
        .fill(core.id, &mut core.tables, va, Prot::READ_WRITE, || Some(f))
        .unwrap();
    assert_eq!(pte.frame(), f);
}

fn translate(sh: &Shared, core: &mut Core, va: u64) -> (Option<usize>, bool) {
    let mut w = AccessWindow::open(sh, core);
    let flushed = w.flushed();
    (w.translate(va, Access::Read), flushed)
}

#[test]
fn access_path_walks_the_core_own_tree_and_a_discard_flushes_its_next_window() {
    let (sh, mut c0, mut c1) = space(Organisation::PerCore);
    assert_eq!(
        (c0.user, c1.user),
        (None, None),
        "per-core walks record nothing"
    );
    let f = c0.cache.alloc(sh.pool()).unwrap();
    let at = sh.pool().ptr(f) as usize;
    fault(&sh, &mut c0, A, f);
    assert_eq!(translate(&sh, &mut c0, A).0, Some(at));
    assert_eq!(
        translate(&sh, &mut c1, A).0,
        None,
        "core 1 faults: not its tree"
    );
    // Core 1's fault maps the owner's frame (its own closure's frame is not taken).
    fault(&sh, &mut c1, A, f);
    assert_eq!(translate(&sh, &mut c1, A).0, Some(at));
    // Core 0 discards its tree: its TLB still holds A, so its next window must flush.
    assert_eq!(c0.discard_tables(&sh), 3);
    assert_eq!(translate(&sh, &mut c0, A), (None, true));
    assert_eq!(translate(&sh, &mut c0, A), (None, false), "one flush");
    assert_eq!(translate(&sh, &mut c1, A).0, Some(at));
    // An unmap as the Linux bodies do it: the owner's frame back, the core still holding a
    // copy as the target (core 0 discarded its copy).
    let mut users = UserMask::default();
    let mut freed = Vec::new();
    assert!(sh.tables.clear_range_noting(
        Targets::All,
        &c0.reader,
        A..A + PAGE_SIZE,
        &mut freed,
        Some(&mut users)
    ));
    assert_eq!((freed, noted(&users)), (vec![f], vec![1]));
    c0.cache.free(sh.pool(), f);
    c0.detach(&sh);
    c1.detach(&sh);
}

#[test]
fn access_path_over_the_shared_tree_is_unchanged() {
    let (sh, mut c0, mut c1) = space(Organisation::Shared);
    assert!(
        c0.user.is_some(),
        "targeted shootdown of the shared tree records walkers"
    );
    let f = c0.cache.alloc(sh.pool()).unwrap();
    fault(&sh, &mut c0, A, f);
    let at = Some(sh.pool().ptr(f) as usize);
    assert_eq!(
        (translate(&sh, &mut c1, A).0, translate(&sh, &mut c0, A).0),
        (at, at)
    );
    assert_eq!(c0.discard_tables(&sh), 0, "nothing to discard");
    assert_eq!(translate(&sh, &mut c0, A), (at, false));
    let mut users = UserMask::default();
    let mut freed = Vec::new();
    assert!(sh.tables.clear_range_noting(
        Targets::All,
        &c0.reader,
        A..A + PAGE_SIZE,
        &mut freed,
        Some(&mut users)
    ));
    assert_eq!((freed, noted(&users)), (vec![f], vec![0, 1]));
    c0.cache.free(sh.pool(), f);
    c0.detach(&sh);
    c1.detach(&sh);
}

#[test]
fn per_core_attach_without_memory_for_the_root_fails_and_frees_the_slot() {
    let config = Builder::default()
        .memory(4 << 20)
        .max_cores(CORES)
        .validated()
        .unwrap();
    let sh = Shared::new(
        config,
        ShootdownPolicy::Targeted,
        Organisation::PerCore,
        None,
    )
    .unwrap();
    crate::fault_inject::TABLE_ALLOC.fail_nth(1);
    assert!(matches!(
        Core::attach(&sh),
        Err(crate::error::VmError::OutOfMemory(_))
    ));
    assert_eq!(sh.shootdown.cores(), 0, "the shootdown slot was given back");
    let mut c = Core::attach(&sh).unwrap();
    assert_eq!((c.id.index(), sh.tables.per_core()), (0, vec![1]));
    c.detach(&sh);
}
