//! Tests of held ranges that keep their read section (issue 21, "One traversal per edit" in
//! the module doc): more holders than reader slots, holders that run other operations while
//! they hold, and what a leaked [`SkipLocked`](super::SkipLocked) does to reclamation.

use super::readers::SLOTS;
use super::SkipListMap;
use crate::contract::{Interval, IntervalLocking, IntervalMap, KEY_SPACE_END, PAGE_SIZE as P};
use aspace_rcu::Domain;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn iv(s: u64, e: u64) -> Interval {
    Interval::new(s * P, e * P).unwrap()
}

fn all(m: &SkipListMap<u64>, range: std::ops::Range<u64>) -> Vec<(Interval, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(range, &g, &mut |iv, v| {
        out.push((iv, *v));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

/// One thread holds more ranges than the pool has slots (the rest open temporary readers),
/// runs other updates (each in a slot of its own) while holding them, and swaps them in an
/// order unrelated to the one they were taken in, while another thread churns elsewhere and
/// the held sections keep every grace period open.
#[test]
fn more_held_ranges_than_reader_slots_swap_correctly() {
    // Locks of every other interval: adjacent ones would share a node (a lock holds its
    // predecessor), and the holder would wait for itself.
    let n = 2 * (SLOTS as u64 + 44);
    let m = Arc::new(SkipListMap::new(Domain::new()));
    for k in 0..n {
        m.map(2 * k * P..(2 * k + 1) * P, Some(k)).unwrap();
    }
    // Ends the gap held by the last lock (held up to the next node), so that the holder's own
    // maps below do not wait for a node it holds.
    m.map((2 * n + 2) * P..(2 * n + 3) * P, Some(0)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (m, stop) = (Arc::clone(&m), Arc::clone(&stop));
        std::thread::spawn(move || {
            let base = 4 * n;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let s = base + (i % 64) * 3;
                m.map(s * P..(s + 2) * P, Some(i)).unwrap();
                m.map((s + 1) * P..(s + 2) * P, None).unwrap();
                i += 1;
            }
        })
    };
    let mut held: Vec<_> = (0..n)
        .map(|k| (k % 2 == 0).then(|| m.lock(2 * k * P..(2 * k + 1) * P).unwrap()))
        .collect();
    // Updates of other ranges by the holder itself, with every slot it could take busy.
    for j in 0..50u64 {
        let s = 2 * n + 5 + 2 * j;
        m.map(s * P..(s + 1) * P, Some(j)).unwrap();
    }
    let order = (0..n)
        .rev()
        .filter(|k| k % 4 == 2)
        .chain((0..n).filter(|k| k % 4 == 0));
    for k in order {
        let l = held[k as usize].take().unwrap();
        m.swap(l, vec![(iv(2 * k, 2 * k + 1), k + 1000)]).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    m.check_invariants();
    let got = all(&m, 0..2 * n * P);
    let want: Vec<_> = (0..n)
        .map(|k| (iv(2 * k, 2 * k + 1), if k % 2 == 0 { k + 1000 } else { k }))
        .collect();
    assert_eq!(got, want);
    m.barrier();
    assert!(all(&m, 2 * n * P..KEY_SPACE_END).len() >= 51);
}
