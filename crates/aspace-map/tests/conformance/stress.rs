//! Bounded multi-threaded tests of the contract (generic over implementations).
//!
//! Values are `Tag`s naming the thread and sequence number that wrote them and the range that
//! write covered, so any answer a reader gets can be checked against what was ever written:
//! its interval must contain the queried address and lie inside the written range, and its
//! sequence number must have been issued (writers bump `issued` with `Release` before the write;
//! readers load it with `Acquire` after seeing the value). Sizes are bounded by operation counts
//! (smaller in debug builds), never by time; no sleeps.

use super::model::Model;
use super::{query, snapshot, Checked};
use aspace_map::{Interval, IntervalMap, KEY_SPACE_END, PAGE_SIZE as P};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Who wrote a value, and over which range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub thread: usize,
    pub seq: u64,
    pub start: u64,
    pub end: u64,
}

fn scaled(release: usize) -> usize {
    if cfg!(debug_assertions) {
        release / 10
    } else {
        release
    }
}

/// Checks that a query answer for `addr` is one that some write produced (see the module doc).
fn check_answer(
    addr: u64,
    ans: Option<(Interval, Tag)>,
    issued: &[AtomicU64],
    owner: Option<usize>,
) {
    let Some((iv, tag)) = ans else { return };
    assert!(iv.contains(addr), "{iv} does not contain {addr:#x}");
    assert!(
        tag.start <= iv.start && iv.end <= tag.end,
        "{iv} is not inside the range {:#x}..{:#x} written with its value",
        tag.start,
        tag.end
    );
    // Acquire: pairs with the writer's Release bump before it wrote `tag`.
    let issued = issued[tag.thread].load(Ordering::Acquire);
    assert!(tag.seq < issued, "value {tag:?} was never written");
    if let Some(o) = owner {
        assert_eq!(
            tag.thread, o,
            "a value in thread {o}'s arena written by another thread"
        );
    }
}

const THREADS: usize = 4;
const ARENA_PAGES: u64 = 128;
const SHARED_PAGES: u64 = 64;

fn arena_base(t: usize) -> u64 {
    (1 + t as u64) * 1024 * P
}

fn owner_of(addr: u64) -> Option<usize> {
    (0..THREADS).find(|&t| (arena_base(t)..arena_base(t) + ARENA_PAGES * P).contains(&addr))
}

/// Threads update their own arenas (checked exactly against a private model, including every
/// `alloc` answer and every query there) and contend on a shared range; all threads query
/// everywhere. At the end: each arena holds exactly what its thread put there, and the whole map
/// is sorted, disjoint, and consistent with `len` and the implementation's own check.
pub fn arenas_and_shared_range<M: IntervalMap<Tag> + Checked>(m: M) {
    let issued: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
    let ops = scaled(50_000);
    let models: Vec<Model> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (m, issued) = (&m, &issued);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(0x5eed + t as u64);
                    let reader = m.domain().register();
                    let mut model = Model::default();
                    let base = arena_base(t);
                    let arena_end = base + ARENA_PAGES * P;
                    let mut seq = 0u64;
                    let mut next_tag = |start: u64, end: u64| {
                        let tag = Tag {
                            thread: t,
                            seq,
                            start,
                            end,
                        };
                        seq += 1;
                        // Release: pairs with the Acquire in `check_answer`.
                        issued[t].store(seq, Ordering::Release);
                        tag
                    };
                    for _ in 0..ops {
                        match rng.gen_range(0..100) {
                            0..=49 => {
                                let a = base + rng.gen_range(0..ARENA_PAGES) * P;
                                let b = (a + rng.gen_range(1..=8) * P).min(arena_end);
                                let v = if rng.gen_bool(0.7) {
                                    Some(next_tag(a, b))
                                } else {
                                    None
                                };
                                m.map(a..b, v).unwrap();
                                model.map(a..b, v.map(|t| t.seq)).unwrap();
                            }
                            50..=59 => {
                                let len = rng.gen_range(1..=4) * P;
                                let tag = next_tag(base, arena_end);
                                let got = m.alloc(base..arena_end, len, tag);
                                let want = model.alloc(base..arena_end, len, tag.seq);
                                assert_eq!(got, want, "alloc in thread {t}'s own arena");
                            }
                            60..=69 => {
                                let a = rng.gen_range(0..SHARED_PAGES) * P;
                                let b = (a + rng.gen_range(1..=16) * P).min(SHARED_PAGES * P);
                                let v = rng.gen_bool(0.6).then(|| next_tag(a, b));
                                m.map(a..b, v).unwrap();
                            }
                            _ => {
                                let g = reader.read();
                                let own = base + rng.gen_range(0..ARENA_PAGES * P);
                                let got = query(m, own, &g);
                                check_answer(own, got, issued, Some(t));
                                assert_eq!(
                                    got.map(|(iv, tag)| (iv, tag.seq)),
                                    model.query(own),
                                    "query in thread {t}'s own arena"
                                );
                                let shared = rng.gen_range(0..SHARED_PAGES * P);
                                check_answer(shared, query(m, shared, &g), issued, None);
                                let other = arena_base(rng.gen_range(0..THREADS))
                                    + rng.gen_range(0..ARENA_PAGES * P);
                                check_answer(other, query(m, other, &g), issued, owner_of(other));
                            }
                        }
                    }
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    m.check();
    let reader = m.domain().register();
    let g = reader.read();
    for (t, model) in models.iter().enumerate() {
        let arena = arena_base(t)..arena_base(t) + ARENA_PAGES * P;
        let got: Vec<_> = snapshot(&m, arena, &g)
            .into_iter()
            .map(|(iv, tag)| (iv, tag.seq))
            .collect();
        assert_eq!(got, model.intervals(), "thread {t}'s arena at the end");
    }
    let all = snapshot(&m, 0..KEY_SPACE_END, &g);
    assert_eq!(all.len(), m.len());
    for w in all.windows(2) {
        assert!(w[0].0.end <= w[1].0.start, "sorted and disjoint: {w:?}");
    }
    for (iv, _) in &all {
        check_answer(
            iv.start,
            query(&m, iv.start, &g),
            &issued,
            owner_of(iv.start),
        );
    }
}

