//! The thesis' upgradable lock (M. Hrubý, "RCU for HelenOS", §5.2 "Upgradable user space
//! futexes"; evaluated in §6.7, Fig. 6.7): a mutex that costs no atomic read-modify-write while
//! only one thread can take it, and turns into a real lock, for good, once a second thread may.
//!
//! # The algorithm (§5.2.2, FUTEX-LOCK / FUTEX-UNLOCK / UPGRADE-ALL-FUTEXES-AND-WAIT)
//!
//! Locks belong to a [`LockGroup`] (the thesis' process: its `use-thread-safe-futexes` flag, its
//! `upgrade-and-wait-futex` and an RCU domain). A thread takes the group's locks through its
//! [`Member`] (the thesis' thread, registered as an RCU reader of the group's domain).
//!
//! - **Lock** ([`UpgradableLock::lock`]): enter an RCU read section; read the group's
//!   `thread_safe` flag; if it is set, take the real lock (one compare-and-swap), otherwise
//!   take nothing (the *light mode*); remember which in the guard.
//! - **Unlock** (the guard's drop): release the real lock if the guard took it; leave the read
//!   section.
//! - **Upgrade** ([`LockGroup::join`] of the second member): under the group's join mutex, set
//!   `thread_safe` and wait one grace period (`synchronize`) before `join` returns. Every
//!   critical section runs inside a read section, so the grace period waits for every one that
//!   may have read the flag unset; every read section that does not end before the grace
//!   period ends sees the flag set (the RCU publish guarantee: `membarrier` in the `memb`
//!   flavor orders the reader's load after the writer's store or the writer's scan after the
//!   reader's section). From then on every critical section takes the real lock.
//!
//! Why the light mode is sound: while the group has one member, only that member can lock any
//! of the group's locks, and a `Member` is `!Sync`, so all those critical sections run on one
//! thread at a time; the one thing they can get wrong is re-entrance, which the light mode
//! checks with a plain load and store of the lock word (no read-modify-write) and refuses with a
//! panic (after the upgrade, re-entrance deadlocks, as `std::sync::Mutex` may). A member of
//! another group is refused (a panic, like a foreign RCU guard): its light mode would not
//! exclude this group's members.
//!
//! The thesis never downgrades, and neither does this lock: a group that had two members stays
//! thread-safe when one leaves (a downgrade would need every member to agree that it is alone).
//!
//! # Costs
//!
//! Light mode: the read section's two plain stores (the `memb` reader's nesting word), one
//! load of the flag, one load and two stores of the lock word. Thread-safe mode: the same
//! plus one compare-and-swap and one release store, which is a plain mutex's cost plus the
//! read section and the flag (the thesis measured 2.6x faster single-threaded and 15% slower
//! once upgraded; the `mutex` workload of `aspace bench` measures both here).
//!
//! Not for: locks taken and released by different threads (the thesis' `async_futex` could
//! not be converted either), or waiting in a critical section for long: the read section
//! holds back the domain's grace periods, and the real lock spins (then yields) rather than
//! parks, as this crate's other locks do.

use crate::sync::{spin, AtomicBool, AtomicUsize, Ordering};
use aspace_rcu::{Domain, Reader};
use crossbeam_utils::Backoff;
#[cfg(loom)]
use loom::sync::Mutex;
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
#[cfg(not(loom))]
use std::sync::Mutex;

/// The shared part of a [`LockGroup`].
#[derive(Debug)]
pub(crate) struct Group {
    /// The thesis' `use-thread-safe-futexes`: set once, by the join that upgrades, before its
    /// grace period; read inside every critical section's read section.
    pub(crate) thread_safe: AtomicBool,
    /// The thesis' `upgrade-and-wait-futex`, guarding the member count and whether the upgrade's
    /// grace period has *completed* (the flag alone says only that it began: a `synchronize()`
    /// that panics, e.g. the debug check of a join inside a read section, leaves it set).
    members: Mutex<JoinState>,
    /// A copy of `members.members`, stored under the mutex, read by [`LockGroup::members`]
    /// without it: that mutex is held across the upgrade's grace period, so a `members()`
    /// inside a critical section would wait for a join that waits for the section.
    count: AtomicUsize,
    /// The domain whose read sections enclose the critical sections.
    domain: Domain,
}

