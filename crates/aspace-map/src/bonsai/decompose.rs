//! `map(s..e, value)` as the writer's primitive steps (insert, delete, replace), and the
//! decision of atomic mode.
//!
//! The steps, in order (the order keeps every key unique and the tree ordered between steps):
//! 1. the surviving tail of the last overlapped interval gets its own node when that node
//!    cannot be re-keyed to `e` (it also keeps the head, or it is replaced by the new interval);
//! 2. the new interval: a replace of the first overlapped node when it starts at `s`, else an
//!    insert;
//! 3. the head of the first overlapped interval is trimmed to `s` (a replace), every other
//!    overlapped interval is deleted, except that the last one is re-keyed to `e` (a replace)
//!    when its tail survives and step 1 did not copy it.
//!
//! The decision. [`Plan`] counts the steps before any of them runs; an update of more than one
//! step runs in atomic mode (every step out of place, one root store at the end), an update of
//! one step commits in place, like `alloc`. `Update::begin_step` refuses a second step outside
//! atomic mode in every build, so a plan that undercounts stops before it builds anything of its
//! second step: the first step has committed by then, so the unwind aborts the process (a
//! fail-stop for a coding error; no shape undercounts, see the audit and the exhaustive test).
//!
//! Audit of every shape (`X`: an overlapped interval; "free": pages of the range no interval
//! covers). One step, committed in place:
//! - nothing overlaps, `Some`: insert (a fresh map; `alloc` too). Nothing overlaps, `None`:
//!   no step, no commit.
//! - `X` starts at `s` and ends at or before `e`, `Some`: replace (an exact overwrite, or `X`
//!   plus a free tail).
//! - `X` inside the range, `None`: delete (an exact unmap, with or without free ends).
//! - `X` starts before `s` and ends inside the range, `None`: replace (head trim).
//! - `X` starts inside the range and ends after `e`, `None`: replace (re-key to `e`).
//!
//! Two steps or more, atomic:
//! - `X` starts after `s` and ends at or before `e`, `Some` (a free head, or both ends free):
//!   insert, delete. Issue 17: the old decision (`head || tail || over.len() > 1`) ran this
//!   shape as two commits; readers between them saw the new interval and `X` overlapping, and a
//!   failed allocation or a panicking `Clone` in the delete aborted the process.
//! - `X` starts before `s`, ends inside the range, `Some`: the new interval (insert), the head
//!   trim (replace).
//! - `X` starts at or after `s`, ends after `e`, `Some`: the new interval (insert) and the
//!   re-key of `X` (replace); when `X` starts at `s`, a copy of its tail (insert) and the new
//!   interval in `X`'s node (replace).
//! - a split inside one interval: insert of the tail, replace of the head (and, `Some`, the
//!   insert of the new interval).
//! - several overlapped intervals: at least one step each, trims included.
//!
//! Paper: ASPLOS'12 §3 makes each operation one update published by one pointer store; a `map`
//! of several steps has no counterpart there, and atomic mode keeps that property for it (the
//! in-place store of §3.3 is used by updates of one step only).
//!
//! Not for: the search itself (`RawTree::walk`) or the count of intervals (the caller adds and
//! subtracts what `map_range` returns).

use super::node::Node;
use super::update::Update;
use crate::contract::MapError;
use std::ops::ControlFlow;

/// How one `map(s..e, value)` decomposes (see the module doc), decided before any step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// The first overlapped interval starts before `s`: its head survives (a trim).
    head: bool,
    /// The last overlapped interval ends after `e`: its tail survives.
    tail: bool,
    /// The surviving tail gets its own node (step 1) rather than a re-key of its node.
    tail_inserted: bool,
    /// The new interval replaces the first overlapped node (it starts at `s`).
    first_replaced: bool,
    /// The number of primitive steps: more than one runs in atomic mode.
    pub(super) steps: usize,
}

impl Plan {
    /// The plan of `map(s..e, value)` over `n_over >= 1` overlapped intervals, the first
    /// starting at `first_start` and the last being `[last_start, last_end)`.
    pub(super) fn new(
        s: u64,
        e: u64,
        has_value: bool,
        n_over: usize,
        first_start: u64,
        (last_start, last_end): (u64, u64),
    ) -> Self {
        debug_assert!(n_over >= 1);
        let head = first_start < s;
        let tail = last_end > e;
        let tail_inserted = tail && (last_start < s || (last_start == s && has_value));
        let first_replaced = has_value && first_start == s;
        // Step 3 visits every overlapped node but the first when it was trimmed or replaced.
        let rest = n_over - usize::from(head || first_replaced);
        let steps = usize::from(tail_inserted) + usize::from(has_value) + usize::from(head) + rest;
        Self {
            head,
            tail,
            tail_inserted,
            first_replaced,
            steps,
        }
    }
}

