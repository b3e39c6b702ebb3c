//! The `IntervalMap` conformance suite, generic over implementations.
//!
//! Every implementation gets the same tests by one line in its own test file:
//! `interval_map_conformance!(MapType);` where `MapType<V>: IntervalMap<V> + Checked` and has
//! `MapType::new(Domain)`. The suite holds:
//! - a proptest of random operation sequences (map Some/None, alloc, query, visit, len, invalid
//!   input), compared after EVERY step with a trivially correct sequential model (a sorted list
//!   of intervals rebuilt naively), over the whole key space, and the implementation's own
//!   structural check (`Checked::check`, e.g. Bonsai's balance invariant);
//! - edge cases as explicit tests (adjacency without merging, exact-fit gaps, overwrites spanning
//!   many intervals, splits, both ends of the key space, invalid input, `NoSpace`);
//! - alloc tests that stress gap indexes and augmentations (many too-small gaps before the fit,
//!   gaps at both ends of the key space, exact fits at every tree level, random allocs and
//!   unmaps in a map of hundreds of intervals checked after every step);
//! - a bounded multi-threaded stress test (per-thread arenas plus a contended shared range) and
//!   a test of lookups racing updates (intervals the writer never touches are always found).
//!
//! Semantics decided here: adjacent intervals are never merged, even with equal values (they are
//! distinct regions, like VMAs with different ids).

#![allow(dead_code)]

pub mod model;
pub mod stress;

use aspace_map::{Interval, IntervalMap, MapError, KEY_SPACE_END, PAGE_SIZE as P};
use aspace_rcu::Guard;
use model::Model;
use proptest::prelude::*;
use std::ops::{ControlFlow, Range};

/// An implementation's own structural check, run after every step (no-op where none exists).
pub trait Checked {
    /// Panics if an internal invariant is violated.
    fn check(&self);
}

/// Address of "page index" `p` in `0..=64`: low pages at the bottom of the key space, high ones
/// at its top (64 maps to `KEY_SPACE_END`), so random ranges exercise both ends.
pub fn page_addr(p: u64) -> u64 {
    if p <= 40 {
        p * P
    } else {
        KEY_SPACE_END - (64 - p) * P
    }
}

/// One operation of a random sequence.
#[derive(Clone, Debug)]
pub enum Op {
    /// `map(page_addr(a) + skew .. page_addr(b), v)`.
    Map {
        a: u64,
        b: u64,
        skew: u64,
        v: Option<u64>,
    },
    /// `alloc(page_addr(a)..page_addr(b), len_pages * P + skew, v)`.
    Alloc {
        a: u64,
        b: u64,
        len_pages: u64,
        skew: u64,
        v: u64,
    },
}

/// Random operations: mostly valid, some empty/inverted/unaligned.
pub fn op_strategy() -> impl Strategy<Value = Op> {
    let skew = prop_oneof![9 => Just(0u64), 1 => Just(1u64)];
    prop_oneof![
        6 => (0..=64u64, 0..=64u64, skew.clone(), proptest::option::weighted(0.7, 0..1000u64))
            .prop_map(|(a, b, skew, v)| Op::Map { a, b, skew, v }),
        2 => (0..=64u64, 0..=64u64, 0..6u64, skew, 0..1000u64)
            .prop_map(|(a, b, len_pages, skew, v)| Op::Alloc { a, b, len_pages, skew, v }),
    ]
}

/// Every interval overlapping `range`, in order, as seen by `visit`.
pub fn snapshot<V: Clone + Send + Sync + 'static, M: IntervalMap<V>>(
    m: &M,
    range: Range<u64>,
    g: &Guard<'_>,
) -> Vec<(Interval, V)> {
    let mut out = Vec::new();
    m.visit(range, g, &mut |iv, v| {
        out.push((iv, v.clone()));
        ControlFlow::Continue(())
    })
    .expect("valid visit range");
    out
}

/// `query(addr)` as an owned answer.
pub fn query<V: Clone + Send + Sync + 'static, M: IntervalMap<V>>(
    m: &M,
    addr: u64,
    g: &Guard<'_>,
) -> Option<(Interval, V)> {
    m.query(addr, g).map(|(iv, r)| (iv, (*r).clone()))
}

