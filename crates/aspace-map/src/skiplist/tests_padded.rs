//! Tests of padded arena allocation (`SkipListMap::alloc_in_arena_padded`, `alloc.rs`,
//! `hint.rs`): the pads on both sides of each claim, exact first fit against a `BTreeMap` model
//! (frees that reopen gaps, unpadded allocs, mappings across arena bounds), the value handed
//! back by a full arena, input errors, the padded hint, and concurrent padded allocs.

use super::{ArenaAllocError, ArenaLayout, SkipListMap};
use crate::contract::{Interval, IntervalMap, MapError, KEY_SPACE_END, PAGE_SIZE as P};
use aspace_rcu::Domain;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;

/// Every interval of `m` in `range` with its value, in order.
fn intervals_in<V: Clone + Send + Sync + 'static>(
    m: &SkipListMap<V>,
    range: std::ops::Range<u64>,
) -> Vec<(Interval, V)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(range, &g, &mut |iv, v| {
        out.push((iv, v.clone()));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

/// The free bytes on each side of `iv` inside `arena` (up to the neighbouring interval or the
/// arena bound), read through `visit`.
fn free_around(m: &SkipListMap<u64>, arena: Interval, iv: Interval) -> (u64, u64) {
    let left = intervals_in(m, arena.start..iv.start)
        .last()
        .map_or(arena.start, |(n, _)| n.end.max(arena.start));
    let right = intervals_in(m, iv.end..arena.end)
        .first()
        .map_or(arena.end, |(n, _)| n.start.min(arena.end));
    (iv.start - left, right - iv.end)
}

#[test]
fn sequential_padded_allocs_leave_the_pad_free_on_both_sides() {
    const LAYOUT: ArenaLayout = ArenaLayout {
        count: 4,
        size: 64 * P,
        base: 64 * P,
    };
    for pad in [P, 2 * P, 3 * P, 5 * P] {
        let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
        let arena = LAYOUT.arena(1);
        // Neighbours right at the arena bounds (in arenas 0 and 2): the pads are measured from
        // the bounds, not from them.
        m.map(arena.start - P..arena.start, Some(100)).unwrap();
        m.map(arena.end..arena.end + P, Some(101)).unwrap();
        let mut expected = arena.start + pad;
        let mut claims = Vec::new();
        for i in 0u64.. {
            let len = (1 + i % 3) * P;
            // Core 5 is arena 5 % 4 = 1.
            match m.alloc_in_arena_padded(5, len, pad, i) {
                Ok(iv) => {
                    assert_eq!(
                        iv,
                        Interval::new(expected, expected + len).unwrap(),
                        "first fit"
                    );
                    let (l, r) = free_around(&m, arena, iv);
                    assert!(
                        l >= pad && r >= pad,
                        "{iv}: {l:#x} free before, {r:#x} after"
                    );
                    // The next gap starts at this claim's end: its pad is the next one's.
                    expected = iv.end + pad;
                    claims.push(iv);
                }
                Err(ArenaAllocError::ArenaFull(v)) => {
                    assert_eq!(v, i, "the value is handed back");
                    assert!(expected + len + pad > arena.end, "full too early at {i}");
                    break;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        assert!(claims.len() >= 4);
        // At rest, every claim still has its pads (all allocs were padded).
        for &iv in &claims {
            let (l, r) = free_around(&m, arena, iv);
            assert!(l >= pad && r >= pad, "{iv} lost a pad");
        }
        m.check_invariants();
    }
}

#[test]
fn padded_first_fit_reuses_a_gap_reopened_by_a_free() {
    const LAYOUT: ArenaLayout = ArenaLayout {
        count: 2,
        size: 32 * P,
        base: 32 * P,
    };
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let a = LAYOUT.arena(0).start;
    let ivs: Vec<Interval> = (0..6)
        .map(|i| m.alloc_in_arena_padded(0, P, P, i).unwrap())
        .collect();
    // Claims at pages 1, 3, 5, 7, 9, 11 of the arena: one free page between two neighbours
    // (the gap a claim is made in starts at its left neighbour's end).
    for (i, iv) in ivs.iter().enumerate() {
        assert_eq!(iv.start, a + (1 + 2 * i as u64) * P);
    }
    // Freeing page 5 opens [4, 7): three pages, room for one padded page at 5.
    m.map(ivs[2].start..ivs[2].end, None).unwrap();
    assert_eq!(m.alloc_in_arena_padded(0, P, P, 20).unwrap(), ivs[2]);
    // Freeing pages 3 to 5 opens [2, 7): a two-page claim fits at 3.
    m.map(ivs[1].start..ivs[2].end, None).unwrap();
    let iv = m.alloc_in_arena_padded(0, 2 * P, P, 21).unwrap();
    assert_eq!(iv, Interval::new(a + 3 * P, a + 5 * P).unwrap());
    // An unpadded alloc takes the first free page, a pad.
    assert_eq!(
        m.alloc_in_arena_padded(0, P, 0, 22).unwrap(),
        Interval::new(a, a + P).unwrap()
    );
    m.check_invariants();
}

#[test]
fn the_padded_hint_advances_past_short_pad_gaps_and_retreats_on_free() {
    const LAYOUT: ArenaLayout = ArenaLayout {
        count: 2,
        size: 64 * P,
        base: 64 * P,
    };
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let arena = LAYOUT.arena(1);
    let hints = &m.arenas.as_ref().unwrap().1[1];
    let mut last = None;
    for i in 0..8 {
        let iv = m.alloc_in_arena_padded(1, P, P, i).unwrap();
        // The pad gaps (one or two pages) are too short for any padded claim: skipped for good.
        assert_eq!(hints.padded.read().1, iv.end, "padded hint after claim {i}");
        last = Some(iv);
    }
    // The free hint stays at the first free page: the first pad.
    assert_eq!(hints.free.read().1, arena.start);
    let last = last.unwrap();
    m.map(last.start..last.end, None).unwrap();
    assert_eq!(hints.padded.read().1, last.start, "a free moves it back");
    // Pads of three pages are gaps a padded claim may use: the hint stays at the pad gap.
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let hints = &m.arenas.as_ref().unwrap().1[1];
    let iv = m.alloc_in_arena_padded(1, P, 3 * P, 0).unwrap();
    assert_eq!(iv.start, arena.start + 3 * P);
    assert_eq!(hints.padded.read().1, arena.start);
    assert_eq!(
        m.alloc_in_arena_padded(1, P, P, 1).unwrap().start,
        arena.start + P,
        "the three-page pad gap holds a one-page claim padded by one page"
    );
}

#[test]
fn a_full_arena_hands_the_value_back() {
    const LAYOUT: ArenaLayout = ArenaLayout {
        count: 2,
        size: 8 * P,
        base: 8 * P,
    };
    let m: SkipListMap<Arc<u64>> = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let back = |r: Result<Interval, ArenaAllocError<Arc<u64>>>, v: &Arc<u64>| match r {
        Err(e @ ArenaAllocError::ArenaFull(_)) => {
            assert_eq!(e.errno(), libc::ENOMEM);
            let got = e.into_value().unwrap();
            assert!(Arc::ptr_eq(&got, v), "the same value comes back");
        }
        other => panic!("expected ArenaFull, got {other:?}"),
    };
    // Longer than the arena with its pads, and a pad whose double overflows.
    let v = Arc::new(1);
    back(m.alloc_in_arena_padded(0, 7 * P, P, v.clone()), &v);
    back(m.alloc_in_arena_padded(0, P, KEY_SPACE_END, v.clone()), &v);
    // Exactly the arena with its pads fits.
    let iv = m.alloc_in_arena_padded(0, 6 * P, P, Arc::new(2)).unwrap();
    assert_eq!(iv.start, LAYOUT.arena(0).start + P);
    m.map(iv.start..iv.end, None).unwrap();
    // Claims at pages 1, 3 and 5 leave the free pages 0, 2, 4, 6 and 7: no room for a padded
    // page, room for five unpadded ones.
    for i in 0..3 {
        m.alloc_in_arena_padded(0, P, P, Arc::new(i)).unwrap();
    }
    back(m.alloc_in_arena_padded(0, P, P, v.clone()), &v);
    for _ in 0..5 {
        m.alloc_in_arena_padded(0, P, 0, Arc::new(4)).unwrap();
    }
    back(m.alloc_in_arena_padded(0, P, 0, v.clone()), &v);
    // Nothing else was placed: never in the shared region, never in another arena.
    assert_eq!(m.len(), 8);
    assert!(intervals_in(&m, 0..KEY_SPACE_END)
        .iter()
        .all(|(iv, _)| LAYOUT.arena(0).start <= iv.start && iv.end <= LAYOUT.arena(0).end));
    assert_eq!(Arc::strong_count(&v), 1, "no copy kept");
    m.check_invariants();
}

#[test]
fn bad_len_or_pad_is_an_error_and_a_map_without_arenas_hands_the_value_back() {
    let layout = ArenaLayout {
        count: 2,
        size: 8 * P,
        base: 8 * P,
    };
    let m = SkipListMap::with_arenas(Domain::new(), layout);
    let a = layout.arena(1).start;
    let invalid = |r: Result<Interval, ArenaAllocError<u64>>| match r {
        Err(e @ ArenaAllocError::Invalid(_)) => {
            assert_eq!(e.errno(), libc::EINVAL);
            assert!(!e.to_string().is_empty());
            match e {
                ArenaAllocError::Invalid(me) => me,
                _ => unreachable!(),
            }
        }
        other => panic!("expected Invalid, got {other:?}"),
    };
    assert_eq!(
        invalid(m.alloc_in_arena_padded(1, 0, P, 1)),
        MapError::EmptyRange { start: a, end: a }
    );
    assert_eq!(
        invalid(m.alloc_in_arena_padded(1, 5, P, 1)),
        MapError::Unaligned(5)
    );
    assert_eq!(
        invalid(m.alloc_in_arena_padded(1, P, 7, 1)),
        MapError::Unaligned(7)
    );
    assert_eq!(
        invalid(m.alloc_in_arena_padded(1, P, u64::MAX, 1)),
        MapError::Unaligned(u64::MAX)
    );
    assert!(m.is_empty());
    let plain = SkipListMap::new(Domain::new());
    match plain.alloc_in_arena_padded(0, P, P, 9u64) {
        Err(e @ ArenaAllocError::NoArenas(_)) => {
            assert_eq!(e.errno(), libc::ENOMEM);
            assert_eq!(e.into_value(), Some(9));
        }
        other => panic!("expected NoArenas, got {other:?}"),
    }
    assert!(plain.is_empty());
    m.check_invariants();
}

#[test]
fn pad_zero_is_alloc_in_arena_first_fit() {
    const LAYOUT: ArenaLayout = ArenaLayout {
        count: 2,
        size: 32 * P,
        base: 32 * P,
    };
    let padded = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let plain = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let mut live = Vec::new();
    for i in 0..60u64 {
        let len = (1 + i % 4) * P;
        let a = padded.alloc_in_arena_padded(1, len, 0, i);
        let b = plain.alloc_in_arena(1, len, i);
        match (a, b) {
            (Ok(x), Ok(y)) => {
                assert_eq!(x, y, "alloc {i}");
                live.push(x);
            }
            // The plain one falls back to the shared region when the arena is full.
            (Err(ArenaAllocError::ArenaFull(_)), Ok(y)) => {
                assert!(!LAYOUT.arena(1).overlaps(&y));
                plain.map(y.start..y.end, None).unwrap();
            }
            other => panic!("alloc {i}: {other:?}"),
        }
        if i % 3 == 2 {
            let iv = live.swap_remove((i as usize * 7) % live.len());
            padded.map(iv.start..iv.end, None).unwrap();
            plain.map(iv.start..iv.end, None).unwrap();
        }
    }
    assert_eq!(
        intervals_in(&padded, 0..KEY_SPACE_END),
        intervals_in(&plain, 0..KEY_SPACE_END)
    );
    padded.check_invariants();
}

/// A trivially correct model: start -> (end, value).
#[derive(Default)]
struct Model(BTreeMap<u64, (u64, u64)>);

impl Model {
    fn map(&mut self, s: u64, e: u64, v: Option<u64>) {
        let hit: Vec<(u64, (u64, u64))> = self
            .0
            .range(..e)
            .filter(|(_, &(end, _))| end > s)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, (b, val)) in hit {
            self.0.remove(&a);
            if a < s {
                self.0.insert(a, (s, val));
            }
            if b > e {
                self.0.insert(e, (b, val));
            }
        }
        if let Some(v) = v {
            self.0.insert(s, (e, v));
        }
    }

    /// Where the first gap `[g, ge)` of `arena` with `ge - g >= len + 2 * pad` puts a claim.
    fn first_fit(&self, arena: Interval, len: u64, pad: u64) -> Option<u64> {
        let need = len + 2 * pad;
        let mut g = arena.start;
        for (&a, &(b, _)) in self.0.range(..arena.end) {
            if b <= arena.start {
                continue;
            }
            let a = a.max(arena.start);
            if a >= g && a - g >= need {
                return Some(g + pad);
            }
            g = g.max(b);
        }
        (arena.end.saturating_sub(g) >= need).then_some(g + pad)
    }

    fn all(&self) -> Vec<(Interval, u64)> {
        self.0
            .iter()
            .map(|(&a, &(b, v))| (Interval::new(a, b).unwrap(), v))
            .collect()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Padded { core: usize, len: u64, pad: u64 },
    FreeOne(prop::sample::Index),
    Map { start: u64, len: u64, some: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..3usize, 1..=4u64, 0..=3u64).prop_map(|(core, l, p)| Op::Padded {
            core,
            len: l * P,
            pad: p * P
        }),
        3 => any::<prop::sample::Index>().prop_map(Op::FreeOne),
        // Pages 8..88 cover the shared region below, both arenas and their bounds.
        2 => (8..88u64, 1..=6u64, any::<bool>()).prop_map(|(s, l, some)| Op::Map {
            start: s * P,
            len: l * P,
            some
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Sequentially, every padded alloc (pads 0 to 3 pages, both hints) returns exactly the
    /// model's first fit, or `ArenaFull` with the value when there is none; frees reopen gaps,
    /// mappings (also across arena bounds, dropping separators) close them.
    #[test]
    fn padded_alloc_is_exact_first_fit(ops in prop::collection::vec(op(), 1..120)) {
        const LAYOUT: ArenaLayout = ArenaLayout { count: 2, size: 32 * P, base: 16 * P };
        let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
        let mut model = Model::default();
        for (i, op) in ops.into_iter().enumerate() {
            let v = i as u64;
            match op {
                Op::Padded { core, len, pad } => {
                    let arena = LAYOUT.arena(core % LAYOUT.count);
                    let want = model.first_fit(arena, len, pad);
                    match (m.alloc_in_arena_padded(core, len, pad, v), want) {
                        (Ok(iv), Some(s)) => {
                            prop_assert_eq!(iv, Interval::new(s, s + len).unwrap());
                            model.map(iv.start, iv.end, Some(v));
                        }
                        (Err(ArenaAllocError::ArenaFull(back)), None) => prop_assert_eq!(back, v),
                        (got, want) => prop_assert!(false, "step {}: got {:?}, model {:?}", i, got, want),
                    }
                }
                Op::FreeOne(idx) => {
                    if !model.0.is_empty() {
                        let (&a, &(b, _)) = model.0.iter().nth(idx.index(model.0.len())).unwrap();
                        m.map(a..b, None).unwrap();
                        model.map(a, b, None);
                    }
                }
                Op::Map { start, len, some } => {
                    m.map(start..start + len, some.then_some(v)).unwrap();
                    model.map(start, start + len, some.then_some(v));
                }
            }
            m.check_invariants();
            prop_assert_eq!(intervals_in(&m, 0..KEY_SPACE_END), model.all());
        }
    }
}

/// Threads claim padded intervals (pads of one or two pages; the value is the pad) and free
/// some of their own, in one shared arena or each in its own. Afterwards no two intervals
/// overlap (`check_invariants`), every thread's live intervals are in the map, and every two
/// neighbours in an arena are at least the smaller of their pads apart (each claim kept its
/// pads against every node present at its CAS, and later claims were padded too; frees only
/// widen gaps), as are the first and last from the arena bounds.
fn concurrent_padded_allocs(shared_arena: bool) {
    const LAYOUT: ArenaLayout = ArenaLayout {
        count: 4,
        size: 16384 * P,
        base: 1 << 32,
    };
    const THREADS: usize = 6;
    const ROUNDS: u64 = 300;
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let live: Vec<Vec<Interval>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let m = &m;
                s.spawn(move || {
                    let core = if shared_arena { 2 } else { t };
                    let pad = P * (1 + t as u64 % 2);
                    let mut mine: Vec<Interval> = Vec::new();
                    for i in 0..ROUNDS {
                        let len = P * (1 + (i + t as u64) % 3);
                        match m.alloc_in_arena_padded(core, len, pad, pad) {
                            Ok(iv) => mine.push(iv),
                            Err(e) => panic!("thread {t}, round {i}: {e:?}"),
                        }
                        if i % 3 == 1 {
                            let iv = mine.swap_remove((i as usize * 31 + t) % mine.len());
                            m.map(iv.start..iv.end, None).unwrap();
                        }
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    m.check_invariants();
    let all = intervals_in(&m, 0..KEY_SPACE_END);
    let mut expected: Vec<Interval> = live.into_iter().flatten().collect();
    expected.sort();
    assert_eq!(all.iter().map(|(iv, _)| *iv).collect::<Vec<_>>(), expected);
    for k in 0..LAYOUT.count {
        let arena = LAYOUT.arena(k);
        let mut prev: Option<(u64, u64)> = Some((arena.start, u64::MAX));
        for (iv, pad) in all.iter().filter(|(iv, _)| arena.overlaps(iv)) {
            assert!(
                arena.start <= iv.start && iv.end <= arena.end,
                "{iv} leaves its arena"
            );
            let (end, prev_pad) = prev.unwrap();
            assert!(
                iv.start - end >= prev_pad.min(*pad),
                "{iv} (pad {pad:#x}) is {:#x} after its neighbour",
                iv.start - end
            );
            prev = Some((iv.end, *pad));
        }
        if let Some((end, pad)) = prev {
            assert!(arena.end - end >= pad.min(arena.end - arena.start));
        }
    }
}

#[test]
fn concurrent_padded_allocs_in_one_arena_never_overlap_and_keep_their_pads() {
    concurrent_padded_allocs(true);
}

#[test]
fn concurrent_padded_allocs_in_several_arenas_never_overlap_and_keep_their_pads() {
    concurrent_padded_allocs(false);
}
