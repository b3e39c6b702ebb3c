//! `query` and `visit` trust the caller's guard to keep nodes alive, which only a read section
//! of the map's own RCU domain does: every implementation checks the guard's domain and panics
//! on a foreign one (in every build) instead of reading nodes its grace periods do not protect.
#![cfg(not(loom))]

use aspace_map::{BTreeIntervalMap, BonsaiMap, IntervalMap, RadixMap, SkipListMap, PAGE_SIZE as P};
use aspace_rcu::Domain;
use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};

const MESSAGE: &str = "belongs to another RCU domain";

fn panic_message(r: Result<(), Box<dyn std::any::Any + Send>>) -> String {
    let e = r.expect_err("a foreign guard must panic");
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn foreign_guards_panic<M: IntervalMap<u64>>(m: M) {
    m.map(0..4 * P, Some(1)).unwrap();
    let other = Domain::new();
    let reader = other.register();
    let g = reader.read();
    let q = catch_unwind(AssertUnwindSafe(|| {
        let _ = m.query(P, &g);
    }));
    assert!(panic_message(q).contains(MESSAGE));
    let v = catch_unwind(AssertUnwindSafe(|| {
        let _ = m.visit(0..8 * P, &g, &mut |_, _| ControlFlow::Continue(()));
    }));
    assert!(panic_message(v).contains(MESSAGE));
    drop(g);
    // A guard of the map's domain, or of a clone of its handle, is accepted.
    let own = m.domain().clone().register();
    let g = own.read();
    assert_eq!(m.query(P, &g).map(|(_, v)| *v), Some(1));
    assert!(m
        .visit(0..8 * P, &g, &mut |_, _| ControlFlow::Continue(()))
        .is_ok());
}

#[test]
fn btree_refuses_a_guard_of_another_domain() {
    foreign_guards_panic(BTreeIntervalMap::new(Domain::new()));
}

#[test]
fn bonsai_refuses_a_guard_of_another_domain() {
    foreign_guards_panic(BonsaiMap::new(Domain::new()));
}

#[test]
fn skiplist_refuses_a_guard_of_another_domain() {
    foreign_guards_panic(SkipListMap::new(Domain::new()));
}

#[test]
fn radix_refuses_a_guard_of_another_domain() {
    foreign_guards_panic(RadixMap::new(Domain::new()));
}
