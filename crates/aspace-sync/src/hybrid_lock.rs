//! The hybrid-granular lock: per-core reader-writer locks with two global and two local modes
//! (interval skiplist, SOSP'25 §5.1, Fig. 9).
//!
//! An address space needs both *global* locking (the whole space: fork, a walk of every region)
//! and *local* locking (one core's operation on one interval, together with that interval's
//! lock). A `HybridLock` is an array of per-core reader-writer locks ([`RwSpin`], each on its own
//! cache line):
//! - **GR** (global read) read-acquires every per-core lock, **GW** (global write)
//!   write-acquires every per-core lock, both in index order;
//! - **LR** (local read) read-acquires the caller's lock, **LW** (local write) write-acquires it.
//!
//! A *core* is an index the caller passes (its handle index, say). With more cores than locks,
//! cores share a lock by group: core `c` uses lock `c % locks()` (the paper's mitigation for the
//! cost of global modes on many cores). "Different cores" below means different lock groups.
//!
//! # Compatibility (Fig. 9)
//! Whether a second holder can coexist with a first:
//!
//! | held \ wanted | GR  | GW  | LR  | LW  |
//! |---------------|-----|-----|-----|-----|
//! | **GR**        | yes | no  | yes | no  |
//! | **GW**        | no  | no  | no  | no  |
//! | **LR**        | yes | no  | yes | ≠   |
//! | **LW**        | no  | no  | ≠   | ≠   |
//!
//! `≠`: only when the two lock different cores (different groups). This is exactly what
//! read/write holds of per-core rwlocks give: two modes conflict iff they share a per-core lock
//! and one of them writes it. Global modes share every lock with every mode; local modes share
//! one lock iff their cores are in the same group.
//!
//! # Deadlock freedom
//! Global acquirers take the per-core locks in increasing index order and local ones take one
//! lock, so no two acquirers wait for each other in a cycle. A writer that waits on a lock holds
//! back new readers of *that* lock only (see `rwlock.rs`), whose holders wait only for higher
//! indices, so the order argument still holds. A thread must not acquire a second mode of the
//! same `HybridLock` while it holds a guard of it (not even LR twice): it may wait for itself.
//!
//! # Orderings
//! Acquire on every per-core lock acquisition, Release on every release; the pairs are listed in
//! `rwlock.rs`. A global guard's holder happens-after every earlier conflicting holder of *each*
//! per-core lock, hence after every earlier conflicting holder of any mode.
//!
//! Not for: guarding data by itself. The lock has no payload; callers pair the modes with their
//! own protection (the interval skiplist's interval locks for LR/LW). A panic while a global mode
//! is half acquired releases what was taken (the guard under construction owns it).

use crate::rwlock::RwSpin;
use crossbeam_utils::CachePadded;

/// Per-core reader-writer locks with the GR/GW/LR/LW modes of the module doc.
#[derive(Debug)]
pub struct HybridLock {
    locks: Box<[CachePadded<RwSpin>]>,
}

impl HybridLock {
    /// A lock with `locks` per-core locks; cores `c` and `c + locks` share one.
    ///
    /// # Panics
    /// When `locks` is 0.
    pub fn new(locks: usize) -> Self {
        assert!(locks > 0, "a HybridLock needs at least one per-core lock");
        Self {
            locks: (0..locks)
                .map(|_| CachePadded::new(RwSpin::new()))
                .collect(),
        }
    }

    /// How many per-core locks there are (cores beyond share them by group).
    pub fn locks(&self) -> usize {
        self.locks.len()
    }

    /// The per-core lock that `core` uses: `core % locks()`.
    pub fn lock_index(&self, core: usize) -> usize {
        core % self.locks.len()
    }

