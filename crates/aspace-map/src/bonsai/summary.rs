//! The writer-only summary of a Bonsai subtree: its size (Adams' weight) and the gap
//! augmentation of `alloc` (lowest start, highest end, largest inner gap), and [`Summary::join`],
//! which computes a node's summary from its interval and its children's summaries.
//!
//! A value type with no dependency on nodes, so that `node.rs` (which stores it) and
//! `augment.rs` (which searches with it) both depend on it and not on each other. The
//! augmentation, its maintenance and the search are described in `augment.rs`.
//!
//! Not for: packing into a node (`node.rs`), the search (`augment.rs`).

/// Writer-only summary of a subtree (see the module doc).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Summary {
    /// Number of nodes.
    pub(crate) size: usize,
    /// Lowest interval start.
    pub(crate) min_start: u64,
    /// Highest interval end.
    pub(crate) max_end: u64,
    /// Largest gap between two consecutive intervals of the subtree (0 if fewer than two).
    pub(crate) max_gap: u64,
}

impl Summary {
    /// The summary of a node with interval `[start, end)` and children summarised by `l`, `r`
    /// (`None` for an empty child). At rest intervals are disjoint and ordered; between the
    /// steps of a multi-step `map` a new interval may overlap one not yet trimmed, and the
    /// gaps of the subtrees holding both read as 0 (saturating) until the step that resolves
    /// the overlap, which lies on their path, recomputes them.
    #[inline]
    pub(crate) fn join(start: u64, end: u64, l: Option<Summary>, r: Option<Summary>) -> Summary {
        let mut s = Summary {
            size: 1,
            min_start: start,
            max_end: end,
            max_gap: 0,
        };
        if let Some(l) = l {
            s.size += l.size;
            s.min_start = l.min_start;
            s.max_gap = s
                .max_gap
                .max(l.max_gap)
                .max(start.saturating_sub(l.max_end));
        }
        if let Some(r) = r {
            s.size += r.size;
            s.max_end = r.max_end;
            s.max_gap = s
                .max_gap
                .max(r.max_gap)
                .max(r.min_start.saturating_sub(end));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(start: u64, end: u64) -> Option<Summary> {
        Some(Summary::join(start, end, None, None))
    }

    #[test]
    fn join_takes_the_largest_of_child_and_boundary_gaps() {
        let l = Summary::join(10, 12, leaf(0, 2), leaf(13, 14));
        assert_eq!(
            l,
            Summary {
                size: 3,
                min_start: 0,
                max_end: 14,
                max_gap: 8
            }
        );
        let root = Summary::join(20, 21, Some(l), leaf(40, 41));
        assert_eq!(root.size, 5);
        assert_eq!((root.min_start, root.max_end), (0, 41));
        assert_eq!(Summary::join(5, 6, leaf(0, 1), None).max_gap, 4);
        assert_eq!(
            root.max_gap, 19,
            "gap 21..40 between the root and its right child"
        );
    }
}
