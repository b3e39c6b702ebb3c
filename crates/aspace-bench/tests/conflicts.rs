//! The conflict audit on a real workload (instrumented build only:
//! `cargo test --release -p aspace-bench --features conflicts --test conflicts`).
//!
//! `coarse` serialises every operation on one lock word, so each `local` operation conflicts
//! on at least that line, and the audit names it by its site in `designs/coarse.rs`. `interval`
//! runs `local`'s disjoint pages with under 0.05 conflicting lines per operation outside the
//! region skiplist (frames, page tables, shootdown, counters, RCU: the engine's own lines; a
//! rare one is a recycled node's region word, `region/store.rs`, about 0.002 per operation);
//! its remaining conflicts are the skiplist's shared towers and node locks
//! (`aspace-map/src/skiplist`). Issue 12's target (< 0.05 conflicting lines per operation in
//! all) is NOT met because of them; see the README's conflict audit section.
#![cfg(feature = "conflicts")]

use aspace_bench::conflicts::{run, ConflictRow, Plan};

/// One audit at a time: the recorder is process-wide, so two tests auditing at once saw each
/// other's lines (a `bonsai` audit once listed the skiplist's reader slots and the RCU
/// reclaimer of the `interval` audit beside it).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn audit(workload: &str, design: &str, cores: usize) -> ConflictRow {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let plan = Plan::new(workload, &[design.to_string()], &[cores], 24, 4).unwrap();
    let mut rows = run(&plan, |_| Ok(())).unwrap();
    assert_eq!(rows.len(), 1);
    rows.pop().unwrap()
}

#[test]
fn coarse_local_conflicts_on_its_lock_word_every_operation() {
    let r = audit("local", "coarse", 4);
    assert_eq!(r.ops, 4 * 20);
    assert!(r.conflicts_per_op >= 1.0, "{r:?}");
    let lock = r
        .lines
        .iter()
        .find(|l| l.site.contains("aspace-vm/src/designs/coarse.rs"))
        .unwrap_or_else(|| panic!("the lock word is named: {:?}", r.lines));
    assert_eq!(lock.per_op, 1.0, "{r:?}");
}

#[test]
fn interval_local_has_no_engine_conflict_and_names_the_skiplist_ones() {
    let r = audit("local", "interval", 4);
    assert_eq!(r.ops, 4 * 20);
    let engine: Vec<_> = r
        .lines
        .iter()
        .filter(|l| !l.site.contains("aspace-map/src/skiplist"))
        .collect();
    assert!(
        engine.is_empty(),
        "conflicts outside the skiplist: {engine:?}"
    );
    assert_eq!(r.rcu_conflicts_per_op, 0.0, "{r:?}");
}

/// `bonsai` (ASPLOS'12 §5.3): a soft fault takes no lock and touches no reference count, so its
/// only shared line is the one every design's fill shares (the leaf table's fill lock,
/// `page_table/`); nothing of the design or its Bonsai store conflicts.
#[test]
fn bonsai_soft_fault_shares_no_line_of_the_design_or_its_store() {
    let r = audit("soft-fault", "bonsai", 4);
    assert_eq!(r.ops, 4 * 20);
    let design: Vec<_> = r
        .lines
        .iter()
        .filter(|l| !l.site.contains("aspace-vm/src/page_table/"))
        .collect();
    assert!(
        design.is_empty(),
        "conflicts outside the page tables: {design:?}"
    );
    assert_eq!(r.rcu_conflicts_per_op, 0.0, "{r:?}");
}

/// `pervma` (per-VMA locks): the same as `bonsai` plus, every fault, the region's own lock word
/// (`region/bonsai_store.rs`'s `VmaLock`), which all cores faulting in one region share.
#[test]
fn pervma_soft_fault_conflicts_on_the_regions_lock_word_every_fault() {
    let r = audit("soft-fault", "pervma", 4);
    assert_eq!(r.ops, 4 * 20);
    let lock = r
        .lines
        .iter()
        .find(|l| l.site.contains("aspace-vm/src/region/bonsai_store.rs"))
        .unwrap_or_else(|| panic!("the region lock word is named: {:?}", r.lines));
    assert_eq!(lock.per_op, 1.0, "{r:?}");
    let other: Vec<_> = r
        .lines
        .iter()
        .filter(|l| {
            !l.site.contains("aspace-vm/src/page_table/")
                && !l.site.contains("aspace-vm/src/region/bonsai_store.rs")
        })
        .collect();
    assert!(other.is_empty(), "{other:?}");
}
