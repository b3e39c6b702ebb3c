//! Unit tests of the radix map's shapes: folding, expansion, reclamation of emptied nodes.

use super::*;
use crate::contract::KEY_SPACE_END;

const P: u64 = PAGE_SIZE;

fn intervals(m: &RadixMap<u64>) -> Vec<(u64, u64, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(0..KEY_SPACE_END, &g, &mut |iv, v| {
        out.push((iv.start / P, iv.end / P, *v));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

#[test]
fn map_query_unmap() {
    let m = RadixMap::new(Domain::new());
    m.map(3 * P..7 * P, Some(1)).unwrap();
    m.check_invariants();
    assert_eq!(intervals(&m), vec![(3, 7, 1)]);
    m.map(4 * P..5 * P, None).unwrap();
    m.check_invariants();
    assert_eq!(intervals(&m), vec![(3, 4, 1), (5, 7, 1)]);
    m.map(0..KEY_SPACE_END, None).unwrap();
    m.check_invariants();
    assert!(intervals(&m).is_empty());
}
