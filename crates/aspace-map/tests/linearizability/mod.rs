//! A small Wing-Gong linearizability checker for interval-map histories.
//!
//! A history is a list of completed operations with invocation and response timestamps taken
//! from one global counter. `check` searches (depth first, with memoisation of visited
//! `(linearized set, model)` pairs) for a total order that respects real time (an operation can
//! go next only if it was invoked before every not-yet-linearized operation responded) and in
//! which every result equals what the sequential model gives. Histories are tiny (a dozen
//! operations), so the search is exhaustive.
//!
//! Sequential model: a sorted list of `(start page, end page, value)` over a small page range.
//! `alloc` is specified as "claims a free range of `len` pages inside `within`" (the skiplist's
//! first fit is exact only for the state its walk saw, see `skiplist/alloc.rs`), and a `NoSpace`
//! answer is accepted as is: a walk may see every gap full at different moments.
//!
//! Not for: large histories (the search is exponential in the worst case).

use std::collections::HashSet;

/// An operation and its observed result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `map(s..e, v)`.
    Map { s: u64, e: u64, v: Option<u64> },
    /// `alloc(within, len, v)` answered `Some(start)` or `None` (no space).
    Alloc {
        ws: u64,
        we: u64,
        len: u64,
        v: u64,
        got: Option<u64>,
    },
    /// `query(page)` answered this interval.
    Query {
        page: u64,
        got: Option<(u64, u64, u64)>,
    },
}

/// A completed operation.
#[derive(Clone, Debug)]
pub struct Event {
    pub invoke: u64,
    pub response: u64,
    pub op: Op,
}

type Model = Vec<(u64, u64, u64)>;

fn map(m: &Model, s: u64, e: u64, v: Option<u64>) -> Model {
    let mut out = Vec::new();
    for &(a, z, x) in m {
        if z <= s || a >= e {
            out.push((a, z, x));
            continue;
        }
        if a < s {
            out.push((a, s, x));
        }
        if z > e {
            out.push((e, z, x));
        }
    }
    if let Some(v) = v {
        out.push((s, e, v));
    }
    out.sort();
    out
}

fn free(m: &Model, s: u64, e: u64) -> bool {
    m.iter().all(|&(a, z, _)| z <= s || a >= e)
}

/// Applies `op` to `m` if its recorded result is what the model gives; the new model otherwise
/// `None`.
fn step(m: &Model, op: &Op) -> Option<Model> {
    match *op {
        Op::Map { s, e, v } => Some(map(m, s, e, v)),
        Op::Alloc {
            ws,
            we,
            len,
            v,
            got,
        } => match got {
            Some(s) => (ws <= s && s + len <= we && free(m, s, s + len))
                .then(|| map(m, s, s + len, Some(v))),
            None => Some(m.clone()),
        },
        Op::Query { page, got } => {
            let expected = m.iter().find(|&&(a, z, _)| a <= page && page < z).copied();
            (expected == got).then(|| m.clone())
        }
    }
}

/// Whether the history is linearizable from the empty map.
pub fn check(history: &[Event]) -> bool {
    assert!(history.len() <= 64);
    let mut seen = HashSet::new();
    search(history, 0, &Vec::new(), &mut seen)
}

fn search(h: &[Event], done: u64, m: &Model, seen: &mut HashSet<(u64, Model)>) -> bool {
    if done.count_ones() as usize == h.len() {
        return true;
    }
    if !seen.insert((done, m.clone())) {
        return false;
    }
    let pending = (0..h.len()).filter(|&i| done & (1 << i) == 0);
    let horizon = pending
        .clone()
        .map(|i| h[i].response)
        .min()
        .expect("pending ops");
    for i in pending {
        if h[i].invoke > horizon {
            continue;
        }
        if let Some(next) = step(m, &h[i].op) {
            if search(h, done | (1 << i), &next, seen) {
                return true;
            }
        }
    }
    false
}

#[test]
fn a_stale_query_after_a_completed_map_is_rejected() {
    let h = vec![
        Event {
            invoke: 0,
            response: 1,
            op: Op::Map {
                s: 0,
                e: 2,
                v: Some(1),
            },
        },
        Event {
            invoke: 2,
            response: 3,
            op: Op::Query { page: 0, got: None },
        },
    ];
    assert!(!check(&h));
}

#[test]
fn overlapping_operations_may_take_either_order() {
    let h = vec![
        Event {
            invoke: 0,
            response: 3,
            op: Op::Map {
                s: 0,
                e: 2,
                v: Some(1),
            },
        },
        Event {
            invoke: 1,
            response: 2,
            op: Op::Query { page: 0, got: None },
        },
        Event {
            invoke: 4,
            response: 5,
            op: Op::Query {
                page: 1,
                got: Some((0, 2, 1)),
            },
        },
    ];
    assert!(check(&h));
}