/// [`Group::members`]: the member count and whether an upgrade's grace period has ended.
#[derive(Debug, Default)]
struct JoinState {
    members: usize,
    upgraded: bool,
}

/// A set of [`UpgradableLock`]s that upgrade together: light while the group has one
/// [`Member`], thread-safe from the moment a second one joins (module doc).
#[derive(Clone, Debug)]
pub struct LockGroup {
    pub(crate) group: Arc<Group>,
}

impl Default for LockGroup {
    fn default() -> Self {
        Self::new()
    }
}

impl LockGroup {
    /// A group with no member yet, in light mode.
    ///
    /// # Panics
    /// If its RCU domain's reclaimer thread cannot be spawned ([`LockGroup::try_new`] returns
    /// that error instead).
    pub fn new() -> LockGroup {
        LockGroup::try_new().expect("aspace-sync: cannot spawn the lock group's RCU reclaimer")
    }

    /// [`LockGroup::new`] that returns the error of spawning its RCU domain's reclaimer thread
    /// (`EAGAIN` under a thread or memory limit) instead of panicking.
    ///
    /// # Errors
    /// The spawn's error.
    pub fn try_new() -> std::io::Result<LockGroup> {
        Ok(LockGroup {
            group: Arc::new(Group {
                thread_safe: AtomicBool::new(false),
                members: Mutex::new(JoinState::default()),
                count: AtomicUsize::new(0),
                domain: Domain::try_with_config(aspace_rcu::DomainConfig::default())?,
            }),
        })
    }

    /// Joins the group: the handle through which one thread takes the group's locks. The
    /// second join upgrades every lock of the group and returns only after the grace period
    /// that ends every critical section that ran in the light mode (UPGRADE-ALL-FUTEXES-AND-
    /// WAIT).
    ///
    /// Must not be called while this thread holds a guard of this group: the grace period
    /// would wait for it (debug builds panic, release builds wait forever).
    pub fn join(&self) -> Member {
        let reader = self.group.domain.register();
        let mut members = self
            .group
            .members
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Counted only once the upgrade (if any) completed: a panic below leaves no phantom.
        let count = members.members + 1;
        if count >= 2 && !members.upgraded {
            // Release: with the grace period, publishes the switch to every later read
            // section (RCU-ASSIGN). Stored again by a join after a panicked one (idempotent).
            self.group.thread_safe.store(true, Ordering::Release);
            self.group.domain.synchronize();
            members.upgraded = true;
        }
        members.members = count;
        // Relaxed: a statistic for `members()` (see `Group::count`).
        self.group.count.store(count, Ordering::Relaxed);
        drop(members);
        Member::new(self, reader)
    }

    /// Whether the group's upgrade has begun (critical sections that start now take the real
    /// lock; light ones may still be running until the upgrading join returns).
    pub fn is_thread_safe(&self) -> bool {
        // Acquire: as in `UpgradableLock::lock`.
        self.group.thread_safe.load(Ordering::Acquire)
    }

    /// The number of members now. Takes no lock: callable inside a critical section, also
    /// while a join waits for that section.
    pub fn members(&self) -> usize {
        // Relaxed: a statistic; joins and leaves store it under the join mutex.
        self.group.count.load(Ordering::Relaxed)
    }
}