const STABLE: u64 = 48;
const STRIDE: u64 = 8;
const STABLE_PAGES: u64 = 3;

/// One writer churns the gaps between `STABLE` intervals it never touches (inserts, overwrites,
/// splits, removals and allocs, which rebalance the tree under the readers); readers check
/// throughout that every stable interval is found, exactly, by `query` and by `visit`, and that
/// every other answer is a value the writer wrote.
pub fn lookups_racing_updates<M: IntervalMap<Tag> + Checked>(m: M) {
    const WRITER: usize = 0;
    const FIXTURE: usize = 1;
    let issued = [AtomicU64::new(0), AtomicU64::new(u64::MAX)];
    let stable = |k: u64| {
        let start = k * STRIDE * P;
        let end = start + STABLE_PAGES * P;
        (
            Interval::new(start, end).unwrap(),
            Tag {
                thread: FIXTURE,
                seq: k,
                start,
                end,
            },
        )
    };
    for k in 0..STABLE {
        let (iv, tag) = stable(k);
        m.map(iv.start..iv.end, Some(tag)).unwrap();
    }
    let done = AtomicBool::new(false);
    let updates = scaled(100_000);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(7);
            for seq in 0..updates as u64 {
                let k = rng.gen_range(0..STABLE);
                let gap_start = (k * STRIDE + STABLE_PAGES) * P;
                let gap_end = (k + 1) * STRIDE * P;
                let a = gap_start + rng.gen_range(0..STRIDE - STABLE_PAGES) * P;
                let b = (a + rng.gen_range(1..=3) * P).min(gap_end);
                let tag = Tag {
                    thread: WRITER,
                    seq,
                    start: a,
                    end: b,
                };
                // Release: pairs with the Acquire in `check_answer`.
                issued[WRITER].store(seq + 1, Ordering::Release);
                match rng.gen_range(0..4) {
                    0 | 1 => m.map(a..b, Some(tag)).unwrap(),
                    2 => m.map(a..b, None).unwrap(),
                    _ => {
                        let tag = Tag {
                            start: gap_start,
                            end: gap_end,
                            ..tag
                        };
                        let _ = m.alloc(gap_start..gap_end, P, tag);
                    }
                }
            }
            done.store(true, Ordering::Release);
        });
        for r in 0..2u64 {
            let (m, issued, done) = (&m, &issued, &done);
            s.spawn(move || {
                let reader = m.domain().register();
                let mut rng = SmallRng::seed_from_u64(100 + r);
                loop {
                    // Acquire: pairs with the writer's final Release; one more pass after it.
                    let last = done.load(Ordering::Acquire);
                    for k in 0..STABLE {
                        let g = reader.read();
                        let (iv, tag) = stable(k);
                        let addr = iv.start + rng.gen_range(0..iv.len());
                        assert_eq!(query(m, addr, &g), Some((iv, tag)), "stable interval {k}");
                        let gap = iv.end + rng.gen_range(0..(STRIDE - STABLE_PAGES) * P);
                        let ans = query(m, gap, &g);
                        check_answer(gap, ans, issued, Some(WRITER));
                    }
                    {
                        let g = reader.read();
                        let seen: Vec<_> = snapshot(m, 0..STABLE * STRIDE * P, &g)
                            .into_iter()
                            .filter(|(_, tag)| tag.thread == FIXTURE)
                            .collect();
                        let want: Vec<_> = (0..STABLE).map(stable).collect();
                        assert_eq!(seen, want, "visit lost or changed a stable interval");
                    }
                    if last {
                        break;
                    }
                }
            });
        }
    });
    m.check();
}

