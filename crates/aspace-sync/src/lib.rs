//! Per-core building blocks shared by the interval maps and the address space.
//!
//! What will live here: the hybrid-granular per-core reader-writer lock of the
//! SOSP'25 interval skiplist (modes GR/GW/LR/LW, its Fig. 9 compatibility matrix), the adaptive
//! `LimitCounter` (§5.3 of the same paper) and RadixVM's `Refcache` (§3.1, Fig. 2). None of these
//! exist yet; they arrive with the skiplist and RadixVM issues.
//!
//! Not for: cache-line padding and backoff, which come from `crossbeam-utils` and are re-exported
//! here so that every crate pads the same way.

pub use crossbeam_utils::{Backoff, CachePadded};
