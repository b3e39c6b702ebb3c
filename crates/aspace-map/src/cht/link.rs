//! Marked links: a node pointer with three mark bits in its low bits (nodes are 8-aligned).
//!
//! The thesis (§5.1.2, "Technical details") packs six marks into the two low bits, reusing a
//! value by context. With 8-byte alignment we have three bits and give each mark its own bit in
//! each of the two contexts (a bucket head, a node's `next`), which is easier to check:
//!
//! | bit | in a node's `next`                         | in a bucket head                          |
//! |-----|--------------------------------------------|-------------------------------------------|
//! | 1   | [`DELETED`]: the node is logically removed | [`CONST`]: immutable, being moved (Click) |
//! | 2   | [`JOIN_FOLLOWS`]: the successor is the join node of the next bucket (grow: the split point; null when the upper half is empty) | [`JOIN_FOLLOWS`]: grow: the head's successor is that join node; shrink target: a join of the odd half is pending |
//! | 4   | [`JOIN`]: this node is in two buckets' lists; it may be marked deleted but not unlinked | [`INVALID`]: not yet initialised (new array), or with `CONST`: moved ([`MOVED`], the pointer is kept) |
//!
//! "Normal" is no bit set. A link word is compared and swapped whole, so a CAS that expects an
//! unmarked word fails once any mark is set: that is how a mark stops unaware updaters (Michael's
//! deleted bit, Click's immutable bit).

use super::node::Node;

/// Node link: the node owning this link is logically deleted.
pub(crate) const DELETED: usize = 1;
/// Head: immutable; an updater that finds it helps move the head to the new array.
pub(crate) const CONST: usize = 1;
/// Node link or head: see the module table.
pub(crate) const JOIN_FOLLOWS: usize = 2;
/// Node link: the owning node is a join node (reachable from two buckets).
pub(crate) const JOIN: usize = 4;
/// Head: not initialised yet (a new array's heads start so).
pub(crate) const INVALID: usize = 4;
/// Head: moved to the new array (the pointer is kept for readers of a pending join).
pub(crate) const MOVED: usize = CONST | INVALID;
/// All mark bits.
pub(crate) const MARKS: usize = 7;

/// The node a link word points to (null for the end of a list).
#[inline]
pub(crate) fn ptr<K, V>(w: usize) -> *mut Node<K, V> {
    (w & !MARKS) as *mut Node<K, V>
}

/// The word of an unmarked link to `n`.
#[inline]
pub(crate) fn word<K, V>(n: *mut Node<K, V>) -> usize {
    let w = n as usize;
    debug_assert_eq!(w & MARKS, 0, "nodes are 8-aligned");
    w
}
