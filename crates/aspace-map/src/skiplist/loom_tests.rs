//! Loom models of the skiplist protocols (`--cfg loom`), on the raw list.
//!
//! Models (2 threads, a handful of nodes each):
//! - `lock_vs_lock_on_overlapping_ranges`: two lock + swap on overlapping ranges are mutually
//!   exclusive (a loom-tracked "inside" counter) and the result is one of the two sequential
//!   orders;
//! - `swap_vs_query`: a query of an interval untouched by a concurrent swap always finds it, and
//!   a query of the swapped address sees the old or the new interval, never a gap (no half swap);
//! - `alloc_vs_lock_on_the_same_gap`: an alloc CAS racing a lock + swap of the same gap: both
//!   succeed, never overlap, and the structure is intact;
//! - `swap_unlinks_a_tall_node_while_an_insert_helps`: the collective height decrement of a
//!   height-2 node races an insert of a height-2 node next to it (whose `find` helps unlink it);
//!   afterwards no retired node is reachable at any level (`..._fused`: the swap unlinks the
//!   old run by one CAS from its lock's traversal, falling back to `find` when the insert
//!   helped first);
//! - `fused_swap_unlinks_a_run_of_tall_nodes_next_to_an_insert`: a fused swap of two adjacent
//!   height-2 nodes (one run CAS at level 1) races an insert of a height-2 node right after them;
//! - `swap_links_upper_levels_after_an_insert_into_the_gap_it_freed` (regression): an alloc into
//!   the gap a swap's commit freed in front of its new node links its upper level first; the
//!   swap's height increment must still complete; `..._fused` runs the swap with its lock's
//!   traversal as the first guess (`lock_range_at` + `swap_locked_at`, as `map` does);
//! - `fused_swap_refinds_when_its_hint_predecessor_is_swapped_out`: a fused swap whose hinted
//!   level-1 predecessor is a tall node that a concurrent swap retires still links its new tall
//!   node at level 1 (and only from a live predecessor).
//!
//! What is not modelled: RCU grace periods. Retired nodes are freed only after the threads are
//! joined and the model checked they are unreachable (the RCU crate's models check that deferred
//! frees wait for pre-existing readers).
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test
//! --release -p aspace-map --lib skiplist::loom_tests`.

use super::alloc::AllocOutcome;
use super::link::ptr;
use super::node::{Kind, Node};
use super::raw::RawSkipList;
use super::traverse::Position;
use crate::sync::{AtomicUsize, Ordering};
use crate::PAGE_SIZE as P;
use loom::thread;
use std::sync::Arc;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}

/// Retired nodes handed back from a thread.
struct Retired(Vec<*mut Node<u64>>);
// SAFETY: the nodes are unreachable and owned by the batch; freed by the joining thread.
unsafe impl Send for Retired {}

fn node(s: u64, e: u64, h: usize, v: u64) -> *mut Node<u64> {
    Node::alloc(s * P, e * P, h, Kind::Interval, Some(v))
}

/// Lock `[s, e)` pages and replace its contents by `new`; returns the retired nodes.
fn map(list: &RawSkipList<u64>, s: u64, e: u64, new: Vec<*mut Node<u64>>) -> Retired {
    // SAFETY: nothing is freed while the model's threads run.
    unsafe {
        let locked = list.lock_range(s * P, e * P);
        Retired(list.swap_locked(&locked, s * P, e * P, &new))
    }
}

/// `map` or `map_fused`.
type MapFn = fn(&RawSkipList<u64>, u64, u64, Vec<*mut Node<u64>>) -> Retired;

/// `map` as the facade runs it: the lock's traversal is the swap's first guess (`swap_locked_at`).
fn map_fused(list: &RawSkipList<u64>, s: u64, e: u64, new: Vec<*mut Node<u64>>) -> Retired {
    let mut pos = Position::new();
    // SAFETY: nothing is freed while the model's threads run (so the hint's nodes stay alive).
    unsafe {
        let (locked, levels) = list.lock_range_at(s * P, e * P, &mut pos);
        list.swap_locked_at(&locked, s * P, e * P, &new, Some((&pos, levels)));
        Retired(locked[1..].to_vec())
    }
}

/// `(start, end)` pages of the nodes linked at `level`, in order (quiescent list).
fn at_level(list: &RawSkipList<u64>, level: usize) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    // SAFETY: all threads joined; linked nodes are alive.
    unsafe {
        let mut cur = ptr::<u64>((*list.head).load(level));
        while !cur.is_null() {
            out.push(((*cur).start / P, (*cur).end / P));
            cur = ptr((*cur).load(level));
        }
    }
    out
}

