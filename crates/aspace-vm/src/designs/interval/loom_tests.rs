//! Loom models of the `interval` design's lock-free fault (stage 1) against an overlapping edit,
//! on the real `PageTables` and `StoredRegion` (`--cfg loom`): against `munmap`, against
//! `mprotect`, with the leaf installed by a third core behind the editor's walk, and against the
//! freeing of the fault's page tables while it holds the leaf lock.
//!
//! The fault runs `PageTables::fill_checked` with the region's `is_replaced` check, as
//! `syscalls::fault_rcu` does; the editor marks the region replaced and then clears
//! (`munmap`) or downgrades (`mprotect`) its entries, as a window's edit followed by the Linux
//! body does. Checked after both: no translation of the region's page survives the `munmap`,
//! and none allows writing after the `mprotect` to read-only; a frame the fault installed was
//! handed to the editor (not leaked).
//!
//! The copy model (`loom_stage1_fill_never_survives_a_munmap_of_a_region_a_commit_copied`) runs
//! the real path instead of a hand-set mark: the region skiplist built by `region_skiplist`, two
//! windows (`Window::lock`, `read_window`, `replace_window`, `commit`) for an `mprotect` over
//! three regions that copies the unchanged middle one and a `munmap` of that copy, against a
//! fault that queried the middle region's old node.
//!
//! Mutations tried, each caught (`cargo test` output in the session note):
//! - the skiplist commit not marking the nodes it takes out (`region_skiplist` without
//!   `with_leave_mark`): the copy model fails ("a lock-free fault on a copied region filled
//!   after the munmap cleared the page"), as did the regression tests of issue 17 through the
//!   public calls;
//! - `replace_window` not marking the region it drops (only the commit's mark left, which comes
//!   after the body cleared the entries): the copy model fails the same way;
//! - the fault not checking the mark (`live` always true): all three models fail ("a lock-free
//!   fault installed a translation after the munmap cleared the page", "... left a writable
//!   translation after mprotect(PROT_READ)");
//! - `fill_checked` without its `SeqCst` fence, or `mark_replaced` without its fence: the third
//!   model fails ("a lock-free fault filled a leaf the munmap's walk had not found"); the first
//!   two pass, as they should (the leaf lock orders them). The protocol uses fences rather than
//!   `SeqCst` loads and stores because loom models `SeqCst` accesses only as acquire/release
//!   (with `SeqCst` walk loads and mark instead, the third model failed though the C++ model
//!   allows the argument);
//! - `PageTables::collect` reading a freed level-2 table's leaf entries with a plain load instead
//!   of unlinking each (waiting out a lock holder): the fourth model aborts ("double free or
//!   corruption": the fault's unlock stored the leaf back into the freed table, which then
//!   handed the same leaf out twice).
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test
//! --release -p aspace-vm --lib interval`.

use crate::frames::Frame;
use crate::page_table::{CheckedFill, PageTables};
use crate::region::store::StoredRegion;
use crate::region::{Attrs, Region};
use crate::types::{Access, Prot, Sharing, PAGE_SIZE};
use loom::thread;
use std::sync::Arc;

/// The faulting page (leaf index 1 of the first leaf).
const A: u64 = PAGE_SIZE;
/// Another region's page in the same leaf table.
const B: u64 = 2 * PAGE_SIZE;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.max_branches = 50_000;
    b.check(f);
}

/// A private read-write region of one page at `A` with an anon identity (so a write fault may
/// run in stage 1).
fn region() -> StoredRegion {
    StoredRegion::new(&Region {
        start: A,
        end: A + PAGE_SIZE,
        attrs: Attrs {
            prot: Prot::READ_WRITE,
            sharing: Sharing::Private,
            flags: 0,
            anon: crate::region::AnonId::decode(7),
            shm_base: 0,
        },
    })
}

/// Stage 1 of a write fault at `A` in `r` with frame `x`.
fn stage1(pt: &PageTables, r: &StoredRegion, x: Frame) -> CheckedFill {
    pt.fill_checked(
        A,
        Prot::READ_WRITE,
        Access::Write,
        || !r.is_replaced(),
        || Some(x),
    )
    .expect("a frame is always given")
}

/// The page tables with another region's page mapped at `B` (so `A`'s leaf exists), the
/// region at `A`, and a thread running stage 1 of a write fault at `A` with frame 1.
fn fault_beside_a_mapped_page() -> (
    Arc<PageTables>,
    Arc<StoredRegion>,
    Frame,
    thread::JoinHandle<CheckedFill>,
) {
    let pt = Arc::new(PageTables::new(3));
    let r = Arc::new(region());
    let (x, y) = (Frame::from_index(1), Frame::from_index(2));
    pt.fill(&mut pt.cache(0), B, Prot::READ, || Some(y))
        .unwrap();
    let fault = {
        let (pt, r) = (Arc::clone(&pt), Arc::clone(&r));
        thread::spawn(move || stage1(&pt, &r, x))
    };
    (pt, r, x, fault)
}

