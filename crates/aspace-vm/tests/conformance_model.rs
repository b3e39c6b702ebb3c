//! Tests of the conformance suite's sequential model (tests/conformance/model.rs): hand-written
//! sequences replayed on the model and on the real kernel, compared errno by errno, line by line
//! of `/proc/self/maps` and page by page; and pure checks of placement and limits. The model is
//! what every design is judged against, so it is checked against Linux itself.

#![cfg(not(loom))]

#[allow(unused_macros)]
mod conformance;
#[path = "conformance/model_tests.rs"]
mod model_tests;

#[test]
fn model_matches_the_kernel_on_hand_written_sequences() {
    model_tests::model_matches_the_kernel_on_hand_written_sequences();
}

#[test]
fn model_places_and_limits() {
    model_tests::model_places_and_limits();
}
