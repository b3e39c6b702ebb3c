//! The `AddressSpace` conformance suite, generic over designs.
//!
//! Every design gets the same tests by one line in its own test file:
//! `address_space_conformance!(Design::Coarse);`. The suite holds:
//! - a proptest of random operation sequences (`mmap` fixed / no-replace / hinted / anywhere,
//!   `munmap`, `mprotect`, `madvise`, `read`, `write`, `touch`, with valid and invalid input:
//!   unaligned, zero, overflowing, unknown bits, outside the space) applied to one core of the
//!   design and to the sequential [`model::Model`], comparing every result (errno or fault) after
//!   every step, `maps()` after every step, and periodically and at the end the whole state: each
//!   mapped page's contents read back, each unreadable page's fault kind, the pages around each
//!   region faulting `Unmapped`, `stats().regions == maps().len()`, the frame count between the
//!   pages that must and may hold frames, and after unmapping everything no region, no frame in
//!   use and only the root page table. It runs in two layouts: a tiny address space (32 pages,
//!   so non-fixed `mmap` fills it and hits `ENOMEM`) and the top of a 2^47 space; half the cases
//!   use a `max_map_count` of 4;
//! - explicit edge cases (one function each, named for the behaviour);
//! - multi-threaded stress tests with invariants ([`stress`]).
//!
//! Files: `harness.rs` (space construction, layouts, [`run_ops`]), `ops.rs` (the random
//! operation, its strategy, [`apply`] against the model), `checks.rs` (the invariants checked
//! between and after operations), `cases.rs` (the edge cases), `stress.rs`, `model.rs` (the
//! sequential model) and `model_tests.rs` (the model against the kernel, run by
//! `tests/conformance_model.rs`). This file holds the [`address_space_conformance!`] macro that
//! instantiates them as `#[test]`s. The fuzz harness (`fuzz.rs`, used by `tests/fuzz_smoke.rs`
//! and the cargo-fuzz targets in `fuzz/`) drives the same [`apply`] and checks from fuzzer bytes.
//!
//! Not for: placement policy beyond "free, in bounds, at the hint when the hint is free", or
//! timing.

#![allow(dead_code)]

pub mod fuzz;
pub mod model;
pub mod stress;

mod cases;
mod checks;
mod harness;
mod ops;

// The suite's items, at the paths the macro and `stress.rs` use (`conformance::run_ops`, ...);
// a test file that includes the suite without the macro leaves some unused.
#[allow(unused_imports)]
pub use cases::*;
#[allow(unused_imports)]
pub use checks::*;
#[allow(unused_imports)]
pub use harness::*;
#[allow(unused_imports)]
pub use ops::*;

/// Instantiates the whole conformance suite for `$design` (a `Design` value).
#[macro_export]
macro_rules! address_space_conformance {
    (@common $design:expr) => {
        #[allow(unused_imports)]
        use aspace_vm::Design;
        #[allow(unused_imports)]
        use proptest::prelude::*;

        const DESIGN: Design = $design;

        #[test]
        fn fixed_mmap_replaces_and_zeroes() {
            conformance::fixed_mmap_replaces_and_zeroes(DESIGN);
        }
        #[test]
        fn fixed_noreplace_fails_with_eexist_and_changes_nothing() {
            conformance::fixed_noreplace_fails_with_eexist_and_changes_nothing(DESIGN);
        }
        #[test]
        fn free_hint_is_honoured() {
            conformance::free_hint_is_honoured(DESIGN);
        }
        #[test]
        fn partial_munmap_splits_and_mprotect_makes_three_regions() {
            conformance::partial_munmap_splits_and_mprotect_makes_three_regions(DESIGN);
        }
        #[test]
        fn mprotect_over_a_hole_changes_the_prefix_and_fails_enomem() {
            conformance::mprotect_over_a_hole_changes_the_prefix_and_fails_enomem(DESIGN);
        }
        #[test]
        fn prot_none_and_missing_rights_fault_with_protection() {
            conformance::prot_none_and_missing_rights_fault_with_protection(DESIGN);
        }
        #[test]
        fn dontneed_zeroes_private_pages_and_frees_their_frames() {
            conformance::dontneed_zeroes_private_pages_and_frees_their_frames(DESIGN);
        }
        #[test]
        fn bad_input_gets_linux_errno_and_changes_nothing() {
            conformance::bad_input_gets_linux_errno_and_changes_nothing(DESIGN);
        }
        #[test]
        fn unknown_bits_linux_ignores_are_ignored() {
            conformance::unknown_bits_linux_ignores_are_ignored(DESIGN);
        }
        #[test]
        fn max_map_count_gives_enomem_and_changes_nothing() {
            conformance::max_map_count_gives_enomem_and_changes_nothing(DESIGN);
        }
        #[test]
        fn address_space_size_limit_gives_enomem() {
            conformance::address_space_size_limit_gives_enomem(DESIGN);
        }
        #[test]
        fn frame_exhaustion_faults_out_of_memory_and_frees_make_it_usable() {
            conformance::frame_exhaustion_faults_out_of_memory_and_frees_make_it_usable(DESIGN);
        }
        #[test]
        fn detach_returns_the_cores_cached_frames() {
            conformance::detach_returns_the_cores_cached_frames(DESIGN);
        }
        #[test]
        fn many_cores_attached_work_in_parallel() {
            conformance::many_cores_attached_work_in_parallel(DESIGN);
        }
        #[test]
        fn attach_beyond_max_cores_is_too_many_cores() {
            conformance::attach_beyond_max_cores_is_too_many_cores(DESIGN);
        }
        #[test]
        fn populate_and_shared_mappings_behave_like_linux() {
            conformance::populate_and_shared_mappings_behave_like_linux(DESIGN);
        }
        #[test]
        fn stress_private_and_shared_ranges_keep_invariants() {
            conformance::stress::private_and_shared_ranges_keep_invariants(DESIGN);
        }
        #[test]
        fn stress_churn_then_unmap_everything_frees_every_page_table() {
            conformance::stress::churn_then_unmap_everything_frees_every_page_table(DESIGN);
        }
        #[test]
        fn stress_concurrent_anywhere_mmaps_never_overlap() {
            conformance::stress::concurrent_anywhere_mmaps_never_overlap(DESIGN);
        }
    };
    ($design:expr) => {
        address_space_conformance!($design, random_sequences: true);
    };
    ($design:expr, random_sequences: false) => {
        address_space_conformance!(@common $design);
    };
    ($design:expr, random_sequences: true) => {
        address_space_conformance!(@common $design);

        proptest! {
            #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
            #[test]
            fn random_operations_match_the_model_in_a_tiny_space(
                ops in proptest::collection::vec(conformance::op_strategy(32), 1..80),
                tight in any::<bool>(),
            ) {
                conformance::run_ops(DESIGN, conformance::Layout::TINY, if tight { 4 } else { 1000 }, &ops);
            }

            #[test]
            fn random_operations_match_the_model_at_the_top_of_the_space(
                ops in proptest::collection::vec(conformance::op_strategy(32), 1..80),
                tight in any::<bool>(),
            ) {
                conformance::run_ops(DESIGN, conformance::Layout::TOP, if tight { 4 } else { 1000 }, &ops);
            }
        }
    };
}
