//! Synchronization shim: `loom` primitives under `--cfg loom`, `std` ones otherwise.
//!
//! Every atomic and cell that lock-free readers of this crate touch is imported from here, so the
//! same code is model-checked by loom (crossbeam's `primitive` module does the same). Loom types
//! may only be used inside `loom::model`; under `--cfg loom` only the loom models in this crate
//! construct the structures that use them. Not for locks: the writer locks are `parking_lot`
//! and are never part of a loom model.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