#[test]
fn loom_stage1_fill_never_survives_an_overlapping_munmap() {
    model(|| {
        let (pt, r, x, fault) = fault_beside_a_mapped_page();
        // munmap of the region: mark, then clear.
        r.mark_replaced();
        let mut freed = Vec::new();
        pt.clear_range(A..A + PAGE_SIZE, &mut freed);
        let outcome = fault.join().unwrap();
        assert_eq!(
            pt.lookup(A),
            None,
            "a lock-free fault installed a translation after the munmap cleared the page"
        );
        if outcome == (CheckedFill::Filled { new_frame: true }) {
            assert_eq!(freed, vec![x], "the fault's frame was freed by the munmap");
        }
    });
}

#[test]
fn loom_stage1_fill_never_keeps_write_access_after_an_overlapping_mprotect() {
    model(|| {
        let (pt, r, _, fault) = fault_beside_a_mapped_page();
        // mprotect(PROT_READ) of the region: mark, then downgrade.
        r.mark_replaced();
        pt.protect_range(A..A + PAGE_SIZE, Prot::READ);
        fault.join().unwrap();
        if let Some(pte) = pt.lookup(A) {
            assert!(
                !pte.prot().allows(Access::Write),
                "a lock-free fault left a writable translation after mprotect(PROT_READ)"
            );
        }
    });
}

#[test]
fn loom_stage1_fill_sees_the_mark_when_the_leaf_appears_behind_the_munmaps_walk() {
    model(|| {
        let pt = Arc::new(PageTables::new(3));
        let r = Arc::new(region());
        let (x, y) = (Frame::from_index(1), Frame::from_index(2));
        // No table yet: a third core's fault of another region in the same leaf installs it
        // (stage 2 does this under its own region's lock, which the munmap does not hold).
        let installer = {
            let pt = Arc::clone(&pt);
            thread::spawn(move || {
                pt.fill(&mut pt.cache(2), B, Prot::READ, || Some(y))
                    .unwrap();
            })
        };
        let fault = {
            let (pt, r) = (Arc::clone(&pt), Arc::clone(&r));
            thread::spawn(move || stage1(&pt, &r, x))
        };
        r.mark_replaced();
        let mut freed = Vec::new();
        pt.clear_range(A..A + PAGE_SIZE, &mut freed);
        installer.join().unwrap();
        fault.join().unwrap();
        assert_eq!(
            pt.lookup(A),
            None,
            "a lock-free fault filled a leaf the munmap's walk had not found"
        );
    });
}

#[test]
fn loom_stage1_fill_holding_a_leaf_lock_never_leaves_the_leaf_in_a_freed_table() {
    model(|| {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let pt = Arc::new(PageTables::new(3));
        let r = Arc::new(region());
        let (x, y) = (Frame::from_index(1), Frame::from_index(2));
        // The region's first page is mapped (so the leaf exists); a fault fills the second
        // while the munmap of the whole region clears and frees every table.
        let mut ptc = pt.cache(0);
        pt.fill(&mut ptc, A, Prot::READ_WRITE, || Some(x)).unwrap();
        let reader = domain.register();
        let fault = {
            let (pt, r) = (Arc::clone(&pt), Arc::clone(&r));
            thread::spawn(move || {
                let _guard = reader.read();
                pt.fill_checked(
                    B,
                    Prot::READ_WRITE,
                    Access::Write,
                    || !r.is_replaced(),
                    || Some(y),
                )
                .expect("a frame is always given")
            })
        };
        r.mark_replaced();
        let mut freed = Vec::new();
        pt.clear_range(A..B + PAGE_SIZE, &mut freed);
        pt.free_tables(&mut ptc, 0..1 << 47, &domain);
        let outcome = fault.join().unwrap();
        if outcome == (CheckedFill::Filled { new_frame: true }) {
            assert!(
                freed.contains(&y),
                "the fault's frame was freed by the munmap"
            );
        }
        assert_eq!(pt.table_count(), 1);
        domain.barrier();
        // The freed tables are reused for another address with the same lower indices: each
        // must come back empty (a lock holder's unlock must not have stored the leaf back into
        // a freed table, or this fill would find a stale leaf and install fewer tables).
        let far = B + (1 << 39);
        pt.fill(&mut ptc, far, Prot::READ, || Some(x)).unwrap();
        assert_eq!(
            pt.table_count(),
            4,
            "the reused level-2 table came back with a stale leaf entry"
        );
        assert_eq!(pt.lookup(far - PAGE_SIZE), None);
    });
}

/// The three regions of the copy model: A = `[P, 2P)` r, B = `[2P, 4P)` rw with an anon
/// identity, C = `[4P, 5P)` r.
fn three_regions() -> [Region; 3] {
    let attrs = |prot, anon| Attrs {
        prot,
        sharing: Sharing::Private,
        flags: 0,
        anon: crate::region::AnonId::decode(anon),
        shm_base: 0,
    };
    let p = PAGE_SIZE;
    [
        Region {
            start: p,
            end: 2 * p,
            attrs: attrs(Prot::READ, 0),
        },
        Region {
            start: 2 * p,
            end: 4 * p,
            attrs: attrs(Prot::READ_WRITE, 7),
        },
        Region {
            start: 4 * p,
            end: 5 * p,
            attrs: attrs(Prot::READ, 0),
        },
    ]
}

