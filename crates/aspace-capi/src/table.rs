//! The handle table: what a C handle names, checked on every use.
//!
//! C holds no pointer into Rust: a handle is a 64-bit number, `generation << 32 | kind << 24 |
//! index`, naming slot `index` of a fixed-size table of a given kind (spaces or cores). Each slot
//! has its own lock, a generation and at most one value. A lookup locks the slot and accepts
//! the handle only if the kind tag is the table's, the index is inside it, the slot holds a value
//! and its generation is the handle's; anything else is `EBADF`. Removing a value bumps the
//! slot's generation, so a handle kept after `aspace_destroy` or `aspace_detach` (a *stale*
//! handle) no longer matches, and a made-up number (a *forged* handle) matches only if it
//! guesses a live slot's 32-bit generation as well as its index and tag.
//!
//! Each slot's first generation is drawn at random (a per-process, per-table seed mixed with
//! the index), so the handles of neighbouring slots are not a guessable `+1` apart.
//!
//! Invariants: a slot's generation is never 0 (so the handle `0` is never valid, C's natural
//! "no handle"); it changes exactly when the slot's value is removed; free slots are reused in
//! FIFO order, so the generation of one slot wraps (and a stale handle could name a live value
//! again) only after 2^32 - 1 reuses of that slot, i.e. after 2^32 - 1 times the table's
//! capacity create/destroy pairs.
//!
//! The lock of a slot is held while a caller works on its value ([`Table::with`]): a core is
//! used by one thread at a time (a `CoreHandle` is not `Sync`), and two C threads that share a
//! core handle are serialized rather than racing. Lock order: a space's slot, then the core
//! table's free list, then a core's slot (`aspace_attach`); no other path holds two of them.
//! The lookup costs one uncontended lock and no shared write besides it: the table has no lock
//! of its own on the access path.
//!
//! Not for: what the values are (`spaces.rs`, `cores.rs`) or error codes (`errno.rs`).

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};

/// Bits of a handle's index (the low 24).
const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// Slot `index`'s first generation: `seed` and `index` mixed (splitmix64's finalizer), never 0.
fn first_generation(seed: u64, index: u64) -> u32 {
    let mut z = seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    match (z ^ (z >> 31)) as u32 {
        0 => 1,
        g => g,
    }
}

/// One slot: its generation and its value, under one lock.
struct Slot<T> {
    state: Mutex<SlotState<T>>,
}

struct SlotState<T> {
    /// Never 0; bumped when the value is removed.
    generation: u32,
    value: Option<T>,
}

/// Why a handle was refused or a value could not be stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableError {
    /// Not a live handle of this table (stale, forged, of another kind, or 0).
    BadHandle,
    /// Every slot holds a value.
    Full,
}

/// A fixed-capacity table of values named by generation-checked handles.
pub(crate) struct Table<T> {
    /// The kind tag in bits 24..32 of this table's handles.
    kind: u8,
    slots: Box<[Slot<T>]>,
    /// Indices of the empty slots, oldest first.
    free: Mutex<VecDeque<u32>>,
}

impl<T> Table<T> {
    /// A table of `capacity` empty slots (at most 2^24) whose handles carry `kind`.
    pub(crate) fn new(kind: u8, capacity: usize) -> Table<T> {
        assert!(capacity as u64 <= INDEX_MASK + 1 && capacity > 0);
        let seed = RandomState::new().hash_one(kind);
        let slots = (0..capacity as u64)
            .map(|i| Slot {
                state: Mutex::new(SlotState {
                    generation: first_generation(seed, i),
                    value: None,
                }),
            })
            .collect();
        Table {
            kind,
            slots,
            free: Mutex::new((0..capacity as u32).collect()),
        }
    }

    fn encode(&self, index: u32, generation: u32) -> u64 {
        (u64::from(generation) << 32) | (u64::from(self.kind) << INDEX_BITS) | u64::from(index)
    }