/// Compares the whole map with the model: `visit` over the key space, `len`, sortedness and
/// disjointness, and `query` at every boundary of the page grid (first and last byte).
pub fn assert_matches<M: IntervalMap<u64> + Checked>(m: &M, model: &Model, g: &Guard<'_>) {
    m.check();
    let all = snapshot(m, 0..KEY_SPACE_END, g);
    assert_eq!(all, model.intervals(), "visit over the key space");
    assert_eq!(m.len(), model.intervals().len(), "len");
    assert_eq!(m.is_empty(), model.intervals().is_empty());
    for w in all.windows(2) {
        assert!(w[0].0.end <= w[1].0.start, "sorted and disjoint: {w:?}");
    }
    for p in 0..=64 {
        let a = page_addr(p);
        for addr in [a, a.wrapping_sub(1), a + 1] {
            assert_eq!(query(m, addr, g), model.query(addr), "query({addr:#x})");
        }
    }
}

/// Applies `op` to the map and the model and checks both agree on the outcome.
pub fn apply<M: IntervalMap<u64>>(m: &M, model: &mut Model, op: &Op) {
    match *op {
        Op::Map { a, b, skew, v } => {
            let range = page_addr(a) + skew..page_addr(b);
            let expected = model.map(range.clone(), v);
            assert_eq!(m.map(range.clone(), v), expected, "map({range:x?}, {v:?})");
        }
        Op::Alloc {
            a,
            b,
            len_pages,
            skew,
            v,
        } => {
            let within = page_addr(a)..page_addr(b);
            let len = len_pages * P + skew;
            let expected = model.alloc(within.clone(), len, v);
            assert_eq!(
                m.alloc(within.clone(), len, v),
                expected,
                "alloc({within:x?}, {len:#x})"
            );
        }
    }
}

/// Runs a sequence on a fresh map, checking the whole map after every step.
pub fn run_ops<M: IntervalMap<u64> + Checked>(m: &M, ops: &[Op]) {
    let reader = m.domain().register();
    let mut model = Model::default();
    for op in ops {
        apply(m, &mut model, op);
        let g = reader.read();
        assert_matches(m, &model, &g);
    }
}

/// Runs explicit `(range, value)` maps through `run`-style checking and returns the model.
pub fn map_all<M: IntervalMap<u64> + Checked>(
    m: &M,
    model: &mut Model,
    maps: &[(Range<u64>, Option<u64>)],
) {
    for (r, v) in maps {
        assert_eq!(m.map(r.clone(), *v), model.map(r.clone(), *v));
    }
    let reader = m.domain().register();
    let g = reader.read();
    assert_matches(m, model, &g);
}

pub fn adjacent_intervals_stay_separate<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    map_all(
        &m,
        &mut model,
        &[
            (0..P, Some(1)),
            (P..2 * P, Some(1)),
            (2 * P..3 * P, Some(2)),
        ],
    );
    assert_eq!(m.len(), 3);
}

/// `alloc` on both the map and the model; asserts both agree and returns the answer.
pub fn alloc_both<M: IntervalMap<u64>>(
    m: &M,
    model: &mut Model,
    within: Range<u64>,
    len: u64,
    v: u64,
) -> Result<Interval, MapError> {
    let expected = model.alloc(within.clone(), len, v);
    assert_eq!(m.alloc(within, len, v), expected);
    expected
}

pub fn alloc_takes_exact_fit_gap<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    map_all(
        &m,
        &mut model,
        &[(0..2 * P, Some(1)), (3 * P..5 * P, Some(2))],
    );
    assert_eq!(
        alloc_both(&m, &mut model, 0..5 * P, P, 3),
        Ok(Interval::new(2 * P, 3 * P).unwrap())
    );
    let within = Interval::new(0, 5 * P).unwrap();
    assert_eq!(
        alloc_both(&m, &mut model, 0..5 * P, P, 4),
        Err(MapError::NoSpace { len: P, within })
    );
    assert_eq!(m.len(), 3);
    // Gaps smaller than the request are skipped; the first one big enough is taken.
    map_all(
        &m,
        &mut model,
        &[(6 * P..7 * P, Some(5)), (9 * P..10 * P, Some(6))],
    );
    assert_eq!(
        alloc_both(&m, &mut model, 0..20 * P, 2 * P, 7),
        Ok(Interval::new(7 * P, 9 * P).unwrap())
    );
    map_all(&m, &mut model, &[]);
}

