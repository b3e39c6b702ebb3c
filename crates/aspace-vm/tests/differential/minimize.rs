//! Delta debugging (Zeller's ddmin, complement variant) of a failing op sequence.
//!
//! Splits the sequence into `n` chunks and tries the sequence without each chunk; when one still
//! fails it is kept and `n` shrinks by one, otherwise `n` doubles; it stops when `n` reaches the
//! length with no single op removable, so the result is 1-minimal: removing any one op makes the
//! failure go away. The predicate is re-run from a fresh state every time (the caller's job), so
//! the cost is O(len^2) runs at worst, a few hundred for a 30-op sequence.
//!
//! Not for: shrinking op arguments (the ops are printed as they are).

/// The smallest sub-sequence of `items` (order kept) for which `fails` still holds, 1-minimal.
/// `fails(items)` must hold on entry.
pub fn minimize<T: Clone>(items: &[T], mut fails: impl FnMut(&[T]) -> bool) -> Vec<T> {
    let mut cur = items.to_vec();
    let mut n = 2usize;
    while cur.len() >= 2 {
        let chunk = cur.len().div_ceil(n);
        let mut reduced = false;
        let mut i = 0;
        while i * chunk < cur.len() {
            let start = i * chunk;
            let end = (start + chunk).min(cur.len());
            let candidate: Vec<T> = cur[..start].iter().chain(&cur[end..]).cloned().collect();
            if fails(&candidate) {
                cur = candidate;
                reduced = true;
                break;
            }
            i += 1;
        }
        if reduced {
            n = (n - 1).max(2);
            continue;
        }
        if n >= cur.len() {
            break;
        }
        n = (n * 2).min(cur.len());
    }
    cur
}
