//! Loom models every design with lock-free faults shares (`--cfg loom`): the real lock-free
//! fault body (`syscalls::fault_rcu_in`, the body of `fault_rcu`) on the real `PageTables`,
//! against an edit through the design's real store (`RegionStore::edit`: `read_window`, the
//! plan, `reserve`, `replace_window`), followed by the page-table work the Linux body does after
//! the edit, then the store's commit if it has one. One [`LoomStore`] per design; the models are
//! instantiated for each by one line at the end of this file ([`models!`]).
//!
//! - **(a) fill versus `munmap`** (`loom_lock_free_fill_never_survives_an_munmap_of_its_region`):
//!   a write fault on the second page of a two-page region whose first page is mapped (so the
//!   leaf exists and the fault may fill lock-free) against `munmap` of the whole region (the
//!   edit removing it, then `clear_range` of its pages, collecting the frames it frees). After
//!   both: no translation of the region remains, and every frame the region had (the first
//!   page's, and the fault's if it installed one) was collected by the `munmap` (none leaked).
//! - **(b) fill versus a split** (`loom_lock_free_fill_never_uses_the_other_half_of_a_split`):
//!   the same fault (write, on the region's second page) against `mprotect(PROT_READ)` of that
//!   second page only: the edit splits the region into a read-write first half and a read-only
//!   second half, then `protect_range` downgrades the second half's entries, as
//!   `mprotect_locked` does. After both: the second page has no writable translation (the fault
//!   never used the old region's rights for the half it does not belong to).
//!
//! Mutations, each making both models fail (outputs quoted in the issue-19 report):
//! - **the store's commit not marking** what leaves (for `hybrid`: the first loop of
//!   `TreeEdit::replace_window` removed): (a) fails with "a lock-free fault installed a
//!   translation after the munmap cleared its region", (b) with "a lock-free fault used the
//!   read-write half of a split for a page of its read-only half";
//! - **the checked fill not checking the mark** (`fault_rcu_in` passing `|| true` as `live` to
//!   `fill_checked`): the same two failures, for every design.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=2 cargo test
//! --release -p aspace-vm --tests loom_lock_free`.

use super::syscalls::fault_rcu_in;
use crate::error::Fault;
use crate::frames::Frame;
use crate::page_table::organisation::{Organisation, SpaceTables};
use crate::region::plan::{EditBuffers, OnOverlap};
use crate::region::rcu_store::{RcuTree, TreeToken};
use crate::region::store::{RcuRegions, RegionStore};
use crate::region::{AnonId, Attrs, Region};
use crate::shootdown::CoreId;
use crate::types::{Access, Prot, Sharing, PAGE_SIZE};
use loom::thread;
use std::ops::Range;
use std::sync::Arc;

/// A lock-free design's region store, as the models drive it.
pub(crate) trait LoomStore: Send + Sync + 'static {
    /// What `fault_rcu` searches.
    type Regions: RcuRegions;
    /// A store holding `regions` (sorted, disjoint), freeing through `domain`.
    fn build(domain: &aspace_rcu::Domain, regions: &[Region]) -> Self;
    /// The lock-free lookup.
    fn regions(&self) -> &Self::Regions;
    /// One edit of `range` through the store's edit path with `f` (as a Linux body's
    /// `RegionStore::edit`), then `body` (the body's page-table work), then the store's commit.
    fn edit(
        &self,
        range: Range<u64>,
        f: &dyn Fn(Option<Attrs>) -> Option<Attrs>,
        body: &mut dyn FnMut(),
    );
}

/// `hybrid`'s store: the RCU tree, its token under a (loom) mutex as the design keeps it under
/// its space lock.
pub(crate) struct HybridLoom {
    tree: RcuTree,
    token: crate::sync::Mutex<TreeToken>,
}

impl LoomStore for HybridLoom {
    type Regions = RcuTree;

    fn build(domain: &aspace_rcu::Domain, regions: &[Region]) -> HybridLoom {
        let (tree, mut token) = RcuTree::new(domain.clone());
        {
            let mut t = tree.edit(&mut token);
            for r in regions {
                t.replace_window(&[], std::slice::from_ref(r)).unwrap();
            }
        }
        HybridLoom {
            tree,
            token: crate::sync::Mutex::new(token),
        }
    }

    fn regions(&self) -> &RcuTree {
        &self.tree
    }

    fn edit(
        &self,
        range: Range<u64>,
        f: &dyn Fn(Option<Attrs>) -> Option<Attrs>,
        body: &mut dyn FnMut(),
    ) {
        let mut token = self.token.lock();
        let mut t = self.tree.edit(&mut token);
        let mut bufs = EditBuffers::default();
        t.edit(&mut bufs, range, f, OnOverlap::Rewrite, 64).unwrap();
        body();
    }
}

/// `bonsai`'s (and `pervma`'s) store: the Bonsai regions, edited through a `BonsaiStore` made
/// under a (loom) mutex standing in for the space lock (review 2, issue 19).
pub(crate) struct BonsaiLoom {
    regions: crate::region::bonsai_store::BonsaiRegions,
    space: crate::sync::Mutex<()>,
}

impl LoomStore for BonsaiLoom {
    type Regions = crate::region::bonsai_store::BonsaiRegions;

    fn build(domain: &aspace_rcu::Domain, regions: &[Region]) -> BonsaiLoom {
        let r = crate::region::bonsai_store::BonsaiRegions::new(domain.clone());
        {
            // SAFETY: no other store of `r` exists yet.
            let mut s = unsafe { crate::region::bonsai_store::BonsaiStore::new(&r) };
            s.replace_window(&[], regions).unwrap();
        }
        BonsaiLoom {
            regions: r,
            space: crate::sync::Mutex::new(()),
        }
    }

