//! The per-core reader-writer spin lock that [`HybridLock`](crate::HybridLock) is made of.
//!
//! One `AtomicUsize` word: bit 0 is `WRITER` (held for writing), bit 1 is `WAITING` (a writer
//! is waiting: new readers hold back, so a stream of overlapping readers cannot starve a writer),
//! and the rest counts readers in units of `READER`. Waiting spins with crossbeam's `Backoff`
//! (spin, then yield) through [`crate::sync::spin`], which yields to loom's scheduler under loom.
//!
//! # Orderings
//! Every successful acquisition is an `Acquire` RMW and every release a `Release` RMW on the same
//! word, so each holder happens-after every earlier holder whose release it could conflict with:
//! - `read_unlock`'s `fetch_sub(Release)` pairs with the `Acquire` CAS of the next writer
//!   (`write`/`try_write`); the unlocks of several readers are RMWs, so all of them are in the
//!   release sequence the writer's CAS reads from.
//! - `write_unlock`'s `fetch_and(Release)` pairs with the `Acquire` CAS of the next reader
//!   (`read`/`try_read`) and of the next writer.
//!
//! Readers need not synchronize with each other. `WAITING` is set with a `Relaxed` `fetch_or`: it
//! carries no data, only a hint that holds back new readers.
//!
//! Not for: recursion (a thread that read-holds the lock and read-acquires it again can deadlock
//! behind a waiting writer), fairness between writers, or blocking in the kernel (waiters spin
//! and yield; critical sections are meant to be short).

use crate::sync::{spin, AtomicUsize, Ordering::*};
use crossbeam_utils::Backoff;

/// Held for writing.
const WRITER: usize = 1;
/// A writer waits: new readers hold back.
const WAITING: usize = 2;
/// One reader.
const READER: usize = 4;
/// The reader count's bits.
const READERS: usize = !(WRITER | WAITING);

/// A reader-writer spin lock without data; see the module doc.
#[derive(Debug)]
pub(crate) struct RwSpin {
    state: AtomicUsize,
}

impl RwSpin {
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicUsize::new(0),
        }
    }

    /// Read-acquires unless a writer holds or waits for the lock.
    ///
    /// # Panics
    /// When the reader count would overflow (more than `usize::MAX / 4` read holders).
    pub(crate) fn try_read(&self) -> bool {
        let mut s = self.state.load(Relaxed);
        loop {
            if s & (WRITER | WAITING) != 0 {
                return false;
            }
            let next = s.checked_add(READER).expect("too many readers of a RwSpin");
            // Acquire: pairs with the Release fetch_and in write_unlock() of the previous writer.
            match self.state.compare_exchange(s, next, Acquire, Relaxed) {
                Ok(_) => return true,
                // Another reader came or went: not a conflict, retry with its value.
                Err(now) => s = now,
            }
        }
    }

    /// Read-acquires, waiting while a writer holds or waits for the lock.
    pub(crate) fn read(&self) {
        let backoff = Backoff::new();
        while !self.try_read() {
            spin(&backoff);
        }
    }

    /// Releases one read hold.
    ///
    /// # Preconditions
    /// The caller read-holds the lock (guards in `hybrid_lock.rs` guarantee it).
    pub(crate) fn read_unlock(&self) {
        // Release: ends this reader's critical section; pairs with the Acquire CAS of the next
        // writer in try_write().
        let prev = self.state.fetch_sub(READER, Release);
        debug_assert!(prev & READERS != 0, "read_unlock without a reader");
    }

    /// Write-acquires if nobody holds the lock.
    pub(crate) fn try_write(&self) -> bool {
        let s = self.state.load(Relaxed);
        // Only WAITING (another writer's hint) may be set. Taking the lock clears it; a writer
        // still waiting sets it again on its next round.
        s & (WRITER | READERS) == 0
            // Acquire: pairs with the Release fetch_sub of the last readers (read_unlock) and the
            // Release fetch_and of the previous writer (write_unlock).
            && self.state.compare_exchange(s, WRITER, Acquire, Relaxed).is_ok()
    }

    /// Write-acquires, waiting for the readers and the writer that hold the lock. While it waits
    /// it keeps `WAITING` set so that no new reader comes in.
    pub(crate) fn write(&self) {
        let backoff = Backoff::new();
        loop {
            if self.try_write() {
                return;
            }
            if self.state.load(Relaxed) & WAITING == 0 {
                // Relaxed: a hint to readers; orders no data.
                self.state.fetch_or(WAITING, Relaxed);
            }
            spin(&backoff);
        }
    }

    /// Releases the write hold.
    ///
    /// # Preconditions
    /// The caller write-holds the lock (guards in `hybrid_lock.rs` guarantee it).
    pub(crate) fn write_unlock(&self) {
        // Release: ends the writer's critical section; pairs with the Acquire CAS of the next
        // reader (try_read) or writer (try_write). Keeps WAITING, which another writer may own.
        let prev = self.state.fetch_and(!WRITER, Release);
        debug_assert!(prev & WRITER != 0, "write_unlock without the writer");
    }
}
