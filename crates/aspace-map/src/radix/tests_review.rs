//! Review (review-radixvm): `alloc_padded` at the top of the key space, and a failed padded
//! claim under `fail_allocations_after` (nothing published, nothing marked).

use super::*;
use crate::contract::IntervalMap;
use crate::contract::KEY_SPACE_END;
use std::sync::atomic::{AtomicUsize, Ordering as O};

const P: u64 = PAGE_SIZE;

#[test]
fn review_alloc_padded_at_the_top_of_the_key_space() {
    let m = RadixMap::new(Domain::new());
    let top = KEY_SPACE_END;
    let w = top - 16 * P..top;
    // 14 + 2 pads fit exactly; the interval ends one pad below the end of the key space.
    let iv = m.alloc_padded(w.clone(), 14 * P, P, 1u64).unwrap();
    assert_eq!((iv.start, iv.end), (top - 15 * P, top - P));
    assert!(
        m.alloc_padded(w.clone(), P, P, 2).is_err(),
        "no padded gap left"
    );
    let w2 = top - 4 * P..top;
    let m2 = RadixMap::new(Domain::new());
    assert!(matches!(
        m2.alloc_padded(w2.clone(), 3 * P, P, 0u64),
        Err(MapError::NoSpace { .. })
    ));
    let iv = m2.alloc_padded(w2, 2 * P, P, 0).unwrap();
    assert_eq!((iv.start, iv.end), (top - 3 * P, top - P));
    // Huge pad/len and ranges past the key space: errors, no panic.
    let _ = m2.alloc_padded(0..top, top - P, (top / 2) & !(P - 1), 0);
    let _ = m2.alloc_padded(top - P..!(P - 1), P, 0, 0);
    let _ = m2.alloc_padded(0..top, P, !(P - 1), 0);
    m.check_invariants();
    m2.check_invariants();
}

static MARKS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn review_failed_padded_claim_marks_and_publishes_nothing() {
    let m = RadixMap::new(Domain::new()).with_leave_mark(|_: &u64| {
        MARKS.fetch_add(1, O::SeqCst);
    });
    m.map(100 * P..101 * P, Some(7u64)).unwrap();
    for n in 0..8 {
        let before = MARKS.load(O::SeqCst);
        m.fail_allocations_after(Some(n));
        let r = m.alloc_padded(0..4096 * P, 600 * P, P, 9);
        m.fail_allocations_after(None);
        let marks = MARKS.load(O::SeqCst) - before;
        if let Ok(iv) = r {
            m.check_invariants();
            let g = m.len();
            assert_eq!(g, 2);
            m.map(iv.start..iv.end, None).unwrap();
            assert!(
                MARKS.load(O::SeqCst) > before,
                "n={n}: the removal marked nothing"
            );
        } else {
            assert_eq!(marks, 0, "n={n}: a failed claim marked a record");
            assert_eq!(m.len(), 1, "n={n}");
        }
        m.check_invariants();
    }
}
