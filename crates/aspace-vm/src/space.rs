//! SKELETON (the engine helper replaces every body and this line): the shared address space.
//!
//! [`AddressSpace`] is the object threads share (cheap to clone: an `Arc`); each thread that
//! accesses memory or changes mappings calls [`AddressSpace::attach`] once and works through the
//! [`crate::CoreHandle`] it gets.

use crate::config::{Builder, Config};
use crate::error::VmError;
use crate::handle::CoreHandle;
use crate::stats::Stats;
use crate::types::RegionInfo;

/// A software address space with Linux `mmap` semantics over real memory.
#[derive(Clone)]
pub struct AddressSpace {
    config: Config,
}

impl AddressSpace {
    /// A builder with the default configuration.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Creates the space from a validated configuration (use [`AddressSpace::builder`]).
    pub(crate) fn with_config(config: Config) -> Result<AddressSpace, VmError> {
        let _ = &config;
        unimplemented!("engine helper")
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Attaches the calling thread as a new core.
    ///
    /// # Errors
    /// [`VmError::TooManyCores`] when `max_cores` handles are alive.
    pub fn attach(&self) -> Result<CoreHandle, VmError> {
        unimplemented!("engine helper")
    }

    /// The regions, sorted by address, like `/proc/self/maps`.
    pub fn maps(&self) -> Vec<RegionInfo> {
        unimplemented!("engine helper")
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        unimplemented!("engine helper")
    }
}