    /// The slot and generation `handle` names, if its tag is this table's and its index inside.
    fn decode(&self, handle: u64) -> Result<(&Slot<T>, u32), TableError> {
        let kind = ((handle >> INDEX_BITS) & 0xff) as u8;
        let index = (handle & INDEX_MASK) as usize;
        let generation = (handle >> 32) as u32;
        if kind != self.kind || generation == 0 {
            return Err(TableError::BadHandle);
        }
        let slot = self.slots.get(index).ok_or(TableError::BadHandle)?;
        Ok((slot, generation))
    }

    /// Stores `value` in a free slot and returns its handle; [`TableError::Full`] (and drops
    /// nothing: the value comes back) when every slot is taken.
    pub(crate) fn insert(&self, value: T) -> Result<u64, (TableError, T)> {
        let Some(index) = self.free.lock().pop_front() else {
            return Err((TableError::Full, value));
        };
        let mut state = self.slots[index as usize].state.lock();
        debug_assert!(state.value.is_none(), "a free slot is empty");
        state.value = Some(value);
        Ok(self.encode(index, state.generation))
    }

    /// Runs `f` on the value `handle` names, with the slot locked.
    pub(crate) fn with<R>(
        &self,
        handle: u64,
        f: impl FnOnce(&mut T) -> R,
    ) -> Result<R, TableError> {
        let (slot, generation) = self.decode(handle)?;
        let mut state = slot.state.lock();
        if state.generation != generation {
            return Err(TableError::BadHandle);
        }
        let value = state.value.as_mut().ok_or(TableError::BadHandle)?;
        Ok(f(value))
    }

    /// Takes the value `handle` names out of the table; the handle (and every copy of it) is
    /// stale from then on. The caller drops the value, outside the slot's lock.
    pub(crate) fn remove(&self, handle: u64) -> Result<T, TableError> {
        let (slot, generation) = self.decode(handle)?;
        let mut state = slot.state.lock();
        if state.generation != generation || state.value.is_none() {
            return Err(TableError::BadHandle);
        }
        let value = state.value.take().expect("checked above");
        state.generation = match state.generation.wrapping_add(1) {
            0 => 1,
            g => g,
        };
        let index = (handle & INDEX_MASK) as u32;
        drop(state);
        self.free.lock().push_back(index);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_handle_is_stale_and_its_slot_gets_a_new_generation() {
        let t = Table::new(7, 1);
        let a = t.insert("a").unwrap();
        assert_eq!(t.with(a, |v| *v), Ok("a"));
        assert_eq!(t.remove(a), Ok("a"));
        assert_eq!(t.with(a, |v| *v), Err(TableError::BadHandle));
        assert_eq!(t.remove(a), Err(TableError::BadHandle));
        let b = t.insert("b").unwrap();
        assert_eq!(a & INDEX_MASK, b & INDEX_MASK, "one slot");
        assert_ne!(a, b);
        assert_eq!(t.with(a, |v| *v), Err(TableError::BadHandle));
        assert_eq!(t.with(b, |v| *v), Ok("b"));
    }

    #[test]
    fn forged_and_foreign_handles_are_refused() {
        let spaces = Table::new(1, 4);
        let cores = Table::new(2, 4);
        let s = spaces.insert(10).unwrap();
        let c = cores.insert(20).unwrap();
        assert_eq!(cores.with(s, |v| *v), Err(TableError::BadHandle));
        assert_eq!(spaces.with(c, |v| *v), Err(TableError::BadHandle));
        for forged in [0, 1, u64::MAX, s ^ (1 << 40), s + 3, s | INDEX_MASK] {
            assert_eq!(spaces.with(forged, |v| *v), Err(TableError::BadHandle));
        }
    }

    #[test]
    fn a_full_table_returns_the_value() {
        let t = Table::new(1, 2);
        let a = t.insert(1).unwrap();
        t.insert(2).unwrap();
        assert_eq!(t.insert(3).unwrap_err(), (TableError::Full, 3));
        t.remove(a).unwrap();
        assert!(t.insert(3).is_ok());
    }

    #[test]
    fn generations_wrap_past_zero() {
        let t = Table::new(1, 1);
        t.slots[0].state.lock().generation = u32::MAX;
        let h = t.insert(()).unwrap();
        t.remove(h).unwrap();
        assert_eq!(t.slots[0].state.lock().generation, 1);
    }
}