    /// Global read: read-acquires every per-core lock, in index order, waiting as needed.
    pub fn gr(&self) -> GlobalReadGuard<'_> {
        let mut g = GlobalReadGuard(Partial::new(self, false));
        for l in self.locks.iter() {
            l.read();
            g.0.taken += 1;
        }
        g
    }

    /// Global read if every per-core lock can be read-acquired now; releases what it took if not.
    pub fn try_gr(&self) -> Option<GlobalReadGuard<'_>> {
        let mut g = GlobalReadGuard(Partial::new(self, false));
        for l in self.locks.iter() {
            if !l.try_read() {
                return None; // `g` releases the locks taken so far
            }
            g.0.taken += 1;
        }
        Some(g)
    }

    /// Global write: write-acquires every per-core lock, in index order, waiting as needed.
    pub fn gw(&self) -> GlobalWriteGuard<'_> {
        let mut g = GlobalWriteGuard(Partial::new(self, true));
        for l in self.locks.iter() {
            l.write();
            g.0.taken += 1;
        }
        g
    }

    /// Global write if every per-core lock can be write-acquired now; releases what it took if
    /// not.
    pub fn try_gw(&self) -> Option<GlobalWriteGuard<'_>> {
        let mut g = GlobalWriteGuard(Partial::new(self, true));
        for l in self.locks.iter() {
            if !l.try_write() {
                return None; // `g` releases the locks taken so far
            }
            g.0.taken += 1;
        }
        Some(g)
    }

    /// Local read on `core`'s lock, waiting as needed.
    pub fn lr(&self, core: usize) -> LocalReadGuard<'_> {
        let index = self.lock_index(core);
        self.locks[index].read();
        LocalReadGuard { lock: self, index }
    }

    /// Local read on `core`'s lock if it can be read-acquired now.
    pub fn try_lr(&self, core: usize) -> Option<LocalReadGuard<'_>> {
        let index = self.lock_index(core);
        self.locks[index]
            .try_read()
            // A closure, not `then_some`: the guard must exist only once the lock is held.
            .then(|| LocalReadGuard { lock: self, index })
    }

    /// Local write on `core`'s lock, waiting as needed.
    pub fn lw(&self, core: usize) -> LocalWriteGuard<'_> {
        let index = self.lock_index(core);
        self.locks[index].write();
        LocalWriteGuard { lock: self, index }
    }

    /// Local write on `core`'s lock if it can be write-acquired now.
    pub fn try_lw(&self, core: usize) -> Option<LocalWriteGuard<'_>> {
        let index = self.lock_index(core);
        self.locks[index]
            .try_write()
            .then(|| LocalWriteGuard { lock: self, index })
    }
}

/// The per-core locks `0..taken` of a global mode, held in one mode; released on drop (also
/// when an acquisition is abandoned half-way, by `try_*` or by a panic).
#[derive(Debug)]
struct Partial<'a> {
    lock: &'a HybridLock,
    write: bool,
    taken: usize,
}

impl<'a> Partial<'a> {
    fn new(lock: &'a HybridLock, write: bool) -> Self {
        Self {
            lock,
            write,
            taken: 0,
        }
    }
}

impl Drop for Partial<'_> {
    fn drop(&mut self) {
        for l in self.lock.locks[..self.taken].iter().rev() {
            if self.write {
                l.write_unlock();
            } else {
                l.read_unlock();
            }
        }
    }
}

/// GR held: every per-core lock read-held. Released on drop.
#[derive(Debug)]
#[must_use = "the mode is released when the guard drops"]
pub struct GlobalReadGuard<'a>(Partial<'a>);

/// GW held: every per-core lock write-held. Released on drop.
#[derive(Debug)]
#[must_use = "the mode is released when the guard drops"]
pub struct GlobalWriteGuard<'a>(Partial<'a>);

/// LR held: one per-core lock read-held. Released on drop.
#[derive(Debug)]
#[must_use = "the mode is released when the guard drops"]
pub struct LocalReadGuard<'a> {
    lock: &'a HybridLock,
    index: usize,
}

impl LocalReadGuard<'_> {
    /// The per-core lock held (the core's group).
    pub fn lock_index(&self) -> usize {
        self.index
    }
}

impl Drop for LocalReadGuard<'_> {
    fn drop(&mut self) {
        self.lock.locks[self.index].read_unlock();
    }
}

/// LW held: one per-core lock write-held. Released on drop.
#[derive(Debug)]
#[must_use = "the mode is released when the guard drops"]
pub struct LocalWriteGuard<'a> {
    lock: &'a HybridLock,
    index: usize,
}

impl LocalWriteGuard<'_> {
    /// The per-core lock held (the core's group).
    pub fn lock_index(&self) -> usize {
        self.index
    }
}

