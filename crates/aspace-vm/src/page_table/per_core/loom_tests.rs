//! Loom models of per-core page-table reclamation (`--cfg loom`), on the real `PerCoreTables`,
//! `SpaceTables` and `aspace_rcu` domain (`per_core.rs`, "Reclamation").
//!
//! `A` is a page of core 1's tree; `B = A + 2^39` lies one root entry above, so its indices at
//! levels 3, 2 and 1 equal `A`'s, and a core's cache (LIFO, one table per level) hands `B`
//! exactly the three tables `A` used: anyone still inside `A`'s old level-3 table follows `B`'s
//! entries down to `B`'s translation.
//!
//! Models:
//! - `loom_a_core_walk_never_sees_a_table_the_freeing_core_reused`: core 1 walks `A` in its
//!   tree (in its read section, as the access path does); core 0, an editor, clears `A` in core
//!   1's tree and frees its tables into core 0's own cache, waits out the grace period, and
//!   fills `B` in core 0's own tree, reusing them. Checked: the walk answers `None` or `A`'s
//!   frame, never `B`'s, and `B` really reused the tables.
//! - `loom_an_editor_inside_a_discarded_tree_never_clears_its_refill`: core 0 clears `A`
//!   through the seam (`SpaceTables::clear_range_noting`: the owner entry, then core 1's copy,
//!   core 1 having filled `A` through the seam) while
//!   core 1 discards its tree, waits out the grace period and refills `B` into the same three
//!   tables. Checked: `B`'s entry survives (the editor, inside its read section, finished with
//!   the old tables before their reuse), and the refill reused them.
//! - `loom_discard_and_a_concurrent_free_unlink_each_table_once`: core 1 discards its tree
//!   while core 0 frees the (cleared) GiB around `A` in it, which descends through the level-3
//!   table the discard is taking apart and races it for the level-2 entry. Checked: the tree's
//!   count ends at its root exactly (no table unlinked twice, none left linked).
//!
//! - `loom_a_lock_free_copy_never_outlives_the_editors_clear`: core 1's lock-free fill of `A`
//!   (`PerCoreTables::fill_checked`, in its read section, `live()` reading the region's mark)
//!   races core 0, an editor that marks the region (a store and a `SeqCst` fence, as
//!   `StoredRegion::mark_replaced`) and clears `A` (the owner entry, then the copies of the
//!   cores the owner leaf records: `per_core/owner.rs`). Checked: no copy of `A` is left
//!   without its owner entry, and if the fill wrote a copy, the editor noted core 1 (its copy
//!   was cleared by this edit: core 1 is a shootdown target).
//!
//! Mutations, each applied to the real code and seen to fail:
//! - first model, `TablePool::retire` calling `pool.recycle(batch, slot)` at once instead of
//!   through `domain.call` (no grace period): "assertion `left == right` failed: a walk
//!   returned a translation from a table reused by the freeing core";
//! - second model, the per-core arm of `SpaceTables::clear_range_noting` without its read
//!   section (its `reader.read()` removed; re-run with the owner tree, same failure):
//!   "assertion `left == right` failed: the editor cleared a translation of a reused table";
//! - third model, `PageTables::discard_subtree` taking entries by a load and a store instead of
//!   `unlink`'s compare-exchange: "a table unlinked twice, or one left linked: 0 tables" (the
//!   discard and the free both retired the level-2 table and its leaf);
//! - fourth model, `PerCoreTables::fill_checked` writing the copy after `fill_checked_then`
//!   returned (the owner leaf lock released) instead of inside it: "assertion `left == right`
//!   failed: a copy outlived the editor's clear of its owner entry, left: (Some(Pte(4101)),
//!   None), right: (None, None)" (the fill recorded core 1 and released the lock; the editor
//!   cleared the owner entry, visited core 1's tree before the copy existed and noted no one).
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test
//! --release -p aspace-vm --lib per_core`.

