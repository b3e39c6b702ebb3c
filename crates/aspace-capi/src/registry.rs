//! The two handle tables every entry point looks handles up in, and what their slots hold.
//!
//! A space's entry keeps the [`AddressSpace`] and the handles of the cores attached through it,
//! so that `aspace_destroy` can detach them: after it returns every handle of the space, its
//! own and its cores', is stale. A core's entry keeps its [`CoreHandle`], its space's handle
//! (for `aspace_detach` to strike it from that list) and the core's last fault.
//!
//! Capacities: [`ASPACE_MAX_SPACES`] spaces and [`ASPACE_MAX_CORES`] cores alive at once in the process
//! (`-EMFILE` beyond); the tables are allocated on first use (about 1 MiB for the cores).
//!
//! Not for: the table mechanics (`table.rs`).

use crate::abi::AspaceFault;
use crate::table::Table;
use aspace_vm::{AddressSpace, CoreHandle};
use std::sync::LazyLock;

/// Spaces alive at once in the process.
pub const ASPACE_MAX_SPACES: usize = 4096;
/// Cores attached at once in the process, over all spaces.
pub const ASPACE_MAX_CORES: usize = 65536;

/// Kind tags of the two tables' handles (`table.rs`): a space's handle passed as a core's, or
/// the reverse, is `EBADF`.
const SPACE_KIND: u8 = 0x5a;
const CORE_KIND: u8 = 0xc0;

pub(crate) struct SpaceEntry {
    pub(crate) space: AddressSpace,
    /// Handles of the cores attached through this space and not yet detached.
    pub(crate) cores: Vec<u64>,
}

pub(crate) struct CoreEntry {
    pub(crate) core: CoreHandle,
    /// The handle of the space it was attached to.
    pub(crate) space: u64,
    pub(crate) last_fault: AspaceFault,
}

pub(crate) static SPACES: LazyLock<Table<Box<SpaceEntry>>> =
    LazyLock::new(|| Table::new(SPACE_KIND, ASPACE_MAX_SPACES));
pub(crate) static CORES: LazyLock<Table<Box<CoreEntry>>> =
    LazyLock::new(|| Table::new(CORE_KIND, ASPACE_MAX_CORES));
