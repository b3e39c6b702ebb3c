//! The conflict audit's shim and analysis (issue 12, `aspace conflicts`).
//!
//! What it is: drop-in replacements for the std atomics and the `parking_lot` locks that record,
//! per thread, which 64-byte cache lines an *operation* read and wrote ([`atomic`], [`lock`],
//! [`record`]), and the analysis that turns the recorded operations of a run into conflict
//! counts in the RadixVM / Commuter sense ([`analysis`]): a line an operation accessed is
//! *conflicting* when an operation of another core in the same or the next round accessed it
//! too and at least one of the two accesses was a write, i.e. when the line had to move between
//! the two cores' caches.
//!
//! How it is used: the aspace crates import their atomics and locks through their `sync`
//! modules; with their cargo feature `conflicts` (off by default) those aliases name the types
//! of this crate, otherwise the std / `parking_lot` types exactly as before, so the normal and
//! loom builds do not change and cost nothing. The `aspace` binary's `conflicts` subcommand
//! (built with `--features conflicts`) runs a workload's operations in rounds on N threads,
//! wrapping each in [`record::begin_op`] / [`record::end_op`], and feeds the result to
//! [`analysis::analyze`].
//!
//! Sites: a line is labelled by the source location (`file:line:col`) of the atomic operation or
//! lock call that touched it (`#[track_caller]`), which stands in for the symbol or allocation
//! site of the data: the code that touches a shared word names it.
//!
//! Not for: plain (non-atomic) memory, which is not recorded unless a lock guards it (the lock
//! word stands for it: a write-locked section moves the lock's line anyway), nor for timing.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod analysis;
pub mod atomic;
pub mod lock;
pub mod record;
pub mod runner;

pub use analysis::{analyze, analyze_pairs, Analysis, LineReport, OpRecord, PairReport};
pub use record::{begin_op, end_op, rcu_scope, OpAccesses};
pub use runner::{run_rounds, Recorded};

/// Bytes per cache line (x86-64 and most arm64 cores).
pub const LINE: usize = 64;
