//! Tests of the reader slots' node pools (`skiplist/pool.rs`) through the map: a removed node's
//! memory is reused only after its grace period, allocations take pooled memory once it is
//! there, and the map's `barrier` and drop give every block back. Blocks are counted per thread
//! (`node::blocks`); each test runs its map on its own thread, where every free happens (the
//! retire lists free on the retiring thread, `barrier` and drop on the caller's).

use super::node::blocks;
use super::retire::BATCH;
use super::{ArenaLayout, SkipListMap};
use crate::contract::{IntervalLocking, IntervalMap, PAGE_SIZE as P};
use aspace_rcu::Domain;
use std::collections::HashSet;

const LAYOUT: ArenaLayout = ArenaLayout {
    count: 4,
    size: 16 * P,
    base: 64 * P,
};

/// The address of the node holding the interval at `a` (its value lives inside the node).
fn node_at(m: &SkipListMap<u64>, a: u64) -> usize {
    let r = m.domain().register();
    let g = r.read();
    let (_, v) = m.query(a, &g).expect("mapped");
    v as *const u64 as usize
}

/// Blocks held by the map now: its linked nodes and the head (tests; quiescent map).
fn linked(m: &SkipListMap<u64>) -> isize {
    m.readers.with(|_, _, _| {
        // SAFETY: inside a read section, quiescent.
        unsafe { m.raw.check() }.len() as isize + 1
    })
}

#[test]
fn a_removed_nodes_memory_is_not_reused_while_a_read_section_that_saw_it_is_open() {
    let domain = Domain::new();
    let m = SkipListMap::new(domain.clone());
    let reader = domain.register();
    let section = reader.read();
    // Many batches removed while the section is open: none of their grace periods can end,
    // so none of their memory may come back, from the pool or from the allocator.
    let mut removed = HashSet::new();
    for i in 0..4 * BATCH as u64 {
        let a = (i % 50) * P;
        m.map(a..a + P, Some(i)).unwrap();
        let (_, v) = m.query(a, &section).expect("mapped");
        let at = v as *const u64 as usize;
        assert!(
            !removed.contains(&at),
            "node {at:#x} reused while a section that could see it is open"
        );
        m.map(a..a + P, None).unwrap();
        removed.insert(at);
    }
    drop(section);
    // The grace periods end; the next operation collects the batches into the slot's pool and
    // the following inserts take their memory, not the allocator's.
    domain.barrier();
    m.map(0..P, Some(0)).unwrap();
    m.map(0..P, None).unwrap();
    let before = blocks();
    let mut reused = 0;
    for i in 0..8 {
        m.map(i * P..(i + 1) * P, Some(i)).unwrap();
        reused += usize::from(removed.contains(&node_at(&m, i * P)));
    }
    assert!(reused > 0, "pooled memory is reused after the grace period");
    assert!(
        blocks() - before < 8,
        "inserts drew on the pool: {} blocks from the allocator for 8 nodes",
        blocks() - before
    );
    m.check_invariants();
}

/// A held range keeps its section open until its swap: the swap's new nodes are made while
/// other operations' removed nodes wait, and never in their memory.
#[test]
fn a_held_range_delays_reuse_until_its_section_ends() {
    let domain = Domain::new();
    let m = SkipListMap::new(domain.clone());
    // The held range's predecessor (locked too) is [100, 101), after every page used below.
    m.map(100 * P..101 * P, Some(1)).unwrap();
    m.map(200 * P..201 * P, Some(2)).unwrap();
    let held = m.lock(200 * P..201 * P).unwrap();
    let mut removed = HashSet::new();
    for i in 0..2 * BATCH as u64 {
        m.map(i % 20 * P..(i % 20 + 1) * P, Some(i)).unwrap();
        removed.insert(node_at(&m, i % 20 * P));
        m.map(i % 20 * P..(i % 20 + 1) * P, None).unwrap();
    }
    // (No `domain.barrier()` here: it would wait for the held range's own section.)
    m.map(0..P, Some(0)).unwrap();
    assert!(
        !removed.contains(&node_at(&m, 0)),
        "reused while a held range's section is open"
    );
    m.swap(held, vec![]).unwrap();
    m.check_invariants();
}

#[test]
fn the_map_barrier_and_drop_give_every_node_block_back() {
    let start = blocks();
    let domain = Domain::new();
    let m = SkipListMap::with_arenas(domain.clone(), LAYOUT);
    for i in 0..600u64 {
        let s = (i * 7) % 120;
        m.map(s * P..(s + 1 + i % 5) * P, Some(i)).unwrap();
        if i % 3 == 0 {
            let _ = m.alloc_in_arena(i as usize, P, i);
        }
        if i % 4 == 0 {
            m.map(s * P..(s + 2) * P, None).unwrap();
        }
        if i % 50 == 0 {
            domain.barrier();
        }
    }
    m.check_invariants();
    assert!(
        blocks() - start > linked(&m),
        "removed nodes pending or pooled"
    );
    m.barrier();
    assert_eq!(
        blocks() - start,
        linked(&m),
        "after the barrier only linked nodes hold memory (pools emptied)"
    );
    drop(m);
    assert_eq!(blocks(), start, "the map's drop frees every block");
}
