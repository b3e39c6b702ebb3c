//! What the stress tests of the interval maps share (`stress_skiplist.rs`, `stress_radix.rs`):
//! values that poison themselves on drop and count their live copies, a sequential model of one
//! private range, a checked snapshot of a map's contents, and the abort-on-panic guard.

#![allow(dead_code)]

use aspace_map::{Interval, IntervalMap, PAGE_SIZE as P};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

const MAGIC: u64 = 0x5eed_cafe_f00d_d00d;
const POISON: u64 = 0xdead_dead_dead_dead;

/// The base seed: `STRESS_SEED` if set (to vary runs in a loop), else `default`.
pub fn seed(default: u64) -> u64 {
    std::env::var("STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
        .wrapping_mul(64)
}

/// A value that poisons itself on drop and counts its live copies.
pub struct Val {
    magic: u64,
    pub id: u64,
    origin: (u64, u64),
    check: u64,
    live: Arc<AtomicIsize>,
}

fn checksum(id: u64, origin: (u64, u64)) -> u64 {
    (id ^ origin.0.rotate_left(17) ^ origin.1.rotate_left(41)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl Val {
    pub fn new(id: u64, origin: (u64, u64), live: &Arc<AtomicIsize>) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        Self {
            magic: MAGIC,
            id,
            origin,
            check: checksum(id, origin),
            live: Arc::clone(live),
        }
    }

    /// Panics unless the value is intact and `iv` (where it was found) lies inside its origin.
    pub fn assert_intact(&self, iv: Interval, addr: Option<u64>) {
        // Volatile: the point is to read the memory as it is now, not a cached copy.
        // SAFETY: `self` is a valid reference for the caller's guard.
        let (magic, id, o0, o1, check) = unsafe {
            (
                std::ptr::read_volatile(&self.magic),
                std::ptr::read_volatile(&self.id),
                std::ptr::read_volatile(&self.origin.0),
                std::ptr::read_volatile(&self.origin.1),
                std::ptr::read_volatile(&self.check),
            )
        };
        assert_eq!(magic, MAGIC, "a value was used after it was dropped");
        assert_eq!(check, checksum(id, (o0, o1)), "a torn or poisoned value");
        assert!(
            o0 <= iv.start && iv.end <= o1,
            "interval {iv} outside its value's origin [{o0:#x}, {o1:#x})"
        );
        if let Some(a) = addr {
            assert!(iv.contains(a), "query({a:#x}) returned {iv}");
        }
    }
}

impl Clone for Val {
    fn clone(&self) -> Self {
        assert_eq!(self.magic, MAGIC, "cloned a dropped value");
        self.live.fetch_add(1, Ordering::Relaxed);
        Self {
            magic: self.magic,
            id: self.id,
            origin: self.origin,
            check: self.check,
            live: Arc::clone(&self.live),
        }
    }
}

impl Drop for Val {
    fn drop(&mut self) {
        assert_eq!(self.magic, MAGIC, "double drop");
        // Volatile: the poison must really be written before the memory is freed.
        // SAFETY: `self` is valid for writes during drop.
        unsafe {
            std::ptr::write_volatile(&mut self.magic, POISON);
            std::ptr::write_volatile(&mut self.check, POISON);
        }
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A sequential model of one private arena: start page -> (end page, id).
#[derive(Default)]
pub struct Model(pub BTreeMap<u64, (u64, u64)>);

impl Model {
    /// Removes `[s, e)` (pages), keeping trimmed remainders.
    pub fn remove(&mut self, s: u64, e: u64) {
        let over: Vec<(u64, (u64, u64))> = self
            .0
            .range(..e)
            .filter(|(_, &(z, _))| z > s)
            .map(|(&a, &v)| (a, v))
            .collect();
        for (a, (z, id)) in over {
            self.0.remove(&a);
            if a < s {
                self.0.insert(a, (s, id));
            }
            if z > e {
                self.0.insert(e, (z, id));
            }
        }
    }

    pub fn insert(&mut self, s: u64, e: u64, id: u64) {
        self.remove(s, e);
        self.0.insert(s, (e, id));
    }

    /// The lowest gap of `len` pages in `[lo, hi)`.
    pub fn first_fit(&self, lo: u64, hi: u64, len: u64) -> Option<u64> {
        let mut at = lo;
        for (&a, &(z, _)) in self.0.range(..hi) {
            if z <= at {
                continue;
            }
            if a >= at + len {
                break;
            }
            at = at.max(z);
        }
        (at + len <= hi).then_some(at)
    }

    pub fn get(&self, page: u64) -> Option<(u64, u64, u64)> {
        self.0
            .range(..=page)
            .next_back()
            .filter(|(_, &(z, _))| z > page)
            .map(|(&a, &(z, id))| (a, z, id))
    }
}

/// The map's contents of `[s, e)` pages as `(start page, end page, id)`, checking every value.
pub fn snapshot<M: IntervalMap<Val>>(m: &M, s: u64, e: u64) -> Vec<(u64, u64, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    m.visit(s * P..e * P, &g, &mut |iv, v| {
        v.assert_intact(iv, None);
        if let Some(&(_, last_end, _)) = out.last() {
            assert!(
                last_end * P <= iv.start,
                "visit out of order or overlapping"
            );
        }
        out.push((iv.start / P, iv.end / P, v.id));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

/// Aborts the process if a worker panics: a panic inside an operation can leave locks held, or
/// the other workers wait at a barrier, and they would wait forever instead of the test failing.
pub struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("a stress worker panicked (message above); aborting");
            std::process::abort();
        }
    }
}
