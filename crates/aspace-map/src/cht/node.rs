//! A bucket list node (key, value, the memoized mixed hash, the marked `next` link) and the hash
//! mixing that turns a user hash into one whose top bits index a power-of-two array.

use crate::sync::AtomicUsize;

/// One item. `hash` is the mixed hash, computed once at insertion (thesis §5.1.2: memoized
/// hashes): lists are sorted by it, and resizes never call user code (no `Hash` at resize time).
/// Aligned to 8 so that a link has three free low bits (`link.rs`).
#[repr(align(8))]
pub(crate) struct Node<K, V> {
    pub(crate) next: AtomicUsize,
    pub(crate) hash: u64,
    pub(crate) key: K,
    pub(crate) value: V,
}

impl<K, V> Node<K, V> {
    pub(crate) fn new(hash: u64, key: K, value: V) -> Box<Self> {
        Box::new(Node {
            next: AtomicUsize::new(0),
            hash,
            key,
            value,
        })
    }
}

/// The bucket of `hash` in an array of `2^order` heads: its top `order` bits (thesis §6.4:
/// "mixes the bits of the user supplied hash and then takes the most significant bits"). Sorting
/// by the whole hash puts the lower half of a bucket's split before the upper half.
#[inline]
pub(crate) fn bucket(hash: u64, order: u32) -> usize {
    // Two shifts instead of `hash >> (64 - order)`, which overflows at order 0: the first
    // clears the top bit, so order 0 gives bucket 0 without a branch (orders are at most 30).
    ((hash >> 1) >> (63 - order)) as usize
}

/// Mixes a user hash: a xor-shift folds the high half into the low half, and a multiply by
/// 2^64 / phi (Fibonacci hashing, Knuth 6.4) carries every low bit up into the top bits that
/// index the array. Both steps are bijections, so distinct user hashes stay distinct; a user
/// hash that only varies in its low bits (an integer identity hash) still spreads over the
/// buckets. One multiply: the mix is on every lookup's critical path (the hash, then the
/// bucket, then the head), where murmur3's three-multiply finalizer cost about 10 cycles more.
#[inline]
pub(crate) fn mix(h: u64) -> u64 {
    (h ^ (h >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}
