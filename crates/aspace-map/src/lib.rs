//! Concurrent interval maps behind one contract (DESIGN §5).
//!
//! SKELETON: `contract` is fixed; `btree` and `bonsai` are in progress (issue 3).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod contract;

pub use contract::{Interval, IntervalLocking, IntervalMap, MapError, KEY_SPACE_END, PAGE_SIZE};
