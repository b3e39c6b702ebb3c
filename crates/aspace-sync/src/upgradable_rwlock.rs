//! The reader-writer flavour of the thesis' upgradable lock ([`UpgradableRwLock`]; M. Hrubý,
//! "RCU for HelenOS", §5.2): the same protocol as [`UpgradableLock`](crate::UpgradableLock),
//! over a reader-writer spin lock instead of a mutex. `aspace-vm`'s `coarse` design keeps its
//! space lock in one, so that a space driven by one core takes no atomic read-modify-write for
//! its faults and system calls.
//!
//! # The algorithm
//!
//! The lock belongs to a [`LockGroup`]; a thread takes it through its [`Member`]:
//!
//! - **Read / write** ([`UpgradableRwLock::read`], [`UpgradableRwLock::write`]): enter a read
//!   section of the group's domain; read the group's `thread_safe` flag; if it is set take the
//!   real lock (a compare-and-swap on the lock word), otherwise update the word with plain
//!   loads and stores (the *light mode*); the guard remembers which.
//! - **Unlock** (the guard's drop): the inverse, still inside the read section, which ends
//!   last.
//! - **Upgrade**: [`LockGroup::join`] of the second member sets the flag and waits one grace
//!   period of the group's domain before it returns, exactly as for the mutex. A critical
//!   section that read the flag unset lies inside a read section that began before the grace
//!   period, so it has ended (unlock included) when `join` returns; every section that begins
//!   afterwards reads the flag set and takes the real lock. So no light section overlaps a
//!   thread-safe one, and light sections overlap nothing because they all run on the one
//!   member's thread (`Member` is `!Sync`).
//!
//! # The lock word
//!
//! `WRITER` (bit 0), `WAITING` (bit 1: a thread-safe writer waits, new thread-safe readers
//! hold back), `LIGHT` (bit 2: held in the light mode) and the reader count in units of
//! `READER`. The light mode writes `LIGHT` with every holding and clears the word when the last
//! light holder leaves; a thread-safe locker that finds `LIGHT` is the sole pre-upgrade
//! member's thread re-entering while the upgrade waits for it (or a leaked light guard):
//! spinning would deadlock the group, so it panics. In the light mode, a write while anything
//! is held, or a read while a write is held, is re-entrance on the one thread: a panic, never
//! two aliasing references (after the upgrade, re-entrance spins forever, as
//! `parking_lot::RwLock`'s may deadlock).
//!
//! # Orderings (thread-safe mode)
//! The acquiring compare-and-swaps are `Acquire`, the releases `Release` read-modify-writes on
//! the same word, as in `rwlock.rs` (`RwSpin`): a writer's `Acquire` CAS reads from the release
//! sequence of every earlier reader's `fetch_sub(Release)`; a reader's or writer's `Acquire` CAS
//! reads the previous writer's `fetch_and(Release)`. The light mode's accesses are `Relaxed`:
//! they are ordered before every thread-safe one by the upgrade's grace period (RCU's
//! guarantee), not by the word.
//!
//! No downgrade (as in the thesis): a group that had two members stays thread-safe.
//!
//! Not for: guards sent between threads (a guard holds its member's read section), or long
//! waits inside a section beyond what the domain's grace period may wait for (only a `join`
//! waits for it).

use crate::sync::{spin, AtomicUsize, Ordering};
use crate::upgradable_lock::{Group, LockGroup, Member};
use crossbeam_utils::Backoff;
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// Held for writing.
const WRITER: usize = 1;
/// A thread-safe writer waits: new thread-safe readers hold back.
const WAITING: usize = 2;
/// Held in the light mode.
const LIGHT: usize = 4;
/// One reader.
const READER: usize = 8;
/// The reader count's bits.
const READERS: usize = !(WRITER | WAITING | LIGHT);

/// A reader-writer lock of a [`LockGroup`], light while the group has one member (module doc).
#[derive(Debug)]
pub struct UpgradableRwLock<T> {
    group: Arc<Group>,
    /// The lock word (module doc).
    state: AtomicUsize,
    value: UnsafeCell<T>,
}

// SAFETY: as `std::sync::RwLock`: the lock hands out `&mut T` to one writer at a time and `&T`
// to readers only while no writer holds it (module doc), so sharing it between threads needs
// `T: Send` (a writer on another thread) and `T: Sync` (readers on several threads).
unsafe impl<T: Send + Sync> Sync for UpgradableRwLock<T> {}
// SAFETY: moving the lock moves the `T`.
unsafe impl<T: Send> Send for UpgradableRwLock<T> {}

