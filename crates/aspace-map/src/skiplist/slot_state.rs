//! What each reader slot of a skiplist keeps between operations (`readers.rs`'s `SlotLocal`):
//! the retire list of the nodes its operations unlinked, the pool of node memory that list
//! refills after grace periods and the slot's allocations drain (`pool.rs`), and the locking
//! traversal of the held range whose read section owns the slot.
//!
//! The traversal record (a [`Position`]: each level's predecessor and successor, 320 bytes)
//! lives here rather than in the [`SkipLocked`](super::SkipLocked) for a size reason: a held
//! range is returned and stored by value through several layers (the map's `lock`, the
//! engine's windows), and each move of a `SkipLocked` that carried the record was a 320-byte
//! copy (11-16% of `local`'s cycle on `interval`, issue 21's profile). The slot is locked by
//! the section for as long as the range is held, so the record is written in place by the
//! locking traversal and read in place by the swap, and nothing else reads it in between.
//!
//! Not for: the reader pool itself (`readers.rs`), retiring (`retire.rs`) or the node pool's
//! workings (`pool.rs`).

use super::pool::NodePool;
use super::readers::SlotLocal;
use super::retire::RetireList;
use super::traverse::Position;
use aspace_rcu::Domain;

/// One reader slot's state (module doc).
pub(crate) struct SlotState<V> {
    /// The nodes this slot's operations unlinked, freed after grace periods.
    pub(crate) retired: RetireList<V>,
    /// Node memory whose grace period has ended, for this slot's next allocations.
    pub(crate) pool: NodePool<V>,
    /// The locking traversal of the range held by the section that owns the slot (valid only
    /// while that section lives; rewritten by the next lock).
    pub(crate) held: Position<V>,
}

// SAFETY: the retire list is `Send` for `V: Send` (`retire.rs`), the pool for every `V`
// (plain memory, `pool.rs`); the record is plain
// addresses, only dereferenced by the thread whose section owns the slot, inside that section
// (`SkipLocked`'s swap), so moving the state to another thread moves nothing it could use.
unsafe impl<V: Send> Send for SlotState<V> {}

impl<V> Default for SlotState<V> {
    fn default() -> Self {
        SlotState {
            retired: RetireList::default(),
            pool: NodePool::default(),
            held: Position::new(),
        }
    }
}

impl<V: Send + 'static> SlotLocal for SlotState<V> {
    /// A temporary slot's pool starts empty and is emptied here (its allocations used the
    /// allocator; a collection during its one use may have kept a few blocks).
    fn release(&mut self, domain: &Domain) {
        self.retired.release(domain);
        self.pool.clear();
    }
}
