//! Tagged links: a node pointer with a two-bit tag in its low bits (SOSP'25 §4.2-§4.3).
//!
//! Every link of a node's tower is one `AtomicUsize` holding `pointer | tag`. Nodes are at least
//! 8-byte aligned, so the two low bits are free. The tags are mutually exclusive:
//! - `None`: an ordinary link;
//! - `Locked` (level 0 only): the node and the gap after it are held by one thread (interval
//!   locking). Only the holder writes a locked link;
//! - `Deleted` (upper levels only, in this implementation): the node is being removed from this
//!   level (collective height decrement); traversals that write help unlink it;
//! - `Invalidated` (level 0 only): the node was swapped out; updates that meet it restart,
//!   queries may still read it.
//!
//! Not for: anything but packing and unpacking (the protocols live in `traverse.rs`, `lock.rs`,
//! `swap.rs` and `alloc.rs`).

use super::node::Node;

/// The tag of a link.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Tag {
    /// An ordinary link.
    None = 0,
    /// Level 0: the node and its following gap are locked.
    Locked = 1,
    /// Upper levels: the node is being unlinked from this level.
    Deleted = 2,
    /// Level 0: the node was swapped out and must not be updated any more.
    Invalidated = 3,
}

const MASK: usize = 3;

/// `ptr | tag`.
#[inline]
pub(crate) fn pack<V>(ptr: *mut Node<V>, tag: Tag) -> usize {
    debug_assert_eq!(ptr as usize & MASK, 0, "nodes are 8-byte aligned");
    ptr as usize | tag as usize
}

/// The pointer part of a link word.
#[inline]
pub(crate) fn ptr<V>(word: usize) -> *mut Node<V> {
    (word & !MASK) as *mut Node<V>
}

/// The tag part of a link word.
#[inline]
pub(crate) fn tag(word: usize) -> Tag {
    match word & MASK {
        0 => Tag::None,
        1 => Tag::Locked,
        2 => Tag::Deleted,
        _ => Tag::Invalidated,
    }
}

/// `(pointer, tag)` of a link word.
#[inline]
pub(crate) fn unpack<V>(word: usize) -> (*mut Node<V>, Tag) {
    (ptr(word), tag(word))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pack_and_unpack_round_trip_every_tag() {
        let p = 0x1000usize as *mut Node<u64>;
        for t in [Tag::None, Tag::Locked, Tag::Deleted, Tag::Invalidated] {
            let w = pack(p, t);
            assert_eq!(unpack::<u64>(w), (p, t));
        }
    }
}
