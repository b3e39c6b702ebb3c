//! The `aspace` binary. SKELETON.
fn main() {}