impl<T> UpgradableRwLock<T> {
    /// A lock of `group` holding `value`.
    pub fn new(group: &LockGroup, value: T) -> UpgradableRwLock<T> {
        UpgradableRwLock {
            group: group.group.clone(),
            state: AtomicUsize::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Whether `member` belongs to this lock's group.
    #[inline]
    fn check(&self, member: &Member) {
        assert!(
            Arc::ptr_eq(&member.group, &self.group),
            "UpgradableRwLock: the member belongs to another group"
        );
    }

    /// Read-locks through `member`, which must belong to this lock's group.
    ///
    /// # Panics
    /// If `member` belongs to another group; in the light mode, if this thread holds the lock
    /// for writing; during the upgrade, if this thread still holds it in the light mode.
    #[inline]
    pub fn read<'m>(&'m self, member: &'m Member) -> UpgradableReadGuard<'m, T> {
        self.check(member);
        let section = member.reader.read();
        // Acquire: pairs with the Release store of the upgrading join; what makes "light"
        // safe to act on is the grace period (module doc).
        let thread_safe = self.group.thread_safe.load(Ordering::Acquire);
        if thread_safe {
            let backoff = Backoff::new();
            loop {
                let s = self.state.load(Ordering::Relaxed);
                assert!(s & LIGHT == 0, "{RELOCKED}");
                if s & (WRITER | WAITING) == 0 {
                    let next = s.checked_add(READER).expect("too many readers");
                    // Acquire: pairs with the Release fetch_and of the previous writer's unlock.
                    if self
                        .state
                        .compare_exchange_weak(s, next, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                } else {
                    spin(&backoff);
                }
            }
        } else {
            // Relaxed (both): only this member's thread touches the word in the light mode.
            let s = self.state.load(Ordering::Relaxed);
            assert!(
                s & WRITER == 0,
                "UpgradableRwLock::read: this thread holds the lock for writing"
            );
            let next = s.checked_add(READER).expect("too many readers");
            self.state.store(next | LIGHT, Ordering::Relaxed);
        }
        UpgradableReadGuard {
            lock: self,
            thread_safe,
            _section: section,
        }
    }

    /// Write-locks through `member`, which must belong to this lock's group.
    ///
    /// # Panics
    /// If `member` belongs to another group; in the light mode, if this thread holds the lock;
    /// during the upgrade, if this thread still holds it in the light mode.
    #[inline]
    pub fn write<'m>(&'m self, member: &'m Member) -> UpgradableWriteGuard<'m, T> {
        self.check(member);
        let section = member.reader.read();
        // Acquire: as in `read`.
        let thread_safe = self.group.thread_safe.load(Ordering::Acquire);
        if thread_safe {
            let backoff = Backoff::new();
            loop {
                let s = self.state.load(Ordering::Relaxed);
                assert!(s & LIGHT == 0, "{RELOCKED}");
                if s & (WRITER | READERS) == 0 {
                    // Acquire: pairs with the Release unlocks of the previous holders. Clears
                    // WAITING: another waiting writer sets it again.
                    if self
                        .state
                        .compare_exchange_weak(s, WRITER, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                } else {
                    if s & WAITING == 0 {
                        // Relaxed: a hint that holds back new readers; carries no data.
                        self.state.fetch_or(WAITING, Ordering::Relaxed);
                    }
                    spin(&backoff);
                }
            }
        } else {
            // Relaxed (both): as in `read`.
            assert!(
                self.state.load(Ordering::Relaxed) == 0,
                "UpgradableRwLock::write: this thread holds the lock"
            );
            self.state.store(WRITER | LIGHT, Ordering::Relaxed);
        }
        UpgradableWriteGuard {
            lock: self,
            thread_safe,
            _section: section,
        }
    }

    /// The value, through exclusive access to the lock.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// The value, consuming the lock.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

const RELOCKED: &str = "UpgradableRwLock: the lock is held in the light mode by this thread \
                        (relocked during the upgrade) or by a leaked guard";

/// A read-held [`UpgradableRwLock`]; dropping it unlocks. Not `Send`: it holds the member's
/// read section.
#[must_use = "dropping the guard unlocks at once"]
pub struct UpgradableReadGuard<'m, T> {
    lock: &'m UpgradableRwLock<T>,
    thread_safe: bool,
    _section: aspace_rcu::Guard<'m>,
}

/// A write-held [`UpgradableRwLock`]; dropping it unlocks. Not `Send`: it holds the member's
/// read section.
#[must_use = "dropping the guard unlocks at once"]
pub struct UpgradableWriteGuard<'m, T> {
    lock: &'m UpgradableRwLock<T>,
    thread_safe: bool,
    _section: aspace_rcu::Guard<'m>,
}

impl<T> UpgradableReadGuard<'_, T> {
    /// Whether this section took the real lock (the group was upgraded when it began).
    pub fn is_thread_safe(&self) -> bool {
        self.thread_safe
    }
}

impl<T> UpgradableWriteGuard<'_, T> {
    /// Whether this section took the real lock (the group was upgraded when it began).
    pub fn is_thread_safe(&self) -> bool {
        self.thread_safe
    }
}

impl<T> Deref for UpgradableReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a read guard: no writer holds the lock while it lives (module doc).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> Deref for UpgradableWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the write guard is the lock's one critical section (module doc).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for UpgradableWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes the reference unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for UpgradableReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.thread_safe {
            // Release: the section's reads happen before the next writer's Acquire CAS.
            self.lock.state.fetch_sub(READER, Ordering::Release);
        } else {
            // Relaxed: the light mode's plain store; the last light holder clears LIGHT.
            let s = self.lock.state.load(Ordering::Relaxed) - READER;
            let next = if s & READERS == 0 { 0 } else { s };
            self.lock.state.store(next, Ordering::Relaxed);
        }
        // The read section ends after this body (module doc: the unlock is inside it).
    }
}

impl<T> Drop for UpgradableWriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.thread_safe {
            // Release: the section's writes happen before the next holder's Acquire CAS;
            // keeps a WAITING set meanwhile.
            self.lock.state.fetch_and(!WRITER, Ordering::Release);
        } else {
            // Relaxed: as in the read guard.
            self.lock.state.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
