//! A bucket head array. Its `next` points to the array a resize in progress moves it to, and
//! stays set until the array is freed (a grace period after the table switched), so a reader
//! that loaded this array and finds a moved head can always follow it.

use super::link::INVALID;
use super::node::bucket;
use crate::sync::{AtomicPtr, AtomicUsize};

pub(crate) struct Table {
    /// log2 of the number of heads.
    pub(crate) order: u32,
    /// Whether this array is the target of a shrink (a head's `JOIN_FOLLOWS` then means "the
    /// join of the odd half is pending", not "the successor is a join node").
    pub(crate) shrink_target: bool,
    pub(crate) heads: Box<[AtomicUsize]>,
    pub(crate) next: AtomicPtr<Table>,
}

impl Table {
    /// An array of `2^order` heads, empty (`valid`) or not yet initialised (`INVALID`).
    pub(crate) fn new(order: u32, valid: bool, shrink_target: bool) -> Box<Self> {
        let init = if valid { 0 } else { INVALID };
        Box::new(Table {
            order,
            shrink_target,
            heads: (0..1usize << order)
                .map(|_| AtomicUsize::new(init))
                .collect(),
            next: AtomicPtr::new(std::ptr::null_mut()),
        })
    }

    /// The head of the bucket of `hash` (its top `order` bits).
    #[inline]
    pub(crate) fn head_of(&self, hash: u64) -> &AtomicUsize {
        let i = bucket(hash, self.order);
        debug_assert!(i < self.heads.len());
        // SAFETY: `bucket` keeps the top `order` bits of a 64-bit hash, so `i < 2^order`, the
        // length of `heads` (made so in `new`, never resized). No bounds check on the lookup
        // path.
        unsafe { self.heads.get_unchecked(i) }
    }

    pub(crate) fn len(&self) -> usize {
        self.heads.len()
    }
}