pub fn overwrite_spanning_many_intervals_leaves_trimmed_ends<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    let many: Vec<_> = (0..20u64)
        .map(|i| (i * 3 * P..(i * 3 + 2) * P, Some(i)))
        .collect();
    map_all(&m, &mut model, &many);
    map_all(&m, &mut model, &[(P..55 * P, Some(100))]);
    let reader = m.domain().register();
    let g = reader.read();
    let all = snapshot(&m, 0..KEY_SPACE_END, &g);
    assert_eq!(
        all.iter()
            .map(|(iv, v)| (iv.start / P, iv.end / P, *v))
            .collect::<Vec<_>>(),
        vec![(0, 1, 0), (1, 55, 100), (55, 56, 18), (57, 59, 19)]
    );
}

pub fn unmap_in_the_middle_splits_an_interval<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    map_all(
        &m,
        &mut model,
        &[(0..10 * P, Some(7)), (3 * P..5 * P, None)],
    );
    {
        let reader = m.domain().register();
        let g = reader.read();
        assert_eq!(
            snapshot(&m, 0..KEY_SPACE_END, &g),
            vec![
                (Interval::new(0, 3 * P).unwrap(), 7),
                (Interval::new(5 * P, 10 * P).unwrap(), 7)
            ]
        );
        assert!(m.query(4 * P, &g).is_none());
    }
    // Overwriting the middle of one interval splits it into three.
    map_all(&m, &mut model, &[(6 * P..7 * P, Some(8))]);
    assert_eq!(m.len(), 4);
}

/// The three shapes of `map(s..e, Some(v))` that cover exactly one whole interval `X` and free
/// pages beside it, as `(X, range)` in pages around `base`: a free head (`s < X.start`,
/// `X.end == e`), a free tail (`X.start == s`, `X.end < e`), and both (`s < X.start`,
/// `X.end < e`). Issue 17: Bonsai published the first and the last as two commits ("insert
/// `[s, e)`", then "delete `X`").
pub fn free_ends_around_one_interval(base: u64) -> [(Range<u64>, Range<u64>); 3] {
    [
        ((base + 1) * P..(base + 3) * P, base * P..(base + 3) * P),
        (base * P..(base + 1) * P, base * P..(base + 2) * P),
        ((base + 1) * P..(base + 2) * P, base * P..(base + 3) * P),
    ]
}

/// Each shape of [`free_ends_around_one_interval`], with `X` at every position of a tree of a
/// few dozen intervals (leaves and inner nodes, so the removal of `X` rotates or moves a
/// successor): the new interval replaces `X`, everything else is unchanged.
pub fn a_map_over_free_pages_and_one_whole_interval_replaces_it<M, F>(fresh: F)
where
    M: IntervalMap<u64> + Checked,
    F: Fn() -> M,
{
    for shape in 0..3 {
        for k in 0..40u64 {
            let m = fresh();
            let mut model = Model::default();
            let cells: Vec<_> = (0..40u64)
                .map(|j| {
                    (
                        free_ends_around_one_interval(j * 4)[shape].0.clone(),
                        Some(j),
                    )
                })
                .collect();
            map_all(&m, &mut model, &cells);
            let (x, range) = free_ends_around_one_interval(k * 4)[shape].clone();
            map_all(&m, &mut model, &[(range.clone(), Some(100 + k))]);
            let reader = m.domain().register();
            let g = reader.read();
            assert_eq!(
                query(&m, x.start, &g),
                Some((Interval::new(range.start, range.end).unwrap(), 100 + k)),
                "map({range:x?}) over {x:x?}"
            );
            assert_eq!(m.len(), 40);
        }
    }
}

pub fn both_ends_of_the_key_space_are_usable<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    let top = KEY_SPACE_END - P;
    map_all(
        &m,
        &mut model,
        &[(0..P, Some(1)), (top..KEY_SPACE_END, Some(2))],
    );
    {
        let reader = m.domain().register();
        let g = reader.read();
        assert_eq!(query(&m, 0, &g), Some((Interval::new(0, P).unwrap(), 1)));
        assert_eq!(
            query(&m, KEY_SPACE_END - 1, &g),
            Some((Interval::new(top, KEY_SPACE_END).unwrap(), 2))
        );
        assert_eq!(query(&m, KEY_SPACE_END, &g), None);
        assert_eq!(query(&m, u64::MAX, &g), None);
    }
    assert_eq!(
        m.alloc(top - 2 * P..KEY_SPACE_END, 2 * P, 3),
        Ok(Interval::new(top - 2 * P, top).unwrap())
    );
    let within = Interval::new(0, KEY_SPACE_END).unwrap();
    assert_eq!(
        m.alloc(0..KEY_SPACE_END, KEY_SPACE_END, 4),
        Err(MapError::NoSpace {
            len: KEY_SPACE_END,
            within
        })
    );
    map_all(&m, &mut model, &[(0..KEY_SPACE_END, None)]);
    assert!(m.is_empty());
    assert_eq!(
        m.alloc(0..KEY_SPACE_END, KEY_SPACE_END, 5),
        Ok(within),
        "the whole key space is one gap"
    );
}