use super::super::organisation::{Organisation, SpaceTables};
use super::*;
use crate::frames::Frame;
use crate::page_table::{CheckedFill, UserBit};
use crate::shootdown::Targets;
use crate::sync::{fence, AtomicBool};
use crate::types::{Access, Prot, PAGE_SIZE};
use loom::thread;

/// Root index 0, level-3/2 indices 0, leaf index 1.
const A: u64 = PAGE_SIZE;
/// Root index 1, every other index equal to `A`'s.
const B: u64 = A + (1 << 39);
const GIB: u64 = 1 << 30;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.max_branches = 50_000;
    b.check(f);
}

fn id(c: usize) -> CoreId {
    CoreId::for_tests(c)
}

#[test]
fn loom_a_core_walk_never_sees_a_table_the_freeing_core_reused() {
    model(|| {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let t = Arc::new(PerCoreTables::new(2));
        let (mut c0, mut c1) = (t.attach(id(0)).unwrap(), t.attach(id(1)).unwrap());
        let (x, y) = (Frame::from_index(1), Frame::from_index(2));
        t.tree(id(1))
            .fill(&mut c1, A, Prot::READ, || Some(x))
            .unwrap();
        let allocated = t.pool_allocated();
        let reader1 = domain.register();
        let walker = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let _guard = reader1.read();
                if let Some(pte) = t.tree(id(1)).lookup(A) {
                    assert_eq!(
                        pte.frame(),
                        x,
                        "a walk returned a translation from a table reused by the freeing core"
                    );
                }
            })
        };
        // Core 0 munmaps A in core 1's tree, then maps and faults B in its own.
        let reader0 = domain.register();
        {
            let _guard = reader0.read();
            let tree1 = t.tree(id(1));
            let mut freed = Vec::new();
            tree1.clear_range(A..A + PAGE_SIZE, &mut freed);
            tree1.free_tables(&mut c0, 0..1 << 47, &domain);
            assert_eq!(tree1.table_count(), 1);
        }
        domain.barrier();
        t.tree(id(0))
            .fill(&mut c0, B, Prot::READ, || Some(y))
            .unwrap();
        assert_eq!(
            t.pool_allocated(),
            allocated,
            "B's tables came from core 0's cache (A's old ones)"
        );
        walker.join().unwrap();
        assert_eq!(t.tree(id(0)).lookup(B).map(|p| p.frame()), Some(y));
        drop((c0, c1));
    });
}

#[test]
fn loom_an_editor_inside_a_discarded_tree_never_clears_its_refill() {
    model(|| {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let t = Arc::new(SpaceTables::new(Organisation::PerCore, 2));
        let SpaceTables::PerCore(pc) = &*t else {
            unreachable!()
        };
        let (c0, mut c1) = (t.attach(id(0)).unwrap(), t.attach(id(1)).unwrap());
        let (x, y) = (Frame::from_index(1), Frame::from_index(2));
        // Through the seam: the owner entry and its leaf's record of core 1, so that the
        // editor's clear visits core 1's tree.
        t.fill(id(1), &mut c1, A, Prot::READ, || Some(x)).unwrap();
        let allocated = pc.pool_allocated();
        let reader0 = domain.register();
        let editor = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let mut out = Vec::new();
                t.clear_range_noting(Targets::All, &reader0, A..A + PAGE_SIZE, &mut out, None);
            })
        };
        // Core 1 discards its tree, and refills B once the grace period passed.
        let tree1 = pc.tree(id(1));
        assert_eq!(tree1.discard(&mut c1, &domain), 3);
        domain.barrier();
        tree1.fill(&mut c1, B, Prot::READ, || Some(y)).unwrap();
        assert_eq!(
            pc.pool_allocated(),
            allocated,
            "B's tables are the discarded ones"
        );
        editor.join().unwrap();
        assert_eq!(
            tree1.lookup(B).map(|p| p.frame()),
            Some(y),
            "the editor cleared a translation of a reused table"
        );
        drop((c0, c1));
    });
}

