//! Recording atomics: the std atomics with the same API, each access reported to [`record`].
//!
//! Every access method is `#[track_caller]`, so the recorded site is the line of the caller (the
//! crate code doing the atomic operation). Loads record a read; stores, read-modify-writes and
//! compare-exchanges record a write, failed ones included: a failed CAS still takes the line
//! exclusive on x86 (`lock cmpxchg`) and on arm64 (LSE `cas`), so it moves the line like a store.
//! `fence` is std's, re-exported: a fence touches no line.
//!
//! The wrappers are `repr(transparent)` over the std types, so they have the same size and
//! alignment, and `CachePadded` or `#[repr(align)]` layouts of the crates stay as they are.
//!
//! Not for: production builds (the aspace crates use these only with their `conflicts` feature).

use crate::record::access;
use std::panic::Location;
use std::sync::atomic as std_atomic;
pub use std::sync::atomic::{compiler_fence, fence, Ordering};

macro_rules! recording_int {
    ($name:ident, $int:ty) => {
        #[doc = concat!("`std::sync::atomic::", stringify!($name), "` that records its accesses.")]
        #[repr(transparent)]
        #[derive(Default)]
        pub struct $name(std_atomic::$name);

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl From<$int> for $name {
            fn from(v: $int) -> Self {
                Self::new(v)
            }
        }

        impl $name {
            /// A new atomic (not recorded: nobody else can see it yet).
            pub const fn new(v: $int) -> Self {
                Self(std_atomic::$name::new(v))
            }

            #[inline]
            #[track_caller]
            fn rec(&self, write: bool) {
                access(self as *const Self as usize, write, Location::caller());
            }

            /// Load (records a read).
            #[inline]
            #[track_caller]
            pub fn load(&self, order: Ordering) -> $int {
                self.rec(false);
                self.0.load(order)
            }

            /// Store (records a write).
            #[inline]
            #[track_caller]
            pub fn store(&self, v: $int, order: Ordering) {
                self.rec(true);
                self.0.store(v, order)
            }

            /// Swap (records a write).
            #[inline]
            #[track_caller]
            pub fn swap(&self, v: $int, order: Ordering) -> $int {
                self.rec(true);
                self.0.swap(v, order)
            }

            /// Compare-exchange (records a write, failed or not).
            #[inline]
            #[track_caller]
            pub fn compare_exchange(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                self.rec(true);
                self.0.compare_exchange(current, new, success, failure)
            }

            /// Weak compare-exchange (records a write, failed or not).
            #[inline]
            #[track_caller]
            pub fn compare_exchange_weak(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                self.rec(true);
                self.0.compare_exchange_weak(current, new, success, failure)
            }

            /// Fetch-and-update loop (records a write).
            #[inline]
            #[track_caller]
            pub fn fetch_update<F: FnMut($int) -> Option<$int>>(
                &self,
                set: Ordering,
                fetch: Ordering,
                f: F,
            ) -> Result<$int, $int> {
                self.rec(true);
                self.0.fetch_update(set, fetch, f)
            }

            recording_int!(@rmw fetch_add, $int);
            recording_int!(@rmw fetch_sub, $int);
            recording_int!(@rmw fetch_and, $int);
            recording_int!(@rmw fetch_or, $int);
            recording_int!(@rmw fetch_xor, $int);
            recording_int!(@rmw fetch_max, $int);
            recording_int!(@rmw fetch_min, $int);

            /// The value, through exclusive access (not recorded: no other core can hold it).
            pub fn get_mut(&mut self) -> &mut $int {
                self.0.get_mut()
            }

            /// The value (not recorded).
            pub fn into_inner(self) -> $int {
                self.0.into_inner()
            }

            /// The atomic at `ptr` (as `std`'s `from_ptr`; not recorded).
            ///
            /// # Safety
            /// As for `std::sync::atomic::*::from_ptr`: `ptr` is aligned for the atomic, valid
            /// for reads and writes for `'a`, and only accessed atomically during `'a`.
            pub unsafe fn from_ptr<'a>(ptr: *mut $int) -> &'a Self {
                // SAFETY: `Self` is `repr(transparent)` over the std atomic, which has the size
                // and alignment of the integer; the caller guarantees the rest.
                unsafe { &*(ptr as *const Self) }
            }

            /// A raw pointer to the value (not recorded).
            pub const fn as_ptr(&self) -> *mut $int {
                self.0.as_ptr()
            }
        }
    };
    (@rmw $op:ident, $int:ty) => {
        #[doc = concat!("`", stringify!($op), "` (records a write).")]
        #[inline]
        #[track_caller]
        pub fn $op(&self, v: $int, order: Ordering) -> $int {
            self.rec(true);
            self.0.$op(v, order)
        }
    };
}

recording_int!(AtomicU64, u64);
recording_int!(AtomicUsize, usize);
recording_int!(AtomicI64, i64);
recording_int!(AtomicIsize, isize);
recording_int!(AtomicU32, u32);

/// `std::sync::atomic::AtomicBool` that records its accesses.
#[repr(transparent)]
#[derive(Default)]
pub struct AtomicBool(std_atomic::AtomicBool);