    fn regions(&self) -> &Self::Regions {
        &self.regions
    }

    fn edit(
        &self,
        range: Range<u64>,
        f: &dyn Fn(Option<Attrs>) -> Option<Attrs>,
        body: &mut dyn FnMut(),
    ) {
        let _space = self.space.lock();
        // SAFETY: every edit holds `space`.
        let mut s = unsafe { crate::region::bonsai_store::BonsaiStore::new(&self.regions) };
        let mut bufs = EditBuffers::default();
        s.edit(&mut bufs, range, f, OnOverlap::Rewrite, 64).unwrap();
        body();
    }
}

/// Runs `f` under loom with the crate's bounds (preemptions from `LOOM_MAX_PREEMPTIONS`, else 2).
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.max_branches = 50_000;
    b.check(f);
}

/// The faulting region `[P, 3P)`, private read-write with an anon identity (a write fault may
/// fill lock-free).
fn region() -> Region {
    Region {
        start: PAGE_SIZE,
        end: 3 * PAGE_SIZE,
        attrs: Attrs {
            prot: Prot::READ_WRITE,
            sharing: Sharing::Private,
            flags: 0,
            anon: AnonId::decode(7),
            shm_base: 0,
        },
    }
}

/// The store with [`region`], the page tables with its first page mapped (frame 2), and a
/// thread running the lock-free write fault of its second page (frame 1).
#[allow(clippy::type_complexity)]
fn fault_on_the_second_page<S: LoomStore>() -> (
    Arc<S>,
    Arc<SpaceTables>,
    aspace_rcu::Domain,
    thread::JoinHandle<Result<Result<bool, Fault>, super::syscalls::Retry>>,
) {
    let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
    let store = Arc::new(S::build(&domain, &[region()]));
    let pt = Arc::new(SpaceTables::new(Organisation::Shared, 3));
    let mut cache = pt.attach(CoreId::for_tests(0)).unwrap();
    pt.fill(
        CoreId::for_tests(0),
        &mut cache,
        PAGE_SIZE,
        Prot::READ_WRITE,
        || Some(Frame::from_index(2)),
    )
    .unwrap();
    let reader = domain.register();
    let fault = {
        let (store, pt) = (Arc::clone(&store), Arc::clone(&pt));
        thread::spawn(move || {
            let guard = reader.read();
            let id = CoreId::for_tests(1);
            let mut cache = pt.attach(id).unwrap();
            fault_rcu_in(
                (&pt, id, &mut cache),
                store.regions(),
                &guard,
                2 * PAGE_SIZE,
                Access::Write,
                || Some(Frame::from_index(1)),
            )
        })
    };
    (store, pt, domain, fault)
}

/// Model (a) (module doc).
pub(crate) fn fill_never_survives_an_munmap_of_its_region<S: LoomStore>() {
    model(|| {
        let (store, pt, domain, fault) = fault_on_the_second_page::<S>();
        let mut freed = Vec::new();
        let r = region();
        store.edit(r.start..r.end, &|_| None, &mut || {
            pt.tree(CoreId::for_tests(0))
                .clear_range(r.start..r.end, &mut freed)
        });
        let outcome = fault.join().unwrap();
        assert_eq!(
            pt.tree(CoreId::for_tests(0)).lookup(2 * PAGE_SIZE),
            None,
            "a lock-free fault installed a translation after the munmap cleared its region"
        );
        assert_eq!(pt.tree(CoreId::for_tests(0)).lookup(PAGE_SIZE), None);
        assert!(freed.contains(&Frame::from_index(2)));
        if outcome == Ok(Ok(true)) {
            assert!(
                freed.contains(&Frame::from_index(1)),
                "the fault's frame leaked: the munmap did not free it"
            );
        }
        drop(store);
        domain.barrier();
    });
}

/// Model (b) (module doc).
pub(crate) fn fill_never_uses_the_other_half_of_a_split<S: LoomStore>() {
    model(|| {
        let (store, pt, domain, fault) = fault_on_the_second_page::<S>();
        let half = 2 * PAGE_SIZE..3 * PAGE_SIZE;
        store.edit(
            half.clone(),
            &|a| {
                a.map(|a| Attrs {
                    prot: Prot::READ,
                    ..a
                })
            },
            &mut || {
                pt.tree(CoreId::for_tests(0))
                    .protect_range(half.clone(), Prot::READ);
            },
        );
        let _ = fault.join().unwrap();
        if let Some(pte) = pt.tree(CoreId::for_tests(0)).lookup(2 * PAGE_SIZE) {
            assert!(
                !pte.prot().allows(Access::Write),
                "a lock-free fault used the read-write half of a split for a page of its \
                 read-only half"
            );
        }
        // The half that stays read-write keeps its page.
        assert!(pt.tree(CoreId::for_tests(0)).lookup(PAGE_SIZE).is_some());
        drop(store);
        domain.barrier();
    });
}

/// The models, instantiated for the store `$store` (a [`LoomStore`]).
macro_rules! models {
    ($store:ty) => {
        #[test]
        fn loom_lock_free_fill_never_survives_an_munmap_of_its_region() {
            $crate::designs::lock_free_loom::fill_never_survives_an_munmap_of_its_region::<$store>(
            );
        }

        #[test]
        fn loom_lock_free_fill_never_uses_the_other_half_of_a_split() {
            $crate::designs::lock_free_loom::fill_never_uses_the_other_half_of_a_split::<$store>();
        }
    };
}

// Every design with lock-free faults, one line each.
mod hybrid {
    models!(super::HybridLoom);
}
mod interval {
    models!(crate::designs::interval::loom_tests::IntervalLoom);
}
mod bonsai {
    models!(super::BonsaiLoom);
}
