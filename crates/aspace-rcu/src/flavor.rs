//! The two RCU flavors (SKELETON: fixed surface).

/// A grace-period algorithm. Sealed: `Memb` and `Qsbr` are the only flavors.
pub trait Flavor: Send + Sync + 'static + sealed::Sealed {
    /// Short name used in reports ("memb", "qsbr").
    const NAME: &'static str;
}

/// Thesis §4.4: reader nesting counter + group in one word, compiler fences only; the writer
/// forces barriers with `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memb;

/// Quiescent-state-based reclamation: zero-cost read sections; threads announce quiescent states.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qsbr;

impl Flavor for Memb {
    const NAME: &'static str = "memb";
}
impl Flavor for Qsbr {
    const NAME: &'static str = "qsbr";
}

/// Which reader-side barrier mode a `memb` domain runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembMode {
    /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` is registered: readers use compiler fences only.
    Membarrier,
    /// membarrier is unavailable: readers issue full fences (slower reads, same guarantees).
    FenceFallback,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Memb {}
    impl Sealed for super::Qsbr {}
}
