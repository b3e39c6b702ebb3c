//! Tests of zone separators (`skiplist/zone.rs`): made on demand outside the arenas, found
//! again without a second node, refused inside an interval, dropped by a mapping that covers
//! them and re-created by a swap that held them without covering them, bounded, and racing
//! mappings across their boundaries.

use super::zone::zone_height;
use super::{ArenaLayout, SkipListMap, MAX_ZONES, ZONE_SIZE as Z};
use crate::contract::{IntervalMap, PAGE_SIZE as P};
use aspace_rcu::Domain;
use std::sync::Arc;

/// Arenas in the first 64 GiB; zones above.
const LAYOUT: ArenaLayout = ArenaLayout {
    count: 4,
    size: 16 * Z,
    base: Z,
};

/// The zone separators linked now (quiescent map), as the starts of their zones.
fn zone_separators(m: &SkipListMap<u64>) -> Vec<u64> {
    m.check_invariants();
    m.separators()
        .into_iter()
        .filter(|&b| !m.is_arena_boundary(b))
        .map(|p| p + P)
        .collect()
}

#[test]
fn a_zone_separator_is_made_once_and_found_again() {
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let b = 100 * Z;
    assert_eq!(m.separate_zone(b + 5 * P), Ok(true));
    assert_eq!(zone_separators(&m), vec![b]);
    assert_eq!(m.separate_zone(b + 7 * P), Ok(true));
    assert_eq!(
        zone_separators(&m),
        vec![b],
        "a second node at the same zone"
    );
    // Mappings around it behave as without it.
    m.map(b..b + P, Some(1)).unwrap();
    m.map(b - P..b, Some(2)).unwrap();
    m.map(b - 3 * P..b - 2 * P, Some(3)).unwrap();
    assert_eq!(zone_separators(&m), vec![b]);
    assert_eq!(m.len(), 3);
}

#[test]
fn no_zone_separator_inside_the_arenas_zone_zero_or_a_map_without_arenas() {
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    assert_eq!(m.separate_zone(3 * Z), Ok(false), "inside the arenas");
    assert_eq!(
        m.separate_zone(LAYOUT.end()),
        Ok(false),
        "the last arena boundary"
    );
    assert_eq!(m.separate_zone(P), Ok(false), "zone 0");
    assert!(zone_separators(&m).is_empty());
    let plain = SkipListMap::<u64>::new(Domain::new());
    assert_eq!(plain.separate_zone(100 * Z), Ok(false));
    plain.check_invariants();
}

#[test]
fn an_interval_over_the_point_refuses_then_drops_the_separator() {
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let b = 200 * Z;
    // The separator's point is one page below the zone: an interval over it refuses it.
    let over = b - 2 * P..b + P;
    m.map(over.clone(), Some(1)).unwrap();
    assert_eq!(m.separate_zone(b), Ok(false));
    assert!(zone_separators(&m).is_empty());
    m.map(over.clone(), None).unwrap();
    // Made, then covered by a new mapping: dropped, and made again once the point is free.
    assert_eq!(m.separate_zone(b), Ok(true));
    m.map(over.clone(), Some(2)).unwrap();
    assert!(
        zone_separators(&m).is_empty(),
        "a separator inside an interval"
    );
    m.map(over, None).unwrap();
    assert!(zone_separators(&m).is_empty());
    assert_eq!(m.separate_zone(b), Ok(true));
    assert_eq!(zone_separators(&m), vec![b]);
}

#[test]
fn a_swap_that_held_a_separator_without_covering_it_puts_it_back() {
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let b = 300 * Z;
    assert_eq!(m.separate_zone(b), Ok(true));
    m.map(b - 3 * P..b - 2 * P, Some(1)).unwrap();
    m.map(b + P..b + 2 * P, Some(2)).unwrap();
    // Unmapping across the point holds the separator and re-creates it.
    m.map(b - 3 * P..b + 2 * P, None).unwrap();
    assert_eq!(zone_separators(&m), vec![b]);
    // So does a mapping on one side of it that the swap's span reaches across.
    m.map(b - 4 * P..b + 4 * P, None).unwrap();
    m.map(b..b + P, Some(3)).unwrap();
    assert_eq!(zone_separators(&m), vec![b]);
    let seps = m.separators();
    let at = seps.iter().position(|&s| s == b - P).unwrap();
    assert!(at > 0, "arena separators come first");
    assert_eq!(zone_height(b + Z), super::arena::SEPARATOR_THRESHOLD + 1);
}

#[test]
fn zone_separators_are_bounded() {
    let m = SkipListMap::<u64>::with_arenas(Domain::new(), LAYOUT);
    let first = 1024 * Z;
    for k in 0..MAX_ZONES as u64 {
        assert_eq!(m.separate_zone(first + k * Z), Ok(true), "zone {k}");
    }
    assert_eq!(m.separate_zone(first + MAX_ZONES as u64 * Z), Ok(false));
    assert_eq!(zone_separators(&m).len(), MAX_ZONES);
    // One dropped for good (covered) makes room for one more.
    m.map(first + Z - 2 * P..first + Z + P, Some(1)).unwrap();
    assert_eq!(m.separate_zone(first + MAX_ZONES as u64 * Z), Ok(true));
    assert_eq!(zone_separators(&m).len(), MAX_ZONES);
}

