//! A SNZI (scalable non-zero indicator) reference counter: the baseline of RadixVM's Fig. 8
//! (`aspace bench refcount`), after Ellen, Lev, Luchangco and Moir, "SNZI: Scalable NonZero
//! Indicators" (PODC'07), the hierarchical algorithm of their Fig. 4 without the root's
//! indicator bit.
//!
//! # The algorithm
//! A tree of nodes, [`SNZI_FANOUT`] children each, with one leaf per core (`core % leaves`). An
//! increment *arrives* at the core's leaf and a decrement *departs* from it. A node's counter
//! counts the arrivals below it that have not departed, but it tells its parent only about the
//! transitions between zero and non-zero: the first arrival at a node arrives at its parent,
//! the last departure departs from it. So the root is non-zero exactly when the whole tree is,
//! and cores that stay above zero at their leaf never touch a shared line.
//!
//! The delicate step is the first arrival at a node: others must not see the node non-zero (and
//! return without touching the parent) before the parent has counted it. The node moves to an
//! intermediate value ½ (a version number beside it defeats ABA), arrives at the parent, then
//! moves ½ to 1. Any arrival that finds ½ helps: it arrives at the parent itself and tries the
//! same ½ to 1 move; whoever fails to make that move (someone else made it, so the parent was
//! counted once already) departs from the parent again (the paper's `undoArr`). A node at ½ is
//! thus always counted at its parent by at least the arrival that set ½ (or that has not yet
//! finished arriving there), and a node at 1 or more by exactly one arrival.
//!
//! The root is a plain counter: it is what the refcount reads (`dec` reports whether the count
//! reached zero, the moment a refcount frees its object).
//!
//! # Invariants
//! Writing `c(n)` for node `n`'s counter (½ counted as a value between 0 and 1) and `s(n)` for
//! the arrivals below it that have returned and not yet departed:
//! - `c(n) >= 1` implies `n` has one surplus arrival at its parent;
//! - `s(n) > 0` implies `c(n) >= 1` once every arrival in flight below `n` returned;
//! - so the root counter is non-zero whenever an arrival has returned without departing.
//!
//! # Orderings
//! Every counter update is an `AcqRel` RMW (CAS or `fetch_sub`), so an arrival happens-before
//! the departure that cancels it, and the decrement that takes the root to zero happens-after
//! every increment and decrement of the count (what a refcount needs before it frees).
//!
//! Not for: counts read anywhere but at zero (there is no total), or memory-frugal counting (a
//! tree per counter, `O(cores)` space: the point RadixVM makes against it, §2).

use crate::sync::{AtomicU64, Ordering::*};
use crossbeam_utils::CachePadded;

/// Children per node.
pub const SNZI_FANOUT: usize = 4;

/// A hierarchical node's word: counter in half units (so ½ is 1) in the low 32 bits, version in
/// the high 32 bits.
const HALF: u64 = 1;
const ONE: u64 = 2;
const COUNT_MASK: u64 = 0xFFFF_FFFF;
const VERSION_ONE: u64 = 1 << 32;

fn count(word: u64) -> u64 {
    word & COUNT_MASK
}

/// A SNZI counter; see the module doc.
#[derive(Debug)]
pub struct Snzi {
    /// The root counter (node 0) and, after it, the hierarchical nodes in breadth-first order:
    /// node `i`'s parent is `(i - 1) / SNZI_FANOUT`.
    root: CachePadded<AtomicU64>,
    nodes: Box<[CachePadded<AtomicU64>]>,
    /// Index (in the whole tree, root 0) of the first leaf; leaves are the last nodes.
    first_leaf: usize,
    leaves: usize,
}

impl Snzi {
    /// A counter at zero for `cores` cores (one leaf each, `ceil(log4(cores))` levels below
    /// the root).
    ///
    /// # Panics
    /// When `cores` is 0.
    pub fn new(cores: usize) -> Self {
        assert!(cores > 0, "a Snzi needs at least one core");
        // Levels of a full 4-ary tree until a level has `cores` nodes; the root is level 0.
        let mut total = 1usize;
        let mut width = 1usize;
        while width < cores {
            width *= SNZI_FANOUT;
            total += width;
        }
        let first_leaf = total - width;
        Self {
            root: CachePadded::new(AtomicU64::new(0)),
            nodes: (1..total)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            first_leaf,
            leaves: width,
        }
    }

    /// How many leaves there are (core `c` uses leaf `c % leaves()`).
    pub fn leaves(&self) -> usize {
        self.leaves
    }

    fn node(&self, i: usize) -> &AtomicU64 {
        &self.nodes[i - 1]
    }

    fn leaf(&self, core: usize) -> usize {
        self.first_leaf + core % self.leaves
    }

    /// One reference more, arriving at `core`'s leaf.
    pub fn inc(&self, core: usize) {
        self.arrive(self.leaf(core));
    }