/// `(start page, end page, value)` of every interval, after checking the structure; frees the
/// retired nodes after checking that none is still reachable.
fn finish(list: &RawSkipList<u64>, retired: Vec<Retired>) -> Vec<(u64, u64, u64)> {
    // SAFETY: all threads joined.
    let level0 = unsafe { list.check() };
    for r in retired {
        for p in r.0 {
            assert!(!level0.contains(&p), "a retired node is still linked");
            // SAFETY: unreachable (checked: level 0 holds every linked node) and freed once.
            unsafe { Node::dealloc(p) };
        }
    }
    level0
        .iter()
        // SAFETY: linked nodes are alive.
        .map(|&p| unsafe { ((*p).start / P, (*p).end / P, *(*p).value()) })
        .collect()
}

#[test]
fn lock_vs_lock_on_overlapping_ranges() {
    model(|| {
        let list = Arc::new(RawSkipList::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let first = map(&list, 0, 4, vec![node(0, 4, 1, 1)]);
        let spawn = |s: u64, e: u64, v: u64| {
            let (list, inside) = (Arc::clone(&list), Arc::clone(&inside));
            thread::spawn(move || {
                // SAFETY: nothing is freed while the threads run.
                unsafe {
                    let locked = list.lock_range(s * P, e * P);
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    Retired(list.swap_locked(&locked, s * P, e * P, &[node(s, e, 1, v)]))
                }
            })
        };
        let a = spawn(1, 3, 10);
        let b = spawn(2, 4, 20);
        let retired = vec![first, a.join().unwrap(), b.join().unwrap()];
        // Swaps keep no remainders here (raw), so the survivors tell the order.
        let got = finish(&list, retired);
        // a then b: b replaces a's node; b then a: a replaces b's.
        assert!(
            got == vec![(2, 4, 20)] || got == vec![(1, 3, 10)],
            "{got:?}"
        );
    });
}

#[test]
fn swap_vs_query() {
    model(|| {
        let list = Arc::new(RawSkipList::new());
        let r0 = map(&list, 0, 8, vec![node(1, 2, 2, 1), node(4, 5, 1, 2)]);
        let reader = {
            let list = Arc::clone(&list);
            thread::spawn(move || {
                // SAFETY: nothing is freed while the threads run.
                unsafe {
                    let b = list.query(4 * P).map(|n| *n.value());
                    assert_eq!(b, Some(2), "an untouched interval was missed");
                    let a = list.query(P).map(|n| (n.start / P, n.end / P, *n.value()));
                    assert!(
                        a == Some((1, 2, 1)) || a == Some((0, 3, 10)),
                        "half-swapped state: {a:?}"
                    );
                }
            })
        };
        let r1 = map(&list, 0, 3, vec![node(0, 3, 2, 10)]);
        reader.join().unwrap();
        let got = finish(&list, vec![r0, r1]);
        assert_eq!(got, vec![(0, 3, 10), (4, 5, 2)]);
    });
}

#[test]
fn alloc_vs_lock_on_the_same_gap() {
    model(|| {
        let list = Arc::new(RawSkipList::new());
        let r0 = map(&list, 0, 4, vec![node(0, 1, 1, 1), node(3, 4, 1, 3)]);
        let allocator = {
            let list = Arc::clone(&list);
            thread::spawn(move || {
                let n = node(0, 0, 1, 7);
                // SAFETY: nothing is freed while the threads run.
                let got = unsafe { list.alloc_insert(0, 4 * P, P, n) };
                match got {
                    AllocOutcome::Inserted { start, .. } => start / P,
                    other => panic!("alloc failed: {other:?}"),
                }
            })
        };
        let r1 = map(&list, 1, 2, vec![node(1, 2, 1, 9)]);
        let at = allocator.join().unwrap();
        let got = finish(&list, vec![r0, r1]);
        // Alloc first: it takes page 1, which the swap then replaces; swap first: page 2.
        match at {
            1 => assert_eq!(got, vec![(0, 1, 1), (1, 2, 9), (3, 4, 3)]),
            2 => assert_eq!(got, vec![(0, 1, 1), (1, 2, 9), (2, 3, 7), (3, 4, 3)]),
            _ => panic!("alloc outside the gap: page {at}"),
        }
    });
}

#[test]
fn swap_unlinks_a_tall_node_while_an_insert_helps() {
    tall_node_helped(map);
}

/// The same with the swap unlinking the old run itself from its lock's traversal.
#[test]
fn swap_unlinks_a_tall_node_while_an_insert_helps_fused() {
    tall_node_helped(map_fused);
}

fn tall_node_helped(map: MapFn) {
    model(move || {
        let list = Arc::new(RawSkipList::new());
        let r0 = map(&list, 0, 8, vec![node(2, 3, 2, 1), node(6, 7, 2, 2)]);
        let inserter = {
            let list = Arc::clone(&list);
            thread::spawn(move || {
                let n = node(0, 0, 2, 5);
                // SAFETY: nothing is freed while the threads run.
                let got = unsafe { list.alloc_insert(4 * P, 6 * P, P, n) };
                assert!(matches!(got, AllocOutcome::Inserted { start, .. } if start == 4 * P));
            })
        };
        let r1 = map(&list, 2, 3, vec![]);
        inserter.join().unwrap();
        let got = finish(&list, vec![r0, r1]);
        assert_eq!(got, vec![(4, 5, 5), (6, 7, 2)]);
    });
}

/// Regression: after a swap's commit store unlocks its predecessor, the gap in front of its first
/// new node is free again. An alloc that lands there and links its level 1 first made the swap's
/// height-increment CAS fail forever (its retry searched the old locked range, skipped the
/// alloc's node as "overlapping" and kept returning a non-adjacent predecessor/successor pair),
/// with the swap's new node held LOCKED meanwhile. Loom reports the endless retry loop as a
/// model that exceeds its branch limit.
#[test]
fn swap_links_upper_levels_after_an_insert_into_the_gap_it_freed() {
    gap_it_freed(map);
}

/// The same regression with the swap taking its lock's traversal as the first guess.
#[test]
fn swap_links_upper_levels_after_an_insert_into_the_gap_it_freed_fused() {
    gap_it_freed(map_fused);
}

fn gap_it_freed(map: MapFn) {
    model(move || {
        let list = Arc::new(RawSkipList::new());
        let r0 = map(&list, 0, 4, vec![node(0, 4, 1, 1)]);
        let allocator = {
            let list = Arc::clone(&list);
            thread::spawn(move || {
                let n = node(0, 0, 2, 7);
                // SAFETY: nothing is freed while the threads run.
                let got = unsafe { list.alloc_insert(0, 8 * P, P, n) };
                match got {
                    AllocOutcome::Inserted { start, .. } => start / P,
                    other => panic!("alloc failed: {other:?}"),
                }
            })
        };
        // Replaces [0, 4) by [3, 4): the commit frees [0, 3) in front of the new node.
        let r1 = map(&list, 0, 4, vec![node(3, 4, 2, 9)]);
        let at = allocator.join().unwrap();
        let got = finish(&list, vec![r0, r1]);
        match at {
            0 => assert_eq!(got, vec![(0, 1, 7), (3, 4, 9)]),
            4 => assert_eq!(got, vec![(3, 4, 9), (4, 5, 7)]),
            _ => panic!("alloc at page {at}"),
        }
    });
}

#[test]
fn fused_swap_refinds_when_its_hint_predecessor_is_swapped_out() {
    model(|| {
        let list = Arc::new(RawSkipList::new());
        let r0 = map(&list, 0, 8, vec![node(0, 1, 2, 1), node(4, 5, 1, 2)]);
        let swapper = {
            let list = Arc::clone(&list);
            // Old node of height 1: the hint (level-1 predecessor [0, 1)) is used.
            thread::spawn(move || map_fused(&list, 4, 5, vec![node(4, 5, 2, 20)]))
        };
        // Retires the tall [0, 1) the other swap may have taken as its level-1 predecessor.
        let r1 = map_fused(&list, 0, 1, vec![node(0, 1, 1, 10)]);
        let r2 = swapper.join().unwrap();
        assert_eq!(at_level(&list, 1), vec![(4, 5)], "level 1");
        let got = finish(&list, vec![r0, r1, r2]);
        assert_eq!(got, vec![(0, 1, 10), (4, 5, 20)]);
    });
}

#[test]
fn fused_swap_unlinks_a_run_of_tall_nodes_next_to_an_insert() {
    model(|| {
        let list = Arc::new(RawSkipList::new());
        let r0 = map(&list, 0, 8, vec![node(2, 3, 2, 1), node(3, 4, 2, 2)]);
        let inserter = {
            let list = Arc::clone(&list);
            thread::spawn(move || {
                let n = node(0, 0, 2, 5);
                // SAFETY: nothing is freed while the threads run.
                let got = unsafe { list.alloc_insert(4 * P, 6 * P, P, n) };
                assert!(matches!(got, AllocOutcome::Inserted { start, .. } if start == 4 * P));
            })
        };
        let r1 = map_fused(&list, 2, 4, vec![node(2, 3, 1, 9)]);
        inserter.join().unwrap();
        assert_eq!(at_level(&list, 1), vec![(4, 5)], "level 1");
        let got = finish(&list, vec![r0, r1]);
        assert_eq!(got, vec![(2, 3, 9), (4, 5, 5)]);
    });
}
