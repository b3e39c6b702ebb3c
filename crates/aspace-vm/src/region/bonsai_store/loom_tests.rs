//! Loom models of the Bonsai region store against a fault (`--cfg loom`), on the real
//! `BonsaiMap`, `BonsaiStore::replace_window` and `PageTables`: the part specific to this store,
//! that a region leaving the set is marked (and, for `pervma`, detached after its readers)
//! before the one update that publishes the edit, and before the body touches its entries.
//! (`designs/interval/loom_tests.rs` models `fill_checked` against a hand-set mark; here the
//! mark comes from the store's own commit.)
//!
//! - `loom_bonsai_fill_never_survives_a_munmap_of_its_region`: `bonsai`'s lock-free fault
//!   (`fault_rcu`: lookup under a guard, `fill_checked` with the mark) against `munmap` of the
//!   region, after an edit that path-copied the region's node (A and C change around B). After
//!   the munmap no translation of the page remains, and a frame the fault installed was handed
//!   to the munmap (not leaked).
//! - `loom_bonsai_fault_during_a_split_never_uses_the_other_half`: the same fault against
//!   `mprotect(PROT_READ)` of the half of the region the page is in (a split): no writable
//!   translation remains after it.
//! - `loom_pervma_fill_under_the_region_lock_never_survives_a_munmap`: `pervma`'s fault (lookup,
//!   `VmaLock::try_read`, a fill that does NOT check the mark: the lock alone must protect it,
//!   as Linux's per-VMA path has no mark) against `munmap`.
//!
//! Mutations tried (session report): `replace_window` not marking the regions it removes fails
//! the first two; `write_lock_detach` not waiting for readers fails the third.
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test
//! --release -p aspace-vm --lib bonsai_store`.

use super::{BonsaiRegions, BonsaiStore};
use crate::frames::Frame;
use crate::page_table::{CheckedFill, PageTables};
use crate::region::store::{RcuRegions, RegionStore};
use crate::region::{Attrs, Region};
use crate::types::{Access, Prot, Sharing, PAGE_SIZE};
use loom::thread;
use std::sync::Arc;

const P: u64 = PAGE_SIZE;
/// The faulting page: B's second page.
const F: u64 = 3 * P;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.max_branches = 50_000;
    b.check(f);
}

fn attrs(prot: Prot, anon: u64) -> Attrs {
    Attrs {
        prot,
        sharing: Sharing::Private,
        flags: 0,
        anon: crate::region::AnonId::decode(anon),
        shm_base: 0,
    }
}

/// A = `[P, 2P)` r, B = `[2P, 4P)` rw (anon 7), C = `[4P, 5P)` r.
fn three_regions() -> [Region; 3] {
    [
        Region {
            start: P,
            end: 2 * P,
            attrs: attrs(Prot::READ, 0),
        },
        Region {
            start: 2 * P,
            end: 4 * P,
            attrs: attrs(Prot::READ_WRITE, 7),
        },
        Region {
            start: 4 * P,
            end: 5 * P,
            attrs: attrs(Prot::READ, 0),
        },
    ]
}

/// An edit of `range` as a Linux body runs it on the store: read the window, map each old
/// region through `edit` (plus `extra` new regions), replace; then `between` (the body's
/// page-table work).
fn store_edit(
    regions: &BonsaiRegions,
    range: std::ops::Range<u64>,
    edit: impl Fn(&Region) -> Vec<Region>,
    between: impl FnOnce(),
) {
    // SAFETY: the model's only editor.
    let mut store = unsafe { BonsaiStore::new(regions) };
    let mut old = Vec::new();
    store.read_window(range, &mut old);
    let new: Vec<Region> = old.iter().flat_map(&edit).collect();
    store.reserve(&new).unwrap();
    store.replace_window(&old, &new).unwrap();
    between();
}

/// The regions A, B, C and the page tables with B's first page mapped (so the leaf exists and a
/// lock-free fill may run).
fn setup(domain: &aspace_rcu::Domain) -> (Arc<BonsaiRegions>, Arc<PageTables>) {
    let regions = Arc::new(BonsaiRegions::new(domain.clone()));
    {
        // SAFETY: no other editor yet.
        let mut store = unsafe { BonsaiStore::new(&regions) };
        store.replace_window(&[], &three_regions()).unwrap();
    }
    let pt = Arc::new(PageTables::new(3));
    pt.fill(&mut pt.cache(0), 2 * P, Prot::READ_WRITE, || {
        Some(Frame::from_index(2))
    })
    .unwrap();
    (regions, pt)
}

