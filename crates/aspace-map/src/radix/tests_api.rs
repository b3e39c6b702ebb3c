//! Tests of the API the `radix` VM design uses: the leave mark ([`RadixMap::with_leave_mark`]),
//! padded allocation ([`RadixMap::alloc_padded`], against a model), and the held lock's
//! [`RadixLocked::intervals`] and [`RadixLocked::widen_to_held`].

use super::*;
use crate::contract::KEY_SPACE_END;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

const P: u64 = PAGE_SIZE;

/// A value whose leave marks are counted; a clone is a new value with a count of its own (so a
/// trimmed interval's remainder is not the value that left).
#[derive(Debug)]
struct Tracked(Arc<AtomicUsize>);

impl Tracked {
    fn new() -> (Self, Arc<AtomicUsize>) {
        let c = Arc::new(AtomicUsize::new(0));
        (Self(Arc::clone(&c)), c)
    }
}

impl Clone for Tracked {
    fn clone(&self) -> Self {
        Self(Arc::new(AtomicUsize::new(0)))
    }
}

fn mark(v: &Tracked) {
    v.0.fetch_add(1, Ordering::SeqCst);
}

fn marks(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

/// Every interval of `m` with its value's mark counter.
fn tracked(m: &RadixMap<Tracked>) -> Vec<(u64, u64, Arc<AtomicUsize>)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(0..KEY_SPACE_END, &g, &mut |iv, v| {
        out.push((iv.start / P, iv.end / P, Arc::clone(&v.0)));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

fn bounds<V: Clone + Send + Sync + 'static>(m: &RadixMap<V>) -> Vec<(u64, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(0..KEY_SPACE_END, &g, &mut |iv, _| {
        out.push((iv.start / P, iv.end / P));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

fn marked_map() -> RadixMap<Tracked> {
    RadixMap::new(Domain::new()).with_leave_mark(mark)
}

/// Maps `[s, e)` pages to a fresh tracked value; returns its counter.
fn put(m: &RadixMap<Tracked>, s: u64, e: u64) -> Arc<AtomicUsize> {
    let (v, c) = Tracked::new();
    m.map(s * P..e * P, Some(v)).unwrap();
    c
}

/// Every value still in the map is unmarked.
fn kept_unmarked(m: &RadixMap<Tracked>) {
    for (s, e, c) in tracked(m) {
        assert_eq!(marks(&c), 0, "a kept value [{s}, {e}) was marked");
    }
}

#[test]
fn every_value_that_leaves_is_marked_once_and_kept_ones_never() {
    let m = marked_map();
    let a = put(&m, 0, 10);
    let b = put(&m, 20, 30);
    let c = put(&m, 40, 50);
    // Spread over a folded slot and leaves (a record covering a whole 512-page leaf).
    let d = put(&m, 1024, 1536);
    kept_unmarked(&m);
    // An unmap trimming two intervals: both leave (their remainders are new records).
    m.map(5 * P..25 * P, None).unwrap();
    assert_eq!((marks(&a), marks(&b), marks(&c), marks(&d)), (1, 1, 0, 0));
    kept_unmarked(&m);
    // A map strictly inside one interval (two remainders) and one replacing another whole.
    let e = put(&m, 45, 46);
    assert_eq!(marks(&c), 1);
    let f = put(&m, 1024, 1536);
    assert_eq!((marks(&d), marks(&e), marks(&f)), (1, 0, 0));
    kept_unmarked(&m);
    // An alloc over free space takes nothing out; a padded one neither.
    let (v, g) = Tracked::new();
    m.alloc(100 * P..200 * P, P, v).unwrap();
    let (v, h) = Tracked::new();
    m.alloc_padded(100 * P..200 * P, P, P, v).unwrap();
    assert_eq!((marks(&g), marks(&h)), (0, 0));
    kept_unmarked(&m);
    // A lock dropped without a swap marks nothing.
    drop(m.lock(0..60 * P).unwrap());
    kept_unmarked(&m);
    // Everything out: each value in the map now is marked once, the earlier ones stay at one.
    let before = tracked(&m);
    m.map(0..KEY_SPACE_END, None).unwrap();
    for (s, e, c) in &before {
        assert_eq!(marks(c), 1, "[{s}, {e})");
    }
    for c in [&a, &b, &c, &d, &e, &f, &g, &h] {
        assert_eq!(marks(c), 1);
    }
    m.check_invariants();
}

#[test]
fn a_failed_allocation_marks_nothing() {
    // Every allocation index of operations that make remainders, expand nodes and need a
    // descriptor: a failure marks nothing and changes nothing; the retry marks each leaver once.
    let mut failures = 0;
    for n in 0..16 {
        let m = marked_map();
        let a = put(&m, 3, 700);
        let b = put(&m, 800, 900);
        let shape = bounds(&m);
        m.fail_allocations_after(Some(n));
        let (v, _) = Tracked::new();
        let r = m.map(500 * P..850 * P, Some(v));
        m.fail_allocations_after(None);
        match r {
            Err(MapError::OutOfMemory) => {
                failures += 1;
                assert_eq!((marks(&a), marks(&b)), (0, 0), "failure at allocation {n}");
                assert_eq!(bounds(&m), shape);
                kept_unmarked(&m);
                let (v, _) = Tracked::new();
                m.map(500 * P..850 * P, Some(v)).unwrap();
            }
            r => r.unwrap(),
        }
        assert_eq!((marks(&a), marks(&b)), (1, 1));
        kept_unmarked(&m);
        m.check_invariants();
    }
    // Three records and the descriptor (the leaves exist already).
    assert!(failures >= 4, "{failures}");
    // A swap's failure too.
    for n in 0..8 {
        let m = marked_map();
        let a = put(&m, 3, 700);
        let mut l = m.lock(10 * P..20 * P).unwrap();
        l.widen_to_held();
        let (v1, _) = Tracked::new();
        let (v2, _) = Tracked::new();
        m.fail_allocations_after(Some(n));
        let r = m.swap(
            l,
            vec![
                (Interval::new(3 * P, 100 * P).unwrap(), v1),
                (Interval::new(200 * P, 700 * P).unwrap(), v2),
            ],
        );
        m.fail_allocations_after(None);
        match r {
            Err(MapError::OutOfMemory) => {
                assert_eq!(marks(&a), 0);
                assert_eq!(bounds(&m), vec![(3, 700)]);
            }
            r => {
                r.unwrap();
                assert_eq!(marks(&a), 1);
                assert_eq!(bounds(&m), vec![(3, 100), (200, 700)]);
            }
        }
        m.check_invariants();
    }
}

#[test]
fn intervals_lists_the_held_records_in_order_once() {
    let m = RadixMap::new(Domain::new());
    m.map(3 * P..700 * P, Some(1u64)).unwrap();
    m.map(700 * P..701 * P, Some(2)).unwrap();
    m.map(710 * P..2000 * P, Some(3)).unwrap();
    m.map(5000 * P..5001 * P, Some(4)).unwrap();
    let l = m.lock(600 * P..720 * P).unwrap();
    assert_eq!(l.held(), Interval::new(3 * P, 2000 * P).unwrap());
    let got: Vec<_> = l
        .intervals()
        .map(|(iv, v)| (iv.start / P, iv.end / P, *v))
        .collect();
    assert_eq!(got, vec![(3, 700, 1), (700, 701, 2), (710, 2000, 3)]);
    drop(l);
    // A range over free space only: nothing held but free slots.
    let l = m.lock(3000 * P..3100 * P).unwrap();
    assert_eq!(l.intervals().count(), 0);
    drop(l);
    m.check_invariants();
}

#[test]
fn swap_after_widen_to_held_replaces_the_whole_held_span() {
    let m = marked_map();
    let a = put(&m, 3, 700);
    let b = put(&m, 700, 701);
    let c = put(&m, 710, 2000);
    // Unchanged intervals passed back (same bounds, cloned values): the map looks the same,
    // and no remainder is cloned (the values in the map are exactly the clones passed).
    let mut l = m.lock(650 * P..720 * P).unwrap();
    l.widen_to_held();
    assert_eq!(l.range(), l.held());
    let back: Vec<_> = l.intervals().map(|(iv, v)| (iv, v.clone())).collect();
    let passed: Vec<_> = back.iter().map(|(_, v)| Arc::clone(&v.0)).collect();
    m.swap(l, back).unwrap();
    assert_eq!(bounds(&m), vec![(3, 700), (700, 701), (710, 2000)]);
    let now = tracked(&m);
    for ((_, _, c), p) in now.iter().zip(&passed) {
        assert!(Arc::ptr_eq(c, p), "the values passed are the ones stored");
    }
    assert_eq!((marks(&a), marks(&b), marks(&c)), (1, 1, 1));
    kept_unmarked(&m);
    // Fewer: one interval in place of three, anywhere inside the held span.
    let mut l = m.lock(700 * P..701 * P).unwrap();
    assert_eq!(l.held(), Interval::new(700 * P, 701 * P).unwrap());
    let mut l2 = {
        drop(l);
        m.lock(650 * P..720 * P).unwrap()
    };
    l2.widen_to_held();
    let (v, d) = Tracked::new();
    m.swap(l2, vec![(Interval::new(100 * P, 1500 * P).unwrap(), v)])
        .unwrap();
    assert_eq!(bounds(&m), vec![(100, 1500)]);
    for p in &passed {
        assert_eq!(marks(p), 1);
    }
    kept_unmarked(&m);
    // More: four intervals where one was, reaching the held span's bounds.
    l = m.lock(200 * P..300 * P).unwrap();
    l.widen_to_held();
    assert_eq!(l.held(), Interval::new(100 * P, 1500 * P).unwrap());
    let new: Vec<_> = [(100, 101), (102, 600), (600, 601), (1000, 1500)]
        .into_iter()
        .map(|(s, e)| (Interval::new(s * P, e * P).unwrap(), Tracked::new().0))
        .collect();
    m.swap(l, new).unwrap();
    assert_eq!(
        bounds(&m),
        vec![(100, 101), (102, 600), (600, 601), (1000, 1500)]
    );
    assert_eq!(marks(&d), 1);
    kept_unmarked(&m);
    // An interval outside the held span is refused (nothing changes).
    let mut l = m.lock(102 * P..103 * P).unwrap();
    l.widen_to_held();
    let r = m.swap(
        l,
        vec![(Interval::new(101 * P, 600 * P).unwrap(), Tracked::new().0)],
    );
    assert!(matches!(r, Err(MapError::OutOfRange { .. })), "{r:?}");
    assert_eq!(
        bounds(&m),
        vec![(100, 101), (102, 600), (600, 601), (1000, 1500)]
    );
    kept_unmarked(&m);
    m.check_invariants();
}

#[test]
fn a_swap_without_widening_still_keeps_remainders() {
    let m = RadixMap::new(Domain::new());
    m.map(3 * P..700 * P, Some(1u64)).unwrap();
    let l = m.lock(10 * P..20 * P).unwrap();
    m.swap(l, vec![(Interval::new(12 * P, 13 * P).unwrap(), 2)])
        .unwrap();
    assert_eq!(bounds(&m), vec![(3, 10), (12, 13), (20, 700)]);
    m.check_invariants();
}

#[test]
fn alloc_padded_input_errors() {
    let m = RadixMap::new(Domain::new());
    let w = 16 * P..32 * P;
    let within = Interval::new(16 * P, 32 * P).unwrap();
    assert_eq!(
        m.alloc_padded(w.clone(), P, 100, 0u64),
        Err(MapError::Unaligned(100))
    );
    assert_eq!(
        m.alloc_padded(w.clone(), 0, P, 0),
        Err(MapError::EmptyRange {
            start: 16 * P,
            end: 16 * P
        })
    );
    assert_eq!(
        m.alloc_padded(w.clone(), P + 1, P, 0),
        Err(MapError::Unaligned(P + 1))
    );
    let huge = u64::MAX / 2 + 1 - (u64::MAX / 2 + 1) % P;
    assert_eq!(
        m.alloc_padded(w.clone(), P, huge, 0),
        Err(MapError::NoSpace { len: P, within })
    );
    // 16 pages: 14 + 2 * 1 fit, 15 + 2 * 1 do not.
    assert_eq!(
        m.alloc_padded(w.clone(), 15 * P, P, 0),
        Err(MapError::NoSpace {
            len: 15 * P,
            within
        })
    );
    assert!(matches!(
        m.alloc_padded(
            Range {
                start: 32 * P,
                end: 16 * P
            },
            P,
            P,
            0
        ),
        Err(MapError::EmptyRange { .. })
    ));
    m.fail_allocations_after(Some(0));
    assert_eq!(
        m.alloc_padded(w.clone(), P, P, 0),
        Err(MapError::OutOfMemory)
    );
    m.fail_allocations_after(None);
    assert!(bounds(&m).is_empty());
    assert_eq!(
        m.alloc_padded(w, 14 * P, P, 0),
        Ok(Interval::new(17 * P, 31 * P).unwrap())
    );
    m.check_invariants();
}

#[test]
fn padded_allocs_in_a_row_are_exact_and_never_adjacent() {
    let m = RadixMap::new(Domain::new());
    let arena = 1 << 30..2 << 30;
    let base = (1u64 << 30) / P;
    for k in 0..600u64 {
        let iv = m.alloc_padded(arena.clone(), 2 * P, P, k).unwrap();
        assert_eq!(iv.start / P, base + 1 + 3 * k);
    }
    // An unpadded alloc of this core in the same range still finds the first free page (the
    // padded hint moved past the pads; the unpadded one did not).
    assert_eq!(m.alloc(arena.clone(), P, 9).unwrap().start / P, base);
    // A free below moves the padded hint back: the freed claim's place is found again.
    m.map((base + 1 + 3 * 5) * P..(base + 3 + 3 * 5) * P, None)
        .unwrap();
    assert_eq!(
        m.alloc_padded(arena, 2 * P, P, 99).unwrap().start / P,
        base + 1 + 3 * 5
    );
    m.check_invariants();
}

#[test]
fn concurrent_padded_allocs_are_never_adjacent() {
    let m = RadixMap::new(Domain::new());
    let arena = 1 << 30..(1 << 30) + 4096 * P;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (m, arena) = (&m, arena.clone());
            s.spawn(move || {
                for i in 0..100u64 {
                    m.alloc_padded(arena.clone(), (1 + (i + t) % 3) * P, P, t)
                        .unwrap();
                }
            });
        }
    });
    let b = bounds(&m);
    assert_eq!(b.len(), 400);
    for w in b.windows(2) {
        assert!(w[1].0 > w[0].1, "adjacent or overlapping: {w:?}");
    }
    m.check_invariants();
}

