//! loom model of the SNZI counter (run with `RUSTFLAGS="--cfg loom"`; tests named `loom_*`).
//!
//! Two threads take a reference on two cores that share one leaf (`Snzi::new(4)`: cores 0 and
//! 4 use leaf 0), so their first arrivals race on the leaf's ½ step: whoever finds the leaf at ½
//! must make sure the root counts it before returning. Each thread, holding its reference,
//! checks that the root is non-zero; at the end the count is zero again.
//!
//! Mutation checked (applied by hand to `snzi.rs`, the model failed, restored): an arrival that
//! finds ½ counts itself at the leaf and returns like one that finds 1 or more (`count(w) >=
//! HALF` in the first branch): "holding a reference, the root reads zero".
#![cfg(loom)]

use aspace_sync::Snzi;
use loom::sync::Arc;
use loom::thread;

#[test]
fn loom_snzi_a_holder_never_sees_zero_when_first_arrivals_race() {
    loom::model(|| {
        let s = Arc::new(Snzi::new(4));
        let hold = |s: &Snzi, core: usize| {
            s.inc(core);
            assert!(s.is_nonzero(), "holding a reference, the root reads zero");
            s.dec(core);
        };
        let s2 = s.clone();
        let t = thread::spawn(move || hold(&s2, 4));
        hold(&s, 0);
        t.join().unwrap();
        assert!(!s.is_nonzero(), "every reference given back");
    });
}