impl std::fmt::Debug for AtomicBool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl From<bool> for AtomicBool {
    fn from(v: bool) -> Self {
        Self::new(v)
    }
}

impl AtomicBool {
    /// A new atomic (not recorded).
    pub const fn new(v: bool) -> Self {
        Self(std_atomic::AtomicBool::new(v))
    }

    #[inline]
    #[track_caller]
    fn rec(&self, write: bool) {
        access(self as *const Self as usize, write, Location::caller());
    }

    /// Load (records a read).
    #[inline]
    #[track_caller]
    pub fn load(&self, order: Ordering) -> bool {
        self.rec(false);
        self.0.load(order)
    }

    /// Store (records a write).
    #[inline]
    #[track_caller]
    pub fn store(&self, v: bool, order: Ordering) {
        self.rec(true);
        self.0.store(v, order)
    }

    /// Swap (records a write).
    #[inline]
    #[track_caller]
    pub fn swap(&self, v: bool, order: Ordering) -> bool {
        self.rec(true);
        self.0.swap(v, order)
    }

    /// Compare-exchange (records a write, failed or not).
    #[inline]
    #[track_caller]
    pub fn compare_exchange(
        &self,
        current: bool,
        new: bool,
        success: Ordering,
        failure: Ordering,
    ) -> Result<bool, bool> {
        self.rec(true);
        self.0.compare_exchange(current, new, success, failure)
    }

    /// Weak compare-exchange (records a write, failed or not).
    #[inline]
    #[track_caller]
    pub fn compare_exchange_weak(
        &self,
        current: bool,
        new: bool,
        success: Ordering,
        failure: Ordering,
    ) -> Result<bool, bool> {
        self.rec(true);
        self.0.compare_exchange_weak(current, new, success, failure)
    }

    /// `fetch_or` (records a write).
    #[inline]
    #[track_caller]
    pub fn fetch_or(&self, v: bool, order: Ordering) -> bool {
        self.rec(true);
        self.0.fetch_or(v, order)
    }

    /// `fetch_and` (records a write).
    #[inline]
    #[track_caller]
    pub fn fetch_and(&self, v: bool, order: Ordering) -> bool {
        self.rec(true);
        self.0.fetch_and(v, order)
    }

    /// The value, through exclusive access (not recorded).
    pub fn get_mut(&mut self) -> &mut bool {
        self.0.get_mut()
    }

    /// The value (not recorded).
    pub fn into_inner(self) -> bool {
        self.0.into_inner()
    }
}

/// `std::sync::atomic::AtomicPtr` that records its accesses.
#[repr(transparent)]
#[derive(Default)]
pub struct AtomicPtr<T>(std_atomic::AtomicPtr<T>);

impl<T> std::fmt::Debug for AtomicPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl<T> From<*mut T> for AtomicPtr<T> {
    fn from(p: *mut T) -> Self {
        Self::new(p)
    }
}

impl<T> AtomicPtr<T> {
    /// A new atomic (not recorded).
    pub const fn new(p: *mut T) -> Self {
        Self(std_atomic::AtomicPtr::new(p))
    }

    #[inline]
    #[track_caller]
    fn rec(&self, write: bool) {
        access(self as *const Self as usize, write, Location::caller());
    }

    /// Load (records a read).
    #[inline]
    #[track_caller]
    pub fn load(&self, order: Ordering) -> *mut T {
        self.rec(false);
        self.0.load(order)
    }

    /// Store (records a write).
    #[inline]
    #[track_caller]
    pub fn store(&self, p: *mut T, order: Ordering) {
        self.rec(true);
        self.0.store(p, order)
    }

    /// Swap (records a write).
    #[inline]
    #[track_caller]
    pub fn swap(&self, p: *mut T, order: Ordering) -> *mut T {
        self.rec(true);
        self.0.swap(p, order)
    }

    /// Compare-exchange (records a write, failed or not).
    #[inline]
    #[track_caller]
    pub fn compare_exchange(
        &self,
        current: *mut T,
        new: *mut T,
        success: Ordering,
        failure: Ordering,
    ) -> Result<*mut T, *mut T> {
        self.rec(true);
        self.0.compare_exchange(current, new, success, failure)
    }

    /// Weak compare-exchange (records a write, failed or not).
    #[inline]
    #[track_caller]
    pub fn compare_exchange_weak(
        &self,
        current: *mut T,
        new: *mut T,
        success: Ordering,
        failure: Ordering,
    ) -> Result<*mut T, *mut T> {
        self.rec(true);
        self.0.compare_exchange_weak(current, new, success, failure)
    }

    /// Fetch-and-update loop (records a write).
    #[inline]
    #[track_caller]
    pub fn fetch_update<F: FnMut(*mut T) -> Option<*mut T>>(
        &self,
        set: Ordering,
        fetch: Ordering,
        f: F,
    ) -> Result<*mut T, *mut T> {
        self.rec(true);
        self.0.fetch_update(set, fetch, f)
    }

    /// The value, through exclusive access (not recorded).
    pub fn get_mut(&mut self) -> &mut *mut T {
        self.0.get_mut()
    }

    /// The value (not recorded).
    pub fn into_inner(self) -> *mut T {
        self.0.into_inner()
    }
}
