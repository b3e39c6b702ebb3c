//! Loom models of the Bonsai tree's publication protocol (`--cfg loom`).
//!
//! What is modelled: one writer doing an update that rotates (or deletes a node with two
//! children, the out-of-place `delmin` case) while a reader looks up keys present before and
//! after it; and one writer doing a whole `map` of several steps (`Update::map_range`, the
//! decomposition and atomic-mode decision `BonsaiMap::map` runs) while a reader queries two
//! points of it and must see the map applied at both or at neither. Loom explores the interleavings and weak-memory outcomes of the `Release` commit
//! stores and the reader's `Acquire` loads; every node carries a loom-tracked witness cell
//! written at construction and read by the lookup, so a lookup reaching a node whose
//! initialisation does not happen-before it fails the model. The reader must find every key
//! present throughout the update.
//!
//! What is not modelled: grace periods. Reclamation is replaced by a trivial stand-in: the
//! update's `Retired` batch is freed only after the reader thread is joined (after the model also
//! checks that no retired node is still reachable). The RCU crate's own models check that
//! `defer_drop` waits for pre-existing readers.
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test --release -p aspace-map
//! --lib loom` (preemption bound 3 unless `LOOM_MAX_PREEMPTIONS` is set).

use super::node::Node;
use super::tree::RawTree;
use super::update::Update;
use crate::sync::Ordering;
use crate::PAGE_SIZE as P;
use loom::thread;
use std::sync::Arc;

/// Runs `f` under loom with a small default preemption bound.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Inserts `keys` (page numbers, values = the page number) one update at a time.
fn build(tree: &RawTree<u64>, keys: &[u64]) {
    for &k in keys {
        // SAFETY: single writer; no reader runs yet, so the batch may be dropped at once.
        let mut up = unsafe { Update::new(tree) };
        up.insert(k * P, (k + 1) * P, k).unwrap();
        drop(up.finish());
    }
}

/// Every node pointer reachable from the root (writer-side, after the threads joined).
fn reachable(tree: &RawTree<u64>) -> Vec<*mut Node<u64>> {
    let mut out = Vec::new();
    let mut stack = vec![tree.root.load(Ordering::Relaxed)];
    while let Some(n) = stack.pop() {
        if n.is_null() {
            continue;
        }
        out.push(n);
        // SAFETY: reachable nodes are alive; no other thread runs.
        let node = unsafe { &*n };
        stack.push(node.left.load(Ordering::Relaxed));
        stack.push(node.right.load(Ordering::Relaxed));
    }
    out
}

/// The reader: each key must be found with its own interval and value.
fn lookups(tree: &RawTree<u64>, keys: &[u64]) {
    for &k in keys {
        // SAFETY: the model frees nothing before this thread is joined (stand-in grace period).
        let n = unsafe { tree.find(k * P + 1) }.unwrap_or_else(|| panic!("key {k} lost"));
        assert_eq!((n.start, n.end, n.value), (k * P, (k + 1) * P, k));
    }
}

/// The writer's update, then the checks that run after the reader is joined.
fn race(
    initial: &'static [u64],
    look: &'static [u64],
    update: fn(&mut Update<'_, u64>) -> Result<(), crate::MapError>,
) {
    model(move || {
        let tree = Arc::new(RawTree::new());
        build(&tree, initial);
        let t = tree.clone();
        let reader = thread::spawn(move || lookups(&t, look));
        // SAFETY: the only writer; the batch is kept until the reader is joined.
        let mut up = unsafe { Update::new(&tree) };
        update(&mut up).unwrap();
        let retired = up.finish();
        reader.join().unwrap();
        let live = reachable(&tree);
        assert!(retired.nodes().iter().all(|r| !live.contains(r)));
        // SAFETY: no other thread runs.
        unsafe { tree.check() };
        drop(retired);
    });
}

#[test]
fn loom_lookup_racing_single_rotation_finds_present_keys() {
    // 1 -> 2 -> 3 is a legal chain (weights 1 vs 3); inserting 4 rotates at the root.
    race(&[1, 2, 3], &[1, 3, 2], |up| {
        up.insert(4 * P, 5 * P, 4)?;
        // The root rotates, so the path below it (3, then the new leaf) is built out of place
        // and the whole step is published by the root store alone: one commit per step, after
        // every node of the step was made (panic safety, see `update.rs`).
        assert_eq!(up.commits(), 1);
        Ok(())
    });
}

#[test]
fn loom_lookup_racing_double_rotation_finds_present_keys() {
    // 1 -> 5 -> 3: inserting 4 under 3 makes the root's inner grandchild heavy: double rotation.
    race(&[1, 5, 3], &[5, 1, 3], |up| up.insert(4 * P, 5 * P, 4));
}

#[test]
fn loom_lookup_racing_two_child_delete_finds_successor() {
    // Root 2 with children 1 and 5 (5 has children 4 and 6): deleting 2 moves its successor 4
    // out of 5's subtree; pushing that removal down in place would hide 4 from the reader.
    race(&[2, 1, 5, 4, 6], &[4, 5, 1], |up| up.delete(2 * P));
}

#[test]
fn loom_map_over_free_pages_and_one_interval_is_atomic_for_two_point_queries() {
    // Issue 17: `map([2, 5), 100)` over `[3, 4)` alone, with free pages on both sides: an insert
    // of `[2, 5)` and a delete of `[3, 4)` (a node with two children). Published as two commits
    // (the old atomic-mode decision), a reader between them saw the new interval at page 2 and
    // then the old one at page 3.
    model(|| {
        let tree = Arc::new(RawTree::new());
        build(&tree, &[1, 3, 6]);
        let t = tree.clone();
        let reader = thread::spawn(move || {
            // SAFETY: the model frees nothing before this thread is joined (stand-in grace
            // period).
            let at_free = unsafe { t.find(2 * P) }.map(|n| (n.start, n.value));
            // SAFETY: as above.
            let at_x = unsafe { t.find(3 * P) }.map(|n| (n.start, n.value));
            assert!(
                !(at_free == Some((2 * P, 100)) && at_x == Some((3 * P, 3))),
                "one reader saw the new interval at page 2 and then the old one at page 3"
            );
        });
        // SAFETY: the only writer; the batch is kept until the reader is joined.
        let mut up = unsafe { Update::new(&tree) };
        assert_eq!(
            up.map_range(&mut Vec::new(), 2 * P, 5 * P, Some(100)),
            Ok((1, 1))
        );
        let retired = up.finish();
        reader.join().unwrap();
        let live = reachable(&tree);
        assert!(retired.nodes().iter().all(|r| !live.contains(r)));
        // SAFETY: no other thread runs.
        assert_eq!(unsafe { tree.check() }, 3);
        drop(retired);
    });
}