/// Model operations (pages inside the model's range `[LO, HI)`).
#[derive(Clone, Debug)]
enum ModelOp {
    Padded { len: u64, pad: u64 },
    Alloc { len: u64 },
    Map { start: u64, len: u64 },
    Unmap { start: u64, len: u64 },
}

const LO: u64 = 64;
const HI: u64 = 160;

fn model_op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        4 => (1..6u64, 0..4u64).prop_map(|(len, pad)| ModelOp::Padded { len, pad }),
        1 => (1..6u64).prop_map(|len| ModelOp::Alloc { len }),
        1 => (LO - 8..HI + 8, 1..8u64).prop_map(|(start, len)| ModelOp::Map { start, len }),
        2 => (LO - 8..HI + 8, 1..24u64).prop_map(|(start, len)| ModelOp::Unmap { start, len }),
    ]
}

/// First fit of `len` pages padded by `pad` inside `[LO, HI)` of `model` (start -> end pages).
fn model_fit(model: &BTreeMap<u64, u64>, len: u64, pad: u64) -> Option<u64> {
    let mut a = LO;
    let mut gaps = Vec::new();
    for (&s, &e) in model.range(..HI) {
        if e <= a {
            continue;
        }
        if s > a {
            gaps.push((a, s.min(HI)));
        }
        a = a.max(e);
    }
    if a < HI {
        gaps.push((a, HI));
    }
    gaps.into_iter()
        .find(|&(a, b)| b - a >= len + 2 * pad)
        .map(|(a, _)| a + pad)
}