impl<V: Clone> Update<'_, V> {
    /// Applies `map(s..e, value)` to the tree (`s < e`): walks the overlapped nodes into
    /// `over` (the writer's scratch buffer, cleared first), plans the steps, switches to atomic
    /// mode when there are several, and runs them. Returns the number of intervals added and
    /// removed. `OutOfMemory` or a panic in a value's `Clone`: nothing was committed (one step
    /// commits last; several commit at `finish`), the caller abandons the update.
    pub(crate) fn map_range(
        &mut self,
        over: &mut Vec<*mut Node<V>>,
        s: u64,
        e: u64,
        value: Option<V>,
    ) -> Result<(usize, usize), MapError> {
        over.clear();
        // SAFETY: this `Update` exists only while the writer lock is held (its constructors'
        // contract); nodes reached stay allocated until this update's batch is freed after a
        // grace period, i.e. after the update ends.
        let _ = unsafe {
            self.tree.walk(s, e, &mut |n| {
                over.push(n as *const Node<V> as *mut Node<V>);
                ControlFlow::Continue(())
            })
        };
        let Some((&first_p, &last_p)) = over.first().zip(over.last()) else {
            return match value {
                Some(v) => self.insert(s, e, v).map(|()| (1, 0)),
                None => Ok((0, 0)),
            };
        };
        let (first, last) = (self.node(first_p), self.node(last_p));
        let plan = Plan::new(
            s,
            e,
            value.is_some(),
            over.len(),
            first.start,
            (last.start, last.end),
        );
        if plan.steps > 1 {
            // Several steps: build them all out of place and publish them with one store
            // (module doc; `begin_step` refuses a second step otherwise).
            self.set_atomic();
        }
        let Plan {
            head,
            tail,
            tail_inserted,
            first_replaced,
            ..
        } = plan;
        let (mut added, mut removed) = (0usize, 0usize);
        // Step 1: a surviving tail whose node cannot be re-keyed to `e` gets its own node.
        if tail_inserted {
            self.insert(e, last.end, last.value.clone())?;
            added += 1;
        }
        // Step 2: the new interval.
        if let Some(v) = value {
            if first_replaced {
                self.replace(s, s, e, v)?;
            } else {
                self.insert(s, e, v)?;
                added += 1;
            }
        }
        // Step 3: trim the head, remove the middle, re-key the tail.
        if head {
            self.replace(first.start, first.start, s, first.value.clone())?;
        }
        let last_i = over.len() - 1;
        for (i, &p) in over.iter().enumerate() {
            if i == 0 && (head || first_replaced) {
                continue;
            }
            let n = self.node(p);
            if i == last_i && tail && !tail_inserted {
                self.replace(n.start, e, n.end, n.value.clone())?;
            } else {
                self.delete(n.start)?;
                removed += 1;
            }
        }
        assert_eq!(
            self.steps, plan.steps,
            "the plan of a Bonsai map miscounted"
        );
        Ok((added, removed))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `Plan::new` for `X = [xs, xe)` alone under `map(s..e)`.
    fn one(s: u64, e: u64, has_value: bool, xs: u64, xe: u64) -> usize {
        Plan::new(s, e, has_value, 1, xs, (xs, xe)).steps
    }

    #[test]
    fn one_whole_interval_with_a_free_end_is_two_steps_when_its_start_moves() {
        // Issue 17: a free head (or both ends free) with a new value is insert + delete.
        assert_eq!(one(0, 3, true, 1, 3), 2);
        assert_eq!(one(0, 3, true, 1, 2), 2);
        // A free tail only: the new interval replaces X's node.
        assert_eq!(one(0, 3, true, 0, 1), 1);
        // Unmaps of one whole interval, with free ends or not: one delete.
        assert_eq!(one(0, 3, false, 1, 2), 1);
        assert_eq!(one(1, 2, false, 1, 2), 1);
    }

    /// Every `map` over pages `0..24` of a tree of `[3k + 1, 3k + 3)` (k < 8), with and
    /// without a value: the plan counts the steps the update runs (`map_range` asserts it), at
    /// most one commit, and the tree is valid after.
    #[test]
    fn every_shape_of_map_commits_at_most_once() {
        use crate::bonsai::tree::RawTree;
        use crate::PAGE_SIZE as P;
        for a in 0..24u64 {
            for b in a + 1..=24 {
                for value in [None, Some(99u64)] {
                    let tree = RawTree::new();
                    for k in 0..8u64 {
                        // SAFETY: single-threaded test: no other writer, no reader.
                        let mut up = unsafe { Update::new(&tree) };
                        up.insert((3 * k + 1) * P, (3 * k + 3) * P, k).unwrap();
                        drop(up.finish());
                    }
                    // SAFETY: as above.
                    let mut up = unsafe { Update::new(&tree) };
                    up.map_range(&mut Vec::new(), a * P, b * P, value).unwrap();
                    assert!(up.commits() <= 1, "map({a}..{b}, {value:?})");
                    drop(up.finish());
                    // SAFETY: as above.
                    unsafe { tree.check() };
                }
            }
        }
    }

    #[test]
    fn trims_and_splits_count_their_steps() {
        assert_eq!(one(2, 5, false, 0, 4), 1, "head trim");
        assert_eq!(one(2, 5, true, 0, 4), 2, "head trim and the new interval");
        assert_eq!(one(0, 3, false, 1, 6), 1, "re-key of the tail");
        assert_eq!(one(0, 3, true, 1, 6), 2, "new interval, re-key");
        assert_eq!(one(1, 3, true, 1, 6), 2, "tail copy, replace");
        assert_eq!(one(2, 3, false, 0, 6), 2, "split: tail copy, head trim");
        assert_eq!(one(2, 3, true, 0, 6), 3, "split with a value");
        // Several intervals: one step each at least.
        assert_eq!(Plan::new(0, 10, false, 2, 1, (5, 6)).steps, 2);
        assert_eq!(Plan::new(2, 10, true, 3, 0, (7, 12)).steps, 4);
    }
}
