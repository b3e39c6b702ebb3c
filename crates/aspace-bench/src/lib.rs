//! The `aspace` benchmark harness: workloads, fixed-duration measurements with
//! repeats, tables, CSV/JSON, and SVG plots.
//!
//! Structure (one concept per file):
//! - [`workload`]: the one `Workload` trait and the values it exchanges with the harness;
//! - [`harness`]: threads started after a barrier, a stop flag after a fixed duration, repeats
//!   summarised by median and range, a progress bar over the points;
//! - [`measurement`]: the serialisable record of one (workload, design, threads) point;
//! - [`report`]: the readable table with ratios to a baseline and scaling, CSV, JSON, and the
//!   results page's parts (headline, ratio table, machine, conflicts, `index.html`);
//! - [`plot`]: one SVG plot per workload and the headline plot;
//! - [`render`]: a results directory's plots and pages from its data files (`aspace report`);
//! - [`suite`]: the default suite run by `aspace` without arguments;
//! - [`workloads`]: one file per workload (`rcu-read`, `rcu-update`, `rcu-gp`, `ds-query`,
//!   `ds-alloc`, `ds-map`, `readers-writers`, `limit-counter`, `refcount`, and the
//!   address-space workloads `alloc`,
//!   `alloc-fault-modify`, `local`, `pipeline`, `global`, `fault-load` over `workloads/vm.rs`;
//!   and `interp`, an interpreter over aspace memory against a plain `Vec`);
//! - [`conflicts`]: `aspace conflicts`, the cache-line conflict audit (instrumented with the
//!   `conflicts` feature);
//! - [`limits`]: the maxima of the command line's thread counts, durations and repeats;
//! - [`error`]: why a run was refused or failed.
//!
//! The binary (`src/main.rs`) is only the command line on top of this library.
//!
//! Not for: asserting performance in tests (tests here check behaviour, never timings), or
//! single-thread micro-benchmarks (criterion, in the crates that own the code).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod conflicts;
pub mod error;
pub mod harness;
pub mod interference;
pub mod limits;
pub mod measurement;
pub mod plot;
pub mod render;
pub mod report;
pub mod suite;
pub mod workload;
pub mod workloads;

pub use error::BenchError;
pub use measurement::Measurement;
pub use workload::{Config, Sample, Workload};