fn model_set(model: &mut BTreeMap<u64, u64>, s: u64, e: u64, mapped: bool) {
    let over: Vec<(u64, u64)> = model
        .range(..e)
        .filter(|&(_, &ie)| ie > s)
        .map(|(&a, &b)| (a, b))
        .collect();
    for (a, b) in over {
        model.remove(&a);
        if a < s {
            model.insert(a, s);
        }
        if b > e {
            model.insert(e, b);
        }
    }
    if mapped {
        model.insert(s, e);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// `alloc_padded` against a model: exact first fit (frees reopen space, unpadded allocs
    /// and maps in between), never adjacent to another interval when allocated, `NoSpace`
    /// exactly when the model has no fit.
    #[test]
    fn alloc_padded_is_first_fit_and_never_adjacent(ops in prop::collection::vec(model_op(), 1..60)) {
        let m = RadixMap::new(Domain::new());
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        for op in ops {
            match op {
                ModelOp::Padded { len, pad } => {
                    let want = model_fit(&model, len, pad);
                    let got = m.alloc_padded(LO * P..HI * P, len * P, pad * P, 0u64);
                    match want {
                        Some(g) => {
                            prop_assert_eq!(got, Ok(Interval::new(g * P, (g + len) * P).unwrap()));
                            if pad > 0 {
                                // No interval ends at g or starts at g + len.
                                prop_assert!(!model.values().any(|&e| e == g));
                                prop_assert!(!model.contains_key(&(g + len)));
                            }
                            model.insert(g, g + len);
                        }
                        None => prop_assert!(matches!(got, Err(MapError::NoSpace { .. })), "{:?}", got),
                    }
                }
                ModelOp::Alloc { len } => {
                    let want = model_fit(&model, len, 0);
                    let got = m.alloc(LO * P..HI * P, len * P, 1);
                    match want {
                        Some(g) => {
                            prop_assert_eq!(got, Ok(Interval::new(g * P, (g + len) * P).unwrap()));
                            model.insert(g, g + len);
                        }
                        None => prop_assert!(got.is_err()),
                    }
                }
                ModelOp::Map { start, len } => {
                    m.map(start * P..(start + len) * P, Some(2)).unwrap();
                    model_set(&mut model, start, start + len, true);
                }
                ModelOp::Unmap { start, len } => {
                    m.map(start * P..(start + len) * P, None).unwrap();
                    model_set(&mut model, start, start + len, false);
                }
            }
            let want: Vec<(u64, u64)> = model.iter().map(|(&s, &e)| (s, e)).collect();
            prop_assert_eq!(bounds(&m), want);
        }
        m.check_invariants();
    }
}
