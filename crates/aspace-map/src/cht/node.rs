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
    if order == 0 {
        0
    } else {
        (hash >> (64 - order)) as usize
    }
}

/// Mixes a user hash (murmur3's 64-bit finalizer): every input bit affects the top bits, so a
/// user hash that only varies in its low bits (an integer identity hash) still spreads over the
/// buckets. A bijection, so distinct user hashes stay distinct.
#[inline]
pub(crate) fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}