/// One edit through a real window, as a Linux body does it: lock, read, reserve, replace
/// (marking what it drops), then `between` (the body's page-table work), then the commit.
fn window_edit(
    map: &aspace_map::SkipListMap<StoredRegion>,
    range: std::ops::Range<u64>,
    edit: impl Fn(&Region) -> Option<Region>,
    between: impl FnOnce(),
) {
    use crate::region::store::RegionStore;
    let count = crate::region::count::RegionCount::Shared(aspace_sync::AtomicCounter::new(64));
    let shmem = crate::region::shmem::ShmemNumbers::default();
    let mut w = crate::designs::window::Window::lock(map, range.clone(), &count, &shmem, 0);
    let mut old = Vec::new();
    w.read_window(range, &mut old);
    let new: Vec<Region> = old.iter().filter_map(&edit).collect();
    w.reserve(&new).unwrap();
    w.replace_window(&old, &new).unwrap();
    between();
    w.commit();
}

#[test]
fn loom_stage1_fill_never_survives_a_munmap_of_a_region_a_commit_copied() {
    model(|| {
        let p = PAGE_SIZE;
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let map = Arc::new(crate::region::store::region_skiplist(domain.clone(), None));
        let [a, b, c] = three_regions();
        for r in [a, b, c] {
            aspace_map::IntervalMap::map(&*map, r.start..r.end, Some(StoredRegion::new(&r)))
                .unwrap();
        }
        let pt = Arc::new(PageTables::new(3));
        let (x, y) = (Frame::from_index(1), Frame::from_index(2));
        // B's first page is mapped, so the leaf exists and stage 1 may fill B's second page.
        pt.fill(&mut pt.cache(0), b.start, Prot::READ_WRITE, || Some(y))
            .unwrap();
        let reader = domain.register();
        let fault = {
            let (pt, map) = (Arc::clone(&pt), Arc::clone(&map));
            thread::spawn(move || {
                // `syscalls::fault_rcu`: query, then the checked fill.
                use aspace_map::IntervalMap;
                let guard = reader.read();
                // None: the munmap came first (the fault reports `Unmapped`).
                let (_, stored) = map.query(3 * p, &guard)?;
                pt.fill_checked(
                    3 * p,
                    Prot::READ_WRITE,
                    Access::Write,
                    || !stored.is_replaced(),
                    || Some(x),
                )
                .ok()
            })
        };
        // mprotect(P, 4P, rw): A and C change, B is kept and copied by the commit.
        window_edit(
            &map,
            a.start..c.end,
            |r| {
                let mut r = *r;
                r.attrs.prot = Prot::READ_WRITE;
                Some(r)
            },
            || {},
        );
        // munmap(B): the window drops (and marks) the copy, then the body clears B's entries.
        let mut freed = Vec::new();
        window_edit(
            &map,
            b.start..b.end,
            |r| (r.start != b.start).then_some(*r),
            || pt.clear_range(b.start..b.end, &mut freed),
        );
        fault.join().unwrap();
        assert_eq!(
            pt.lookup(3 * p),
            None,
            "a lock-free fault on a copied region filled after the munmap cleared the page"
        );
    });
}

/// `interval`'s store for the shared models (`designs/lock_free_loom.rs`): the region skiplist
/// built by `region_skiplist`, edited through a real window (lock, the edit, the body's
/// page-table work, commit).
pub(crate) struct IntervalLoom {
    map: aspace_map::SkipListMap<StoredRegion>,
    count: crate::region::count::RegionCount,
    shmem: crate::region::shmem::ShmemNumbers,
}

impl crate::designs::lock_free_loom::LoomStore for IntervalLoom {
    type Regions = aspace_map::SkipListMap<StoredRegion>;

    fn build(domain: &aspace_rcu::Domain, regions: &[Region]) -> IntervalLoom {
        let map = crate::region::store::region_skiplist(domain.clone(), None);
        for r in regions {
            aspace_map::IntervalMap::map(&map, r.start..r.end, Some(StoredRegion::new(r))).unwrap();
        }
        IntervalLoom {
            map,
            count: crate::region::count::RegionCount::Shared(aspace_sync::AtomicCounter::new(64)),
            shmem: crate::region::shmem::ShmemNumbers::default(),
        }
    }

    fn regions(&self) -> &Self::Regions {
        &self.map
    }

    fn edit(
        &self,
        range: std::ops::Range<u64>,
        f: &dyn Fn(Option<Attrs>) -> Option<Attrs>,
        body: &mut dyn FnMut(),
    ) {
        use crate::region::store::RegionStore;
        let mut w = crate::designs::window::Window::lock(
            &self.map,
            range.clone(),
            &self.count,
            &self.shmem,
            0,
        );
        let mut bufs = crate::region::plan::EditBuffers::default();
        w.edit(
            &mut bufs,
            range,
            f,
            crate::region::plan::OnOverlap::Rewrite,
            64,
        )
        .unwrap();
        body();
        w.commit();
    }
}