pub fn invalid_input_is_rejected_and_changes_nothing<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    map_all(
        &m,
        &mut model,
        &[(0..4 * P, Some(1)), (8 * P..9 * P, Some(2))],
    );
    #[allow(clippy::reversed_empty_ranges)] // inverted on purpose
    let cases: Vec<(Range<u64>, MapError)> = vec![
        (P..P, MapError::EmptyRange { start: P, end: P }),
        (
            2 * P..P,
            MapError::EmptyRange {
                start: 2 * P,
                end: P,
            },
        ),
        (1..P, MapError::Unaligned(1)),
        (0..P + 7, MapError::Unaligned(P + 7)),
        (0..u64::MAX, MapError::Unaligned(u64::MAX)),
    ];
    for (r, err) in &cases {
        assert_eq!(m.map(r.clone(), Some(9)), Err(*err), "map({r:x?})");
        assert_eq!(m.map(r.clone(), None), Err(*err), "unmap({r:x?})");
        assert_eq!(m.alloc(r.clone(), P, 9), Err(*err), "alloc({r:x?})");
        let reader = m.domain().register();
        let g = reader.read();
        assert_eq!(
            m.visit(r.clone(), &g, &mut |_, _| ControlFlow::Continue(())),
            Err(*err)
        );
    }
    assert_eq!(
        m.alloc(0..16 * P, 0, 9),
        Err(MapError::EmptyRange { start: 0, end: 0 })
    );
    assert_eq!(
        m.alloc(0..16 * P, P / 2, 9),
        Err(MapError::Unaligned(P / 2))
    );
    assert_eq!(MapError::Unaligned(1).errno(), libc_einval());
    assert_eq!(
        MapError::NoSpace {
            len: P,
            within: Interval::new(0, P).unwrap()
        }
        .errno(),
        libc_enomem()
    );
    let reader = m.domain().register();
    let g = reader.read();
    assert_matches(&m, &model, &g);
}

pub fn alloc_reports_no_space<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    map_all(&m, &mut model, &[(4 * P..8 * P, Some(1))]);
    let within = Interval::new(4 * P, 8 * P).unwrap();
    assert_eq!(
        m.alloc(4 * P..8 * P, P, 2),
        Err(MapError::NoSpace { len: P, within })
    );
    let within = Interval::new(0, 2 * P).unwrap();
    assert_eq!(
        m.alloc(0..2 * P, 3 * P, 2),
        Err(MapError::NoSpace { len: 3 * P, within })
    );
    assert_eq!(m.len(), 1);
    // An interval reaching into `within` from below is not a gap.
    assert_eq!(
        m.alloc(6 * P..10 * P, 2 * P, 3),
        Ok(Interval::new(8 * P, 10 * P).unwrap())
    );
}

/// `n` one-page intervals with one-page gaps from `base` (page numbers), as `map_all` input.
fn comb(base: u64, n: u64) -> Vec<(Range<u64>, Option<u64>)> {
    (0..n)
        .map(|i| ((base + 2 * i) * P..(base + 2 * i + 1) * P, Some(i)))
        .collect()
}