impl Drop for LocalWriteGuard<'_> {
    fn drop(&mut self) {
        self.lock.locks[self.index].write_unlock();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        Gr,
        Gw,
        Lr,
        Lw,
    }
    use Mode::*;
    const MODES: [Mode; 4] = [Gr, Gw, Lr, Lw];

    /// Fig. 9, transcribed: `Y` can coexist, `N` cannot, `D` only on different cores.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Cell {
        Y,
        N,
        D,
    }
    use Cell::*;
    const FIG9: [[Cell; 4]; 4] = [
        //  GR GW LR LW
        [Y, N, Y, N], // GR
        [N, N, N, N], // GW
        [Y, N, Y, D], // LR
        [N, N, D, D], // LW
    ];

    fn expected(first: Mode, second: Mode, same_group: bool) -> bool {
        let i = MODES.iter().position(|&m| m == first).unwrap();
        let j = MODES.iter().position(|&m| m == second).unwrap();
        match FIG9[i][j] {
            Y => true,
            N => false,
            D => !same_group,
        }
    }

    /// Holds `mode` on `core` (global modes ignore the core); `None` if it cannot be had now.
    fn try_hold(
        lock: &HybridLock,
        mode: Mode,
        core: usize,
    ) -> Option<Box<dyn std::fmt::Debug + '_>> {
        match mode {
            Gr => lock
                .try_gr()
                .map(|g| Box::new(g) as Box<dyn std::fmt::Debug>),
            Gw => lock
                .try_gw()
                .map(|g| Box::new(g) as Box<dyn std::fmt::Debug>),
            Lr => lock
                .try_lr(core)
                .map(|g| Box::new(g) as Box<dyn std::fmt::Debug>),
            Lw => lock
                .try_lw(core)
                .map(|g| Box::new(g) as Box<dyn std::fmt::Debug>),
        }
    }

    /// Checks all 16 pairs, with the second holder on `second_core` while the first holds on
    /// core 1, against Fig. 9.
    fn check_matrix(lock: &HybridLock, second_core: usize) {
        let same_group = lock.lock_index(1) == lock.lock_index(second_core);
        for first in MODES {
            for second in MODES {
                let held = try_hold(lock, first, 1).expect("a free lock grants every mode");
                let got = try_hold(lock, second, second_core);
                assert_eq!(
                    got.is_some(),
                    expected(first, second, same_group),
                    "{first:?} held on core 1, {second:?} wanted on core {second_core} \
                     ({} locks)",
                    lock.locks()
                );
                drop(got);
                drop(held);
            }
        }
        // Everything was released: GW can be had again.
        assert!(lock.try_gw().is_some());
    }

    #[test]
    fn compatibility_matrix_is_fig9_on_the_same_core() {
        check_matrix(&HybridLock::new(4), 1);
    }

    #[test]
    fn compatibility_matrix_is_fig9_on_different_cores() {
        check_matrix(&HybridLock::new(4), 2);
    }

    #[test]
    fn cores_in_one_group_conflict_like_the_same_core() {
        // 2 locks: cores 1 and 3 share lock 1; cores 1 and 2 do not.
        let lock = HybridLock::new(2);
        assert_eq!(lock.lock_index(3), 1);
        check_matrix(&lock, 3);
        check_matrix(&lock, 2);
    }

    #[test]
    fn failed_try_global_releases_the_locks_it_took() {
        let lock = HybridLock::new(3);
        let lw = lock.lw(2); // the last lock: try_gr/try_gw take 0 and 1 first, then fail
        assert!(lock.try_gr().is_none());
        assert!(lock.try_gw().is_none());
        // Locks 0 and 1 are free again.
        let _a = lock.try_lw(0).expect("lock 0 released");
        let _b = lock.try_lw(1).expect("lock 1 released");
        drop(lw);
    }

    #[test]
    fn blocking_modes_wait_for_conflicting_holders() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let lock = HybridLock::new(2);
        let phase = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let lr = lock.lr(0);
            s.spawn(|| {
                let _gw = lock.gw(); // waits for `lr`
                assert_eq!(phase.load(SeqCst), 1, "GW entered while LR was held");
            });
            phase.store(1, SeqCst);
            drop(lr);
        });
    }

    #[test]
    #[should_panic(expected = "at least one")]
    fn zero_locks_is_refused() {
        let _ = HybridLock::new(0);
    }
}
