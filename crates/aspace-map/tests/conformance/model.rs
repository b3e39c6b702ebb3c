//! The trivially correct sequential model of an interval map: a sorted `Vec` of intervals,
//! rebuilt naively on every update, with the contract's input checks written out explicitly.

use aspace_map::{Interval, MapError, PAGE_SIZE as P};
use std::ops::Range;

/// A sorted list of disjoint intervals and their values.
#[derive(Clone, Debug, Default)]
pub struct Model {
    ivs: Vec<(Interval, u64)>,
}

/// The contract's range check, written independently of `Interval::new`.
pub fn check_range(r: &Range<u64>) -> Result<Interval, MapError> {
    if r.start % P != 0 {
        return Err(MapError::Unaligned(r.start));
    }
    if r.end % P != 0 {
        return Err(MapError::Unaligned(r.end));
    }
    if r.end <= r.start {
        return Err(MapError::EmptyRange {
            start: r.start,
            end: r.end,
        });
    }
    Ok(Interval {
        start: r.start,
        end: r.end,
    })
}

impl Model {
    /// The intervals in address order.
    pub fn intervals(&self) -> Vec<(Interval, u64)> {
        self.ivs.clone()
    }

    /// The interval containing `addr`.
    pub fn query(&self, addr: u64) -> Option<(Interval, u64)> {
        self.ivs.iter().find(|(iv, _)| iv.contains(addr)).copied()
    }

    /// Overwrites (or removes) `r`: keeps the parts of overlapped intervals outside it.
    pub fn map(&mut self, r: Range<u64>, v: Option<u64>) -> Result<(), MapError> {
        let r = check_range(&r)?;
        let mut out = Vec::new();
        for &(iv, x) in &self.ivs {
            if !iv.overlaps(&r) {
                out.push((iv, x));
                continue;
            }
            if iv.start < r.start {
                out.push((
                    Interval {
                        start: iv.start,
                        end: r.start,
                    },
                    x,
                ));
            }
            if iv.end > r.end {
                out.push((
                    Interval {
                        start: r.end,
                        end: iv.end,
                    },
                    x,
                ));
            }
        }
        if let Some(v) = v {
            out.push((r, v));
        }
        out.sort_by_key(|(iv, _)| iv.start);
        self.ivs = out;
        Ok(())
    }

    /// Claims the lowest fitting gap: the lowest candidate start (`within.start` or the end of
    /// an interval) whose `[a, a + len)` lies in `within` and overlaps nothing.
    pub fn alloc(&mut self, within: Range<u64>, len: u64, v: u64) -> Result<Interval, MapError> {
        let within = check_range(&within)?;
        if len == 0 {
            return Err(MapError::EmptyRange {
                start: within.start,
                end: within.start,
            });
        }
        if len % P != 0 {
            return Err(MapError::Unaligned(len));
        }
        let mut candidates: Vec<u64> = std::iter::once(within.start)
            .chain(self.ivs.iter().map(|(iv, _)| iv.end))
            .filter(|&a| a >= within.start)
            .collect();
        candidates.sort_unstable();
        for a in candidates {
            let Some(end) = a.checked_add(len) else {
                continue;
            };
            if end > within.end {
                continue;
            }
            let cand = Interval { start: a, end };
            if self.ivs.iter().all(|(iv, _)| !iv.overlaps(&cand)) {
                self.ivs.push((cand, v));
                self.ivs.sort_by_key(|(iv, _)| iv.start);
                return Ok(cand);
            }
        }
        Err(MapError::NoSpace { len, within })
    }
}