pub fn alloc_skips_many_small_gaps_before_a_fitting_one<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    // Pages 0..200: 100 intervals with a one-page gap after each (the last gap closed by an
    // interval at 200); then a 3-page gap at 201..204 closed at 204, then a 5-page gap at
    // 205..210 closed at 210.
    let mut maps = comb(0, 101);
    maps.extend([(204 * P..205 * P, Some(500)), (210 * P..211 * P, Some(501))]);
    map_all(&m, &mut model, &maps);
    let fits = |m: &M, model: &mut Model, within: Range<u64>, len: u64, at: u64| {
        assert_eq!(
            alloc_both(m, model, within, len * P, 7),
            Ok(Interval::new(at * P, (at + len) * P).unwrap())
        );
        m.check();
    };
    // Every one-page gap is too small for two pages: the fit is the first large gap, deep in
    // the tree's right part.
    fits(&m, &mut model, 0..1000 * P, 2, 201);
    // The rest of that gap is one page; now the 5-page gap is the first that fits 4 pages.
    fits(&m, &mut model, 0..1000 * P, 4, 205);
    // A one-page request takes the lowest one-page gap, also when `within` starts mid-comb.
    fits(&m, &mut model, 0..1000 * P, 1, 1);
    fits(&m, &mut model, 50 * P..1000 * P, 1, 51);
    fits(&m, &mut model, 51 * P..1000 * P, 1, 53);
    // `within` ending inside the comb: no gap of 2 pages there.
    let within = Interval::new(0, 150 * P).unwrap();
    assert_eq!(
        alloc_both(&m, &mut model, 0..150 * P, 2 * P, 8),
        Err(MapError::NoSpace { len: 2 * P, within })
    );
    // Fill every remaining one-page gap of the comb, lowest first, then the ones above it.
    for want in (0..100)
        .map(|i| 2 * i + 1)
        .filter(|g| ![1, 51, 53].contains(g))
    {
        fits(&m, &mut model, 0..200 * P, 1, want);
    }
    for want in [203, 209] {
        fits(&m, &mut model, 0..1000 * P, 1, want);
    }
    fits(&m, &mut model, 0..1000 * P, 1, 211);
    map_all(&m, &mut model, &[]);
}

pub fn alloc_uses_gaps_at_both_ends_of_the_key_space<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    let top = KEY_SPACE_END / P;
    map_all(&m, &mut model, &comb(1 << 20, 50));
    // The gap below the lowest interval.
    assert_eq!(
        alloc_both(&m, &mut model, 0..KEY_SPACE_END, 4 * P, 1),
        Ok(Interval::new(0, 4 * P).unwrap())
    );
    // From the comb upwards only the gap at the top of the key space fits 1 GiB.
    let big = 1 << 30;
    assert_eq!(
        alloc_both(&m, &mut model, (1 << 20) * P..KEY_SPACE_END, big, 2),
        Ok(Interval::new(((1 << 20) + 99) * P, ((1 << 20) + 99) * P + big).unwrap())
    );
    // An exact fit of the last page of the key space.
    assert_eq!(
        alloc_both(&m, &mut model, (top - 1) * P..KEY_SPACE_END, P, 3),
        Ok(Interval::new((top - 1) * P, KEY_SPACE_END).unwrap())
    );
    let within = Interval::new((top - 1) * P, KEY_SPACE_END).unwrap();
    assert_eq!(
        alloc_both(&m, &mut model, (top - 1) * P..KEY_SPACE_END, P, 4),
        Err(MapError::NoSpace { len: P, within })
    );
    // The top gap is now closed at both ends; a request spanning it exactly fits.
    let rest = KEY_SPACE_END - P - (((1 << 20) + 99) * P + big);
    assert_eq!(
        alloc_both(&m, &mut model, 0..KEY_SPACE_END, rest, 5),
        Ok(Interval::new(((1 << 20) + 99) * P + big, KEY_SPACE_END - P).unwrap())
    );
    map_all(&m, &mut model, &[]);
}

pub fn alloc_takes_exact_fits_at_every_level<M: IntervalMap<u64> + Checked>(m: M) {
    let mut model = Model::default();
    // Intervals at multiples of 10 pages with gaps of 1, 2, ..., 9 pages (cycling), so gaps of
    // every size sit at leaves and inner nodes alike.
    let mut maps = Vec::new();
    let mut at = 0;
    for i in 0..120u64 {
        maps.push((at * P..(at + 1) * P, Some(i)));
        at += 2 + i % 9;
    }
    map_all(&m, &mut model, &maps);
    for len in (1..=9u64).rev() {
        for _ in 0..3 {
            let expected = model.clone().alloc(0..at * P, len * P, 0);
            assert!(expected.is_ok(), "a {len}-page gap remains");
            assert_eq!(
                alloc_both(&m, &mut model, 0..at * P, len * P, len),
                expected
            );
            m.check();
        }
    }
    map_all(&m, &mut model, &[]);
}

