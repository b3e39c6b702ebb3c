//! Recording locks: `parking_lot`'s `Mutex` and `RwLock` with the same API, each acquisition
//! reported to [`record`] as a write of the lock word.
//!
//! Every acquisition writes the lock word (an RMW on the word, read-locking an `RwLock`
//! included: it bumps the reader count), and every release writes it again. Since the analysis
//! works on the *set* of lines an operation touched, recording the acquisition alone is exact:
//! the release touches the same line in the same operation. Failed `try_*` attempts record a
//! write too (they did a CAS on the word). The guards are `parking_lot`'s own, so code that maps
//! them (`RwLockReadGuard::map`) or names their types is unchanged.
//!
//! The data a lock protects is not recorded: under a write lock the lock word already conflicts
//! with every other user of the lock, which is the conflict that matters; a design that reads
//! lock-protected data without the lock does so through atomics, which are recorded.
//!
//! Not for: production builds (used only under the aspace crates' `conflicts` feature).

use crate::record::access;
use parking_lot::{MutexGuard, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};
use std::panic::Location;

/// `parking_lot::Mutex` recording its lock word.
#[derive(Default)]
pub struct Mutex<T: ?Sized>(parking_lot::Mutex<T>);

impl<T: ?Sized + std::fmt::Debug> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl<T> Mutex<T> {
    /// A new mutex (not recorded).
    pub const fn new(value: T) -> Self {
        Self(parking_lot::Mutex::new(value))
    }

    /// The value (not recorded).
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    #[inline]
    #[track_caller]
    fn rec(&self) {
        // SAFETY: `raw` is only used to take the lock word's address; it is never locked or
        // unlocked through this reference.
        let word = unsafe { self.0.raw() } as *const parking_lot::RawMutex as usize;
        access(word, true, Location::caller());
    }

    /// Locks it (records a write of the lock word).
    #[inline]
    #[track_caller]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.rec();
        self.0.lock()
    }

    /// Tries to lock it (records a write of the lock word).
    #[inline]
    #[track_caller]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.rec();
        self.0.try_lock()
    }

    /// Whether it is locked (records a read of the lock word).
    #[inline]
    #[track_caller]
    pub fn is_locked(&self) -> bool {
        // SAFETY: as in `rec`, the address only.
        let word = unsafe { self.0.raw() } as *const parking_lot::RawMutex as usize;
        access(word, false, Location::caller());
        self.0.is_locked()
    }

    /// The value, through exclusive access (not recorded).
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }

    /// A raw pointer to the value (not recorded).
    pub fn data_ptr(&self) -> *mut T {
        self.0.data_ptr()
    }
}

/// `parking_lot::RwLock` recording its lock word.
#[derive(Default)]
pub struct RwLock<T: ?Sized>(parking_lot::RwLock<T>);

impl<T: ?Sized + std::fmt::Debug> std::fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl<T> RwLock<T> {
    /// A new lock (not recorded).
    pub const fn new(value: T) -> Self {
        Self(parking_lot::RwLock::new(value))
    }

    /// The value (not recorded).
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    #[inline]
    #[track_caller]
    fn rec(&self, write: bool) {
        // SAFETY: `raw` is only used to take the lock word's address; it is never locked or
        // unlocked through this reference.
        let word = unsafe { self.0.raw() } as *const parking_lot::RawRwLock as usize;
        access(word, write, Location::caller());
    }

    /// Read-locks it (records a write of the lock word: the reader count changes).
    #[inline]
    #[track_caller]
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.rec(true);
        self.0.read()
    }

    /// Write-locks it (records a write of the lock word).
    #[inline]
    #[track_caller]
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.rec(true);
        self.0.write()
    }

    /// Upgradable read lock (records a write of the lock word).
    #[inline]
    #[track_caller]
    pub fn upgradable_read(&self) -> RwLockUpgradableReadGuard<'_, T> {
        self.rec(true);
        self.0.upgradable_read()
    }

    /// Tries to read-lock it (records a write of the lock word).
    #[inline]
    #[track_caller]
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        self.rec(true);
        self.0.try_read()
    }

    /// Tries to write-lock it (records a write of the lock word).
    #[inline]
    #[track_caller]
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        self.rec(true);
        self.0.try_write()
    }

    /// Whether it is locked (records a read of the lock word).
    #[inline]
    #[track_caller]
    pub fn is_locked(&self) -> bool {
        self.rec(false);
        self.0.is_locked()
    }

    /// The value, through exclusive access (not recorded).
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }

    /// A raw pointer to the value (not recorded).
    pub fn data_ptr(&self) -> *mut T {
        self.0.data_ptr()
    }
}