/// Issue 17's linearizability check: one writer repeatedly applies the shapes of
/// [`super::free_ends_around_one_interval`] (a `map` over one whole interval `X` and free pages
/// beside it) in cells of a tree of a few hundred intervals; readers query a free page of the
/// range and then a page of `X` under one guard, and must never see the new interval at the
/// first and the old `X` at the second (Bonsai published the insert of the new interval and the
/// delete of `X` as two commits: a reader between them saw both).
///
/// Values are sequence numbers per cell: `X` of round `i` is `2i`, the interval replacing it
/// `2i + 1`; the writer then unmaps the range and starts the next round. At any page the values
/// a linearizable map shows rise over time, so a second query answering a value below the
/// first's is a map seen half applied. Bounded by rounds (fewer in debug builds) and by time;
/// no sleeps.
pub fn map_over_free_pages_and_one_interval_is_atomic<M: IntervalMap<u64> + Checked>(m: M) {
    const CELLS: u64 = 3;
    const FILL: u64 = 256;
    let cell_base = |c: u64| 4096 + c * 16;
    // Other intervals around the cells: a deeper tree, longer update paths, rotations.
    for k in 0..FILL {
        m.map(2 * k * P..(2 * k + 1) * P, Some(u64::MAX)).unwrap();
    }
    let rounds = scaled(20_000) as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..rounds {
                for c in 0..CELLS {
                    let shape = super::free_ends_around_one_interval(cell_base(c));
                    let (x, range) = shape[c as usize].clone();
                    m.map(x, Some(2 * i)).unwrap();
                    m.map(range.clone(), Some(2 * i + 1)).unwrap();
                    m.map(range, None).unwrap();
                }
                if std::time::Instant::now() > deadline {
                    break;
                }
            }
            // Release: pairs with the readers' Acquire; they make one more pass after it.
            done.store(true, Ordering::Release);
        });
        for _ in 0..2 {
            let (m, done) = (&m, &done);
            s.spawn(move || {
                let reader = m.domain().register();
                loop {
                    // Acquire: pairs with the writer's final Release.
                    let last = done.load(Ordering::Acquire);
                    for c in 0..CELLS {
                        let shape = super::free_ends_around_one_interval(cell_base(c));
                        let (x, range) = shape[c as usize].clone();
                        let free = if range.start < x.start {
                            range.start
                        } else {
                            range.end - P
                        };
                        let g = reader.read();
                        let first = query(m, free, &g);
                        let second = query(m, x.start, &g);
                        for (addr, ans) in [(free, first), (x.start, second)] {
                            if let Some((iv, v)) = ans {
                                let want = if v % 2 == 1 { &range } else { &x };
                                assert_eq!(iv.start..iv.end, want.clone(), "query({addr:#x})");
                            }
                        }
                        if let (Some((_, a)), Some((_, b))) = (first, second) {
                            assert!(
                                b >= a,
                                "one guard saw map({range:x?}) of round {} at {free:#x} and \
                                 then {x:x?} of round {} at {:#x}: the map was half applied",
                                a / 2,
                                b / 2,
                                x.start
                            );
                        }
                    }
                    if last {
                        break;
                    }
                }
            });
        }
    });
    m.check();
}
