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
//! all) is NOT met because of them; see the README's conflict audit section. `faultlock`'s
//! faults all take its fault lock's read side, so on `soft-fault` every fault conflicts on that
//! lock word, named by its site in `designs/faultlock.rs` (the shared lock word the RCU designs
//! of issue 19 remove).
//!
//! `hybrid` (ASPLOS'12 §5.2) takes no space lock in a fault, but every fault takes the region
//! tree's lock shared around its lookup: `soft-fault`'s faults of disjoint pages conflict on
//! that one word (named by its site in `region/rcu_store.rs`), the contention the paper blames
//! for hybrid's decay at high core counts, and never on the space lock (`designs/hybrid.rs`).
//! `bonsai`'s soft faults share only the leaf table's line every design's fill shares; `pervma`
//! adds its region's lock word. Audits run one at a time (`conflicts::run` serialises them: the
//! recorder is process-wide).
#![cfg(feature = "conflicts")]

use aspace_bench::conflicts::{run, ConflictRow, Plan};

fn audit(workload: &str, design: &str, cores: usize) -> ConflictRow {
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
    // The space lock is an `UpgradableRwLock` (issue 22): its word is named at the lock's own
    // sites (the take and the release), once per operation in all.
    let lock: f64 = r
        .lines
        .iter()
        .filter(|l| l.site.contains("aspace-sync/src/upgradable_rwlock.rs"))
        .map(|l| l.per_op)
        .sum();
    assert!(lock > 0.0, "the lock word is named: {:?}", r.lines);
    assert!((lock - 1.0).abs() < 1e-9, "{r:?}");
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

#[test]
fn faultlock_soft_fault_conflicts_on_its_fault_lock_word_every_fault() {
    let r = audit("soft-fault", "faultlock", 4);
    assert_eq!(r.ops, 4 * 20);
    let lock = r
        .lines
        .iter()
        .find(|l| l.site.contains("aspace-vm/src/designs/faultlock.rs"))
        .unwrap_or_else(|| panic!("the fault lock word is named: {:?}", r.lines));
    assert_eq!(lock.per_op, 1.0, "{r:?}");
}

#[test]
fn hybrid_soft_faults_conflict_on_the_tree_lock_and_never_on_the_space_lock() {
    let r = audit("soft-fault", "hybrid", 4);
    let tree = r
        .lines
        .iter()
        .find(|l| l.site.contains("aspace-vm/src/region/rcu_store.rs"))
        .unwrap_or_else(|| panic!("the tree lock word is named: {:?}", r.lines));
    assert_eq!(tree.per_op, 1.0, "{r:?}");
    assert!(
        !r.lines
            .iter()
            .any(|l| l.site.contains("aspace-vm/src/designs/hybrid.rs")),
        "a fault touched the space lock: {:?}",
        r.lines
    );
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

/// `--pairs`: the lock word of `coarse` is met by the same lock sites of other cores, and the
/// plain audit reports no pairs.
#[test]
fn pairs_name_the_sites_of_other_cores_each_conflict_met() {
    let plan = Plan::new("local", &["coarse".to_string()], &[4], 24, 4)
        .unwrap()
        .with_pairs(true);
    let rows = run(&plan, |_| Ok(())).unwrap();
    let lock = "aspace-sync/src/upgradable_rwlock.rs";
    assert!(
        rows[0]
            .pairs
            .iter()
            .any(|p| p.mine.contains(lock) && p.other.contains(lock) && p.per_op > 0.0),
        "{:?}",
        rows[0].pairs
    );
    assert!(audit("local", "coarse", 4).pairs.is_empty());
}