/// Random allocs and unmaps in a map of a few hundred intervals (deeper than the proptest's),
/// compared with the model and structurally checked after every step.
pub fn random_allocs_in_a_large_map_match_the_model<M: IntervalMap<u64> + Checked>(m: M) {
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let mut model = Model::default();
    let reader = m.domain().register();
    let span = 4096u64;
    for i in 0..300u64 {
        let s = rng.gen_range(0..span);
        let len = rng.gen_range(1..4);
        let r = s * P..(s + len).min(span) * P;
        assert_eq!(m.map(r.clone(), Some(i)), model.map(r, Some(i)));
    }
    for i in 0..400u64 {
        let a = rng.gen_range(0..span);
        let b = rng.gen_range(a + 1..=span + 64);
        if i % 4 == 3 {
            let r = a * P..(a + rng.gen_range(1..8)).min(b) * P;
            assert_eq!(m.map(r.clone(), None), model.map(r, None));
        } else {
            let len = rng.gen_range(1..12) * P;
            let _ = alloc_both(&m, &mut model, a * P..b * P, len, i);
        }
        let g = reader.read();
        assert_matches(&m, &model, &g);
    }
}

fn libc_einval() -> i32 {
    22
}

fn libc_enomem() -> i32 {
    12
}

/// Instantiates the whole suite for one implementation: `interval_map_conformance!(MapType);`.
#[macro_export]
macro_rules! interval_map_conformance {
    ($map:ident) => {
        use aspace_rcu::Domain;
        use proptest::prelude::*;

        fn fresh<V: Clone + Send + Sync + 'static>() -> $map<V> {
            $map::new(Domain::new())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
            #[test]
            fn random_operations_match_the_sequential_model(
                ops in proptest::collection::vec(conformance::op_strategy(), 1..60)
            ) {
                conformance::run_ops(&fresh::<u64>(), &ops);
            }
        }

        #[test]
        fn adjacent_intervals_stay_separate() {
            conformance::adjacent_intervals_stay_separate(fresh());
        }
        #[test]
        fn alloc_takes_exact_fit_gap() {
            conformance::alloc_takes_exact_fit_gap(fresh());
        }
        #[test]
        fn overwrite_spanning_many_intervals_leaves_trimmed_ends() {
            conformance::overwrite_spanning_many_intervals_leaves_trimmed_ends(fresh());
        }
        #[test]
        fn unmap_in_the_middle_splits_an_interval() {
            conformance::unmap_in_the_middle_splits_an_interval(fresh());
        }
        #[test]
        fn a_map_over_free_pages_and_one_whole_interval_replaces_it() {
            conformance::a_map_over_free_pages_and_one_whole_interval_replaces_it(fresh::<u64>);
        }
        #[test]
        fn both_ends_of_the_key_space_are_usable() {
            conformance::both_ends_of_the_key_space_are_usable(fresh());
        }
        #[test]
        fn invalid_input_is_rejected_and_changes_nothing() {
            conformance::invalid_input_is_rejected_and_changes_nothing(fresh());
        }
        #[test]
        fn alloc_reports_no_space() {
            conformance::alloc_reports_no_space(fresh());
        }
        #[test]
        fn alloc_skips_many_small_gaps_before_a_fitting_one() {
            conformance::alloc_skips_many_small_gaps_before_a_fitting_one(fresh());
        }
        #[test]
        fn alloc_uses_gaps_at_both_ends_of_the_key_space() {
            conformance::alloc_uses_gaps_at_both_ends_of_the_key_space(fresh());
        }
        #[test]
        fn alloc_takes_exact_fits_at_every_level() {
            conformance::alloc_takes_exact_fits_at_every_level(fresh());
        }
        #[test]
        fn random_allocs_in_a_large_map_match_the_model() {
            conformance::random_allocs_in_a_large_map_match_the_model(fresh());
        }
        #[test]
        fn stress_arenas_and_shared_range_keep_invariants() {
            conformance::stress::arenas_and_shared_range(fresh());
        }
        #[test]
        fn a_map_over_free_pages_and_one_whole_interval_is_atomic_for_queries() {
            conformance::stress::map_over_free_pages_and_one_interval_is_atomic(fresh());
        }
        #[test]
        fn lookups_racing_updates_find_untouched_intervals() {
            conformance::stress::lookups_racing_updates(fresh());
        }
    };
}
