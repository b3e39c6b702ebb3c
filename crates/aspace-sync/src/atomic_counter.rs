//! `AtomicCounter`: the exact limit counter everybody writes first, one shared atomic, as a
//! benchmark baseline for [`LimitCounter`](crate::LimitCounter).
//!
//! `try_add` is a CAS loop that refuses to pass the limit; `sub` is one `fetch_sub`. Exact and
//! simple, but every update of every core writes the same cache line: the bottleneck SOSP'25
//! §3.5 describes once the other scalability problems are solved.
//!
//! Orderings: units a `sub` frees (`Release` `fetch_sub`) are taken by a later `try_add`'s
//! `Acquire` CAS, as in `limit_counter.rs`.
//!
//! Not for: scalable counting (that is `LimitCounter`).

use crate::counter::{sub_saturating, Counter, LimitExceeded};
use crate::sync::{AtomicU64, Ordering::*};
use crossbeam_utils::CachePadded;

/// One shared atomic with a limit check by CAS.
#[derive(Debug)]
pub struct AtomicCounter {
    value: CachePadded<AtomicU64>,
    limit: u64,
}

impl AtomicCounter {
    /// A counter at 0 with the given limit.
    pub fn new(limit: u64) -> Self {
        Self {
            value: CachePadded::new(AtomicU64::new(0)),
            limit,
        }
    }
}

impl Counter for AtomicCounter {
    fn try_add(&self, _core: usize, n: u64) -> Result<(), LimitExceeded> {
        let mut v = self.value.load(Relaxed);
        loop {
            let Some(new) = v.checked_add(n).filter(|&new| new <= self.limit) else {
                return Err(LimitExceeded {
                    limit: self.limit,
                    requested: n,
                });
            };
            // Acquire: takes free units; pairs with the Release fetch_sub in sub().
            match self.value.compare_exchange(v, new, Acquire, Relaxed) {
                Ok(_) => return Ok(()),
                Err(now) => v = now,
            }
        }
    }

    fn sub(&self, _core: usize, n: u64) {
        // Release: frees units; pairs with the Acquire CAS in try_add().
        sub_saturating(&self.value, n, Release);
    }

    fn sum(&self) -> u64 {
        self.value.load(Relaxed)
    }

    fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_limit_and_counts_exactly() {
        let c = AtomicCounter::new(10);
        c.try_add(0, 7).unwrap();
        assert!(c.try_add(1, 4).is_err());
        c.try_add(1, 3).unwrap();
        c.sub(0, 5);
        assert_eq!(c.sum(), 5);
        c.sub(0, 9);
        assert_eq!(c.sum(), 0, "over-subtraction saturates");
    }
}