/// One thread's handle on a [`LockGroup`] (the thesis' thread): `Send`, not `Sync`, so the
/// critical sections it opens run on one thread at a time. Leaving (drop) does not downgrade.
#[derive(Debug)]
pub struct Member {
    pub(crate) group: Arc<Group>,
    pub(crate) reader: Reader,
    /// `!Sync` (a `Reader` is already; stated here because the light mode relies on it).
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl Member {
    fn new(group: &LockGroup, reader: Reader) -> Member {
        Member {
            group: group.group.clone(),
            reader,
            _not_sync: PhantomData,
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut members = self
            .group
            .members
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        members.members -= 1;
        // Relaxed: as in `LockGroup::join`.
        self.group.count.store(members.members, Ordering::Relaxed);
    }
}

/// [`UpgradableLock::locked`]: free, held in the light mode, held by compare-and-swap.
const FREE: usize = 0;
const LIGHT: usize = 1;
const HELD: usize = 2;

/// A mutex of a [`LockGroup`], light while the group has one member (module doc).
#[derive(Debug)]
pub struct UpgradableLock<T> {
    group: Arc<Group>,
    /// Held or not: in the light mode written with plain stores by the one member's thread, in
    /// thread-safe mode taken by compare-and-swap.
    locked: AtomicUsize,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out `&mut T` to one critical section at a time (module doc: the light
// mode's sections run on one thread, the thread-safe mode's exclude by compare-and-swap), so
// sharing the lock between threads needs only `T: Send`, as for `std::sync::Mutex`.
unsafe impl<T: Send> Sync for UpgradableLock<T> {}
// SAFETY: moving the lock moves the `T`.
unsafe impl<T: Send> Send for UpgradableLock<T> {}

impl<T> UpgradableLock<T> {
    /// A lock of `group` holding `value`.
    pub fn new(group: &LockGroup, value: T) -> UpgradableLock<T> {
        UpgradableLock {
            group: group.group.clone(),
            locked: AtomicUsize::new(FREE),
            value: UnsafeCell::new(value),
        }
    }

    /// Locks, through `member`, which must belong to this lock's group (FUTEX-LOCK).
    ///
    /// # Panics
    /// If `member` belongs to another group, or (light mode) if the lock is already held:
    /// only this thread can hold it then, so it would deadlock itself once upgraded.
    #[inline]
    pub fn lock<'m>(&'m self, member: &'m Member) -> UpgradableGuard<'m, T> {
        assert!(
            Arc::ptr_eq(&member.group, &self.group),
            "UpgradableLock::lock: the member belongs to another group"
        );
        let section = member.reader.read();
        // Acquire: pairs with the Release store of the upgrading join. What makes the value
        // safe to act on is the grace period, not this pairing: the load is inside the read
        // section, so a section that read "light" ends before the upgrading join returns.
        let thread_safe = self.group.thread_safe.load(Ordering::Acquire);
        if thread_safe {
            let backoff = Backoff::new();
            // Acquire: pairs with the Release store of the previous holder's unlock.
            while let Err(current) =
                self.locked
                    .compare_exchange_weak(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            {
                // Only a section older than the upgrade's grace period holds the word in the
                // light mode: the sole pre-upgrade member's, i.e. this thread re-entering while
                // the upgrade waits for it (or a leaked light guard). Spinning would deadlock.
                assert!(
                    current != LIGHT,
                    "UpgradableLock::lock: the lock is already held by this thread (light mode, \
                     relocked during the upgrade) or by a leaked guard"
                );
                spin(&backoff);
            }
        } else {
            // Relaxed (both): only this member's thread touches the word in the light mode;
            // the grace period of the upgrade orders these accesses before every thread-safe
            // one.
            assert!(
                self.locked.load(Ordering::Relaxed) == FREE,
                "UpgradableLock::lock: the lock is already held by this thread"
            );
            self.locked.store(LIGHT, Ordering::Relaxed);
        }
        UpgradableGuard {
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

/// A held [`UpgradableLock`]; dropping it unlocks (FUTEX-UNLOCK). Not `Send`: it holds the
/// member's read section.
#[must_use = "dropping the guard unlocks at once"]
pub struct UpgradableGuard<'m, T> {
    lock: &'m UpgradableLock<T>,
    /// How the lock was taken (the thesis' `futex.upgraded`): unlock does the inverse.
    thread_safe: bool,
    _section: aspace_rcu::Guard<'m>,
}

impl<T> UpgradableGuard<'_, T> {
    /// Whether this critical section took the real lock (the group was upgraded when it began).
    pub fn is_thread_safe(&self) -> bool {
        self.thread_safe
    }
}

impl<T> Deref for UpgradableGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the one critical section of the lock (module doc).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for UpgradableGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes the reference unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for UpgradableGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.thread_safe {
            // Release: the critical section's writes happen before the next holder's Acquire
            // compare-and-swap in `lock`.
            self.lock.locked.store(FREE, Ordering::Release);
        } else {
            // Relaxed: the light mode's plain store (see `lock`).
            self.lock.locked.store(FREE, Ordering::Relaxed);
        }
        // The read section (`_section`) ends after this body: the unlock is inside it, so the
        // upgrade's grace period also waits for the light unlock's store, and no thread-safe
        // locker after the upgrade finds the word `LIGHT` (which `lock` refuses with a panic).
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
