//! Tests of the per-core trees below the seam: `PageTables::discard` and its race with an
//! editor's clear and `free_tables` of the same tree (each table retired exactly once).

use super::super::organisation::SpaceTables;
use super::super::UserMask;
use super::*;
use crate::frames::Frame;
use crate::shootdown::Targets;
use crate::types::{Prot, PAGE_SIZE};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

const GIB: u64 = 1 << 30;
const LEAF_SPAN: u64 = 512 * PAGE_SIZE;

fn id(c: usize) -> CoreId {
    CoreId::for_tests(c)
}

/// Pages spread over three GiBs (three level-2 tables under one level-3 table) and several
/// leaves in each; page `p`'s frame has index `p / PAGE_SIZE` (a per-core tree's entries are
/// copies of metadata: any frame number will do).
fn pages() -> Vec<u64> {
    (1..4u64)
        .flat_map(|g| (0..4u64).map(move |l| g * GIB + l * 3 * LEAF_SPAN + l * PAGE_SIZE))
        .collect()
}

fn frame_of(va: u64) -> Frame {
    Frame::from_index(u32::try_from(va / PAGE_SIZE).unwrap())
}

#[test]
fn discard_unlinks_every_table_whatever_it_maps_and_keeps_the_root() {
    let t = PerCoreTables::new(2);
    let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
    let mut cache = t.attach(id(1)).unwrap();
    let tree = t.tree(id(1));
    for va in pages() {
        tree.fill(&mut cache, va, Prot::READ, || Some(frame_of(va)))
            .unwrap();
    }
    // One level-3 table, three level-2 tables, four leaves under each.
    assert_eq!(tree.table_count(), 1 + 1 + 3 + 12);
    assert_eq!(tree.discard(&mut cache, &domain), 16);
    assert_eq!(tree.table_count(), 1);
    assert!(pages().iter().all(|&va| tree.lookup(va).is_none()));
    assert_eq!(
        tree.discard(&mut cache, &domain),
        0,
        "nothing left to discard"
    );
    // Refilled by faults; the count stays exact.
    tree.fill(&mut cache, GIB, Prot::READ, || Some(frame_of(GIB)))
        .unwrap();
    assert_eq!(tree.table_count(), 4);
    t.detach(id(1), &mut cache, &domain);
    cache.drain(&domain);
    assert_eq!(t.table_count(), 1);
}

/// The owner discards its tree while an editor (another core, inside its read section) clears
/// and frees part of it, round after round, with the tables recycled between rounds: every
/// table must be unlinked once (the tree's count returns to its root exactly) and never handed
/// out twice (a table retired twice would be installed at two places, and a later round's
/// lookups would find another page's entry). Each round runs the two on fresh scoped threads
/// released together by a spin start, so that a failed assertion on one side ends the test
/// instead of leaving the other waiting.
#[test]
fn discard_racing_an_editor_retires_every_table_once() {
    const ROUNDS: usize = 1000;
    let t = SpaceTables::new(super::super::organisation::Organisation::PerCore, 2);
    let SpaceTables::PerCore(pc) = &t else {
        unreachable!()
    };
    let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
    let (mut editor_cache, mut owner_cache) = (t.attach(id(0)).unwrap(), t.attach(id(1)).unwrap());
    let tree = pc.tree(id(1));
    let pages = pages();
    // The editor's range: the second and third GiB, whose level-2 tables lie wholly inside.
    let edited: Range<u64> = 2 * GIB..4 * GIB;
    let in_edited: Vec<Frame> = pages
        .iter()
        .filter(|va| edited.contains(va))
        .map(|&va| frame_of(va))
        .collect();
    for round in 0..ROUNDS {
        for &va in &pages {
            // Through the seam: the owner tree's entry, then core 1's copy.
            let pte = t
                .fill(id(1), &mut owner_cache, va, Prot::READ, || {
                    Some(frame_of(va))
                })
                .unwrap();
            assert_eq!(pte.frame(), frame_of(va), "round {round}: a stale entry");
        }
        for &va in &pages {
            assert_eq!(
                tree.lookup(va).map(|e| e.frame()),
                Some(frame_of(va)),
                "round {round}: a table installed twice"
            );
        }
        assert_eq!(tree.table_count(), 17, "round {round}");
        let ready = AtomicUsize::new(0);
        let go = |ready: &AtomicUsize| {
            ready.fetch_add(1, StdOrdering::AcqRel);
            while ready.load(StdOrdering::Acquire) < 2 {
                std::hint::spin_loop();
            }
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let reader = domain.register();
                go(&ready);
                let (mut out, mut users) = (Vec::new(), UserMask::default());
                t.clear_range_noting(
                    Targets::All,
                    &reader,
                    edited.clone(),
                    &mut out,
                    Some(&mut users),
                );
                assert_eq!(out, in_edited, "the owner entries' frames, once each");
                t.free_tables(
                    Targets::All,
                    &reader,
                    &mut editor_cache,
                    edited.clone(),
                    &domain,
                );
            });
            s.spawn(|| {
                go(&ready);
                tree.discard(&mut owner_cache, &domain);
            });
        });
        assert_eq!(
            tree.table_count(),
            1,
            "round {round}: a table unlinked twice"
        );
    }
    editor_cache.drain(&domain);
    t.detach(id(1), &mut owner_cache, &domain);
    owner_cache.drain(&domain);
}