    /// One reference less, departing from `core`'s leaf; true if the count reached zero (the
    /// caller held the last reference).
    ///
    /// # Preconditions
    /// A reference is given back on the core (leaf) it was taken on, as SNZI's departures
    /// pair with arrivals at the same node. A departure from a leaf with no arrival is ignored
    /// (returns false); one from another core's leaf leaves the count wrong (never unsound).
    pub fn dec(&self, core: usize) -> bool {
        self.depart(self.leaf(core))
    }

    /// Whether the count is non-zero (the root's counter).
    pub fn is_nonzero(&self) -> bool {
        // Acquire: pairs with the AcqRel updates of the root.
        self.root.load(Acquire) != 0
    }

    fn arrive(&self, i: usize) {
        if i == 0 {
            // AcqRel: see the module doc's orderings.
            self.root.fetch_add(1, AcqRel);
            return;
        }
        let parent = (i - 1) / SNZI_FANOUT;
        let x = self.node(i);
        let mut undo = 0u32;
        let mut done = false;
        while !done {
            let mut w = x.load(Acquire);
            if count(w) >= ONE {
                // Already counted at the parent: just count here.
                if x.compare_exchange(w, w + ONE, AcqRel, Acquire).is_ok() {
                    done = true;
                }
                continue;
            }
            if count(w) == 0 {
                // First arrival: ½ with a new version, then arrive at the parent.
                let half = (w & !COUNT_MASK).wrapping_add(VERSION_ONE) | HALF;
                if x.compare_exchange(w, half, AcqRel, Acquire).is_err() {
                    continue;
                }
                done = true;
                w = half;
            }
            // ½ (ours or another's): make sure the parent counts this node, then 1.
            self.arrive(parent);
            if x.compare_exchange(w, (w & !COUNT_MASK) | ONE, AcqRel, Acquire)
                .is_err()
            {
                // Someone else moved ½ to 1 (the parent was counted for it): ours is extra.
                undo += 1;
            }
        }
        for _ in 0..undo {
            self.depart(parent);
        }
    }

    fn depart(&self, i: usize) -> bool {
        if i == 0 {
            // AcqRel: see the module doc's orderings.
            let before = self.root.fetch_sub(1, AcqRel);
            return before == 1;
        }
        let parent = (i - 1) / SNZI_FANOUT;
        let x = self.node(i);
        let mut w = x.load(Acquire);
        loop {
            if count(w) < ONE {
                return false; // no arrival to cancel (a misuse): ignored
            }
            match x.compare_exchange(w, w - ONE, AcqRel, Acquire) {
                Ok(_) => {
                    return count(w) == ONE && self.depart(parent);
                }
                Err(now) => w = now,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_tree_has_a_leaf_per_core_and_counts_to_zero() {
        assert_eq!(Snzi::new(1).leaves(), 1);
        assert_eq!(Snzi::new(4).leaves(), 4);
        assert_eq!(Snzi::new(5).leaves(), 16);
        let s = Snzi::new(8);
        assert!(!s.is_nonzero());
        s.inc(7); // the base reference
        assert!(s.is_nonzero());
        s.inc(3);
        s.inc(5);
        s.inc(3);
        assert!(!s.dec(3));
        assert!(!s.dec(5));
        assert!(!s.dec(3));
        assert!(s.dec(7), "the initial reference was the last");
        assert!(!s.is_nonzero());
    }

    #[test]
    fn only_zero_transitions_reach_the_parent() {
        let s = Snzi::new(16);
        s.inc(0);
        s.inc(0);
        s.inc(1);
        assert_eq!(s.root.load(Relaxed), 1, "one subtree is non-zero");
        assert_eq!(count(s.node(s.leaf(0)).load(Relaxed)), 2 * ONE);
        assert!(!s.dec(0));
        assert!(!s.dec(1));
        assert!(s.dec(0));
    }

    #[test]
    fn concurrent_holders_never_see_zero() {
        // Every thread holds one reference while it checks the root; a thread's last dec may
        // be the one to reach zero only once every thread has finished.
        let s = Snzi::new(8);
        let zeroes = std::sync::atomic::AtomicUsize::new(0);
        s.inc(0); // the base reference (the mapped page of the benchmark)
        std::thread::scope(|sc| {
            for t in 0..8 {
                let (s, zeroes) = (&s, &zeroes);
                sc.spawn(move || {
                    for _ in 0..20_000 {
                        s.inc(t);
                        assert!(s.is_nonzero());
                        if s.dec(t) {
                            zeroes.fetch_add(1, SeqCst);
                        }
                    }
                });
            }
        });
        assert_eq!(
            zeroes.load(SeqCst),
            0,
            "the base reference was held throughout"
        );
        assert!(s.dec(0));
        assert!(s.nodes.iter().all(|n| count(n.load(Relaxed)) == 0));
    }
}