/// `bonsai`'s lock-free write fault at `F` (`syscalls::fault_rcu`'s lookup and checked fill)
/// with frame 1: `None` when the lookup found no region or refused the rights.
fn bonsai_fault(
    regions: Arc<BonsaiRegions>,
    pt: Arc<PageTables>,
    reader: aspace_rcu::Reader,
) -> thread::JoinHandle<Option<CheckedFill>> {
    thread::spawn(move || {
        let guard = reader.read();
        let (_, stored) = regions.lookup_rcu(F, &guard)?;
        let a = stored.attrs();
        if !a.prot.allows(Access::Write) {
            return None;
        }
        pt.fill_checked(
            F,
            a.prot,
            Access::Write,
            || !stored.is_replaced(),
            || Some(Frame::from_index(1)),
        )
        .ok()
    })
}

#[test]
fn loom_bonsai_fill_never_survives_a_munmap_of_its_region() {
    model(|| {
        let domain = aspace_rcu::Domain::new();
        let (regions, pt) = setup(&domain);
        let fault = bonsai_fault(Arc::clone(&regions), Arc::clone(&pt), domain.register());
        // mprotect(P, 4P, rw): A and C change, B is kept (its node path-copied).
        store_edit(
            &regions,
            P..5 * P,
            |r| {
                let mut r = *r;
                r.attrs.prot = Prot::READ_WRITE;
                vec![r]
            },
            || {},
        );
        // munmap(B): the store marks B, publishes, then the body clears B's entries.
        let mut freed = Vec::new();
        store_edit(
            &regions,
            2 * P..4 * P,
            |r| if r.start == 2 * P { vec![] } else { vec![*r] },
            || pt.clear_range(2 * P..4 * P, &mut freed),
        );
        let outcome = fault.join().unwrap();
        assert_eq!(
            pt.lookup(F),
            None,
            "a lock-free fault filled after the munmap cleared the page"
        );
        if outcome == Some(CheckedFill::Filled { new_frame: true }) {
            assert!(
                freed.contains(&Frame::from_index(1)),
                "the fault's frame leaked"
            );
        }
    });
}

#[test]
fn loom_bonsai_fault_during_a_split_never_uses_the_other_half() {
    model(|| {
        let domain = aspace_rcu::Domain::new();
        let (regions, pt) = setup(&domain);
        let fault = bonsai_fault(Arc::clone(&regions), Arc::clone(&pt), domain.register());
        // mprotect(3P, P, r): B splits into [2P, 3P) rw and [3P, 4P) r, then the body
        // downgrades the second half's entries.
        store_edit(
            &regions,
            3 * P..4 * P,
            |r| {
                if r.start != 2 * P {
                    return vec![*r];
                }
                let mut lo = *r;
                lo.end = 3 * P;
                let mut hi = *r;
                hi.start = 3 * P;
                hi.attrs.prot = Prot::READ;
                vec![lo, hi]
            },
            || {
                pt.protect_range(3 * P..4 * P, Prot::READ);
            },
        );
        fault.join().unwrap();
        if let Some(pte) = pt.lookup(F) {
            assert!(
                !pte.prot().allows(Access::Write),
                "a fault during the split wrote through the other half's rights"
            );
        }
    });
}

#[test]
fn loom_pervma_fill_under_the_region_lock_never_survives_a_munmap() {
    model(|| {
        let domain = aspace_rcu::Domain::new();
        let (regions, pt) = setup(&domain);
        let reader = domain.register();
        let fault = {
            let (regions, pt) = (Arc::clone(&regions), Arc::clone(&pt));
            thread::spawn(move || {
                let t = {
                    let guard = reader.read();
                    let (_, t) = regions.lookup_tree(F, &guard)?;
                    if !t.lock.try_read() {
                        return None; // Falls back to the space lock.
                    }
                    t as *const super::TreeRegion
                };
                // SAFETY: read-locked, so still in the set (`pervma`'s resolve).
                let t = unsafe { &*t };
                // No mark check: the region lock alone must order the fill before the zap.
                let r = pt
                    .fill_checked(
                        F,
                        Prot::READ_WRITE,
                        Access::Write,
                        || true,
                        || Some(Frame::from_index(1)),
                    )
                    .ok();
                t.lock.read_unlock();
                r
            })
        };
        let mut freed = Vec::new();
        store_edit(
            &regions,
            2 * P..4 * P,
            |r| if r.start == 2 * P { vec![] } else { vec![*r] },
            || pt.clear_range(2 * P..4 * P, &mut freed),
        );
        let outcome = fault.join().unwrap();
        assert_eq!(
            pt.lookup(F),
            None,
            "a per-region fault filled after the munmap cleared the page"
        );
        if outcome == Some(CheckedFill::Filled { new_frame: true }) {
            assert!(
                freed.contains(&Frame::from_index(1)),
                "the fault's frame leaked"
            );
        }
    });
}