#[test]
fn loom_discard_and_a_concurrent_free_unlink_each_table_once() {
    model(|| {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let t = Arc::new(PerCoreTables::new(2));
        let (mut c0, mut c1) = (t.attach(id(0)).unwrap(), t.attach(id(1)).unwrap());
        t.tree(id(1))
            .fill(&mut c1, A, Prot::READ, || Some(Frame::from_index(1)))
            .unwrap();
        let mut freed = Vec::new();
        t.tree(id(1)).clear_range(A..A + PAGE_SIZE, &mut freed);
        let reader0 = domain.register();
        let editor = {
            let (t, domain) = (Arc::clone(&t), domain.clone());
            thread::spawn(move || {
                let _guard = reader0.read();
                // The first GiB: its level-2 table lies wholly inside, the level-3 table not.
                t.tree(id(1)).free_tables(&mut c0, 0..GIB, &domain);
                c0
            })
        };
        assert!(t.tree(id(1)).discard(&mut c1, &domain) >= 1);
        let c0 = editor.join().unwrap();
        let count = t.tree(id(1)).table_count();
        if count != 1 {
            // A table retired twice would be freed twice with the pool (an abort that hides
            // this message): keep the pool alive (a leak, on the failure path only).
            std::mem::forget((c0, c1, t));
            panic!("a table unlinked twice, or one left linked: {count} tables");
        }
        drop((c0, c1));
    });
}

/// The fourth model (module doc): a lock-free per-core fill racing an editor's mark and clear.
/// Fails when the copy is written after the owner leaf lock is released: "assertion `left ==
/// right` failed: a copy outlived the editor's clear of its owner entry, left:
/// (Some(Pte(4101)), None), right: (None, None)".
#[test]
fn loom_a_lock_free_copy_never_outlives_the_editors_clear() {
    model(|| {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let t = Arc::new(PerCoreTables::new(2));
        let (mut c0, mut c1) = (t.attach(id(0)).unwrap(), t.attach(id(1)).unwrap());
        // The owner entry of A, by a locked fill of core 0 (the owner leaf exists; core 0
        // copied it).
        t.fill(id(0), &mut c0, A, Prot::READ, || Some(Frame::from_index(1)))
            .unwrap();
        // Core 1's own tables, so that the model's fill only writes the copy: installed by a
        // fill of its tree alone (nothing recorded in the owner leaf) and emptied again.
        let tree1 = t.tree(id(1));
        tree1
            .fill(&mut c1, A + PAGE_SIZE, Prot::READ, || {
                Some(Frame::from_index(2))
            })
            .unwrap();
        tree1.clear_range(A + PAGE_SIZE..A + 2 * PAGE_SIZE, &mut Vec::new());
        let mark = Arc::new(AtomicBool::new(false));
        let reader1 = domain.register();
        let fault = {
            let (t, mark) = (Arc::clone(&t), Arc::clone(&mark));
            thread::spawn(move || {
                let _section = reader1.read();
                let r = t.fill_checked(
                    id(1),
                    &mut c1,
                    A,
                    Prot::READ,
                    Access::Read,
                    // Relaxed: after `fill_checked`'s SeqCst fence (its doc's argument).
                    || !mark.load(Ordering::Relaxed),
                    || Some(Frame::from_index(3)),
                );
                (r, c1)
            })
        };
        // Core 0 munmaps A: the mark and its fence, then the clear (owner, then copies).
        mark.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let reader0 = domain.register();
        let (mut out, mut users) = (Vec::new(), UserMask::default());
        {
            let _section = reader0.read();
            assert!(t.clear_range_noting(A..A + PAGE_SIZE, &mut out, Some(&mut users)));
        }
        let (r, c1) = fault.join().unwrap();
        assert_eq!(out, [Frame::from_index(1)], "the owner's frame, once");
        assert_eq!(
            (t.tree(id(1)).lookup(A), t.owner().lookup(A)),
            (None, None),
            "a copy outlived the editor's clear of its owner entry"
        );
        if matches!(r, Ok(CheckedFill::Filled { .. })) {
            assert!(
                users.contains(UserBit::of(1, 2)),
                "the fill wrote a copy but the editor did not note its core"
            );
        }
        drop((c0, c1));
    });
}