#[test]
fn stress_zone_separators_racing_mappings_across_their_boundaries() {
    let m = Arc::new(SkipListMap::with_arenas(Domain::new(), LAYOUT));
    let zones: Vec<u64> = (0..4).map(|k| (500 + k) * Z).collect();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let m = Arc::clone(&m);
            let zones = zones.clone();
            std::thread::spawn(move || {
                let mut x = t + 1;
                for i in 0..3_000u64 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let b = zones[(x >> 33) as usize % zones.len()];
                    let lo = b - P - ((x >> 40) % 3) * P;
                    let hi = b - P + ((x >> 50) % 3) * P;
                    match (x >> 60) % 4 {
                        0 => {
                            let _ = m.separate_zone(b);
                        }
                        1 if hi > lo => m.map(lo..hi, Some(i)).unwrap(),
                        _ if hi > lo => m.map(lo..hi, None).unwrap(),
                        _ => {}
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Structure, heights, no separator inside an interval (the check), and the count.
    let seps = zone_separators(&m);
    assert!(seps.iter().all(|b| zones.contains(b)));
}

/// A zone whose point an interval covers is remembered as such: later placements there do
/// not search (nor touch the count) until the covering interval leaves.
#[test]
fn a_covered_zone_is_remembered_until_its_cover_leaves() {
    use super::zone::Known;
    let m = SkipListMap::<u64>::with_arenas(Domain::new(), LAYOUT);
    let b = 700 * Z;
    m.map(b - 2 * P..b + P, Some(1)).unwrap();
    assert_eq!(m.separate_zone(b + 10 * P), Ok(false));
    assert_eq!(m.zones.lookup(b), Known::Covered);
    assert_eq!(m.zones.live_now(), 0, "a refused insert keeps no count");
    m.map(b - 2 * P..b + P, None).unwrap();
    assert_eq!(m.zones.lookup(b), Known::Unknown, "the cover left");
    assert_eq!(m.separate_zone(b), Ok(true));
    assert_eq!(m.zones.lookup(b), Known::Present);
    assert_eq!(m.zones.live_now(), 1);
    // Dropped for good by a cover: forgotten, and the count given back.
    m.map(b - 2 * P..b + P, Some(2)).unwrap();
    assert_eq!(m.zones.lookup(b), Known::Unknown);
    assert_eq!(m.zones.live_now(), 0);
}

/// The edges of the key space: no panic, no overflow.
#[test]
fn zone_separators_at_the_edges_of_the_key_space() {
    use crate::contract::KEY_SPACE_END as END;
    let m = SkipListMap::<u64>::with_arenas(Domain::new(), LAYOUT);
    for addr in [u64::MAX, END, END - P] {
        let _ = m.separate_zone(addr);
    }
    let last = (END - 1) & !(Z - 1);
    assert!(zone_separators(&m).iter().all(|&b| b == last));
    m.map(last - 2 * P..END, Some(1)).unwrap();
    assert!(zone_separators(&m).is_empty());
    m.map(last - 2 * P..END, None).unwrap();
    assert_eq!(m.separate_zone(last), Ok(true));
    m.map(last..END, Some(2)).unwrap();
    assert_eq!(zone_separators(&m), vec![last]);
    assert_eq!(m.zones.live_now(), 1);
}

/// Inserts, mappings and unmappings across the points, shared-region allocs straddling them
/// and held ranges swapped, from four threads: structure, no duplicate, and the bound's count
/// equal to the separators linked (review of issue 21's zones).
#[test]
fn stress_the_count_matches_the_linked_zone_separators() {
    use crate::contract::{Interval, IntervalLocking};
    for round in 0..10u64 {
        let m = Arc::new(SkipListMap::<u64>::with_arenas(Domain::new(), LAYOUT));
        let zones: Vec<u64> = (0..3).map(|k| (500 + k) * Z).collect();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let m = Arc::clone(&m);
                let zones = zones.clone();
                std::thread::spawn(move || {
                    let mut x = t + 1 + round * 77;
                    for i in 0..2_000u64 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let b = zones[(x >> 33) as usize % zones.len()];
                        let lo = b - P - ((x >> 40) % 3) * P;
                        let hi = b - P + ((x >> 50) % 3) * P;
                        match (x >> 58) % 6 {
                            0 | 1 => {
                                let _ = m.separate_zone(b);
                            }
                            2 if hi > lo => m.map(lo..hi, Some(i)).unwrap(),
                            3 if hi > lo => m.map(lo..hi, None).unwrap(),
                            4 => {
                                let len = (1 + (x >> 45) % 3) * P;
                                let _ = m.alloc(b - 4 * P..b + 2 * P, len, i);
                            }
                            5 if hi > lo => {
                                let l = m.lock(lo..hi).unwrap();
                                let new = if (x >> 47) & 1 == 0 {
                                    vec![]
                                } else {
                                    vec![(Interval { start: lo, end: hi }, i)]
                                };
                                m.swap(l, new).unwrap();
                            }
                            _ => {}
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let seps = zone_separators(&m);
        assert!(seps.iter().all(|b| zones.contains(b)));
        let mut d = seps.clone();
        d.dedup();
        assert_eq!(d, seps, "duplicate separators");
        assert_eq!(
            m.zones.live_now(),
            seps.len(),
            "round {round}: count {seps:?}"
        );
    }
}
