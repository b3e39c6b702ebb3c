//! Loom model of page-table reclamation (`--cfg loom`), on the real `PageTables` and the real
//! `aspace_rcu` domain (whose grace periods run on loom atomics through its own shim).
//!
//! The race (Bonsai, ASPLOS'12 §4.2: a page directory freed under a concurrent walk): page `A`
//! is mapped to frame `X`. A walker, inside an RCU read section as the access path walks,
//! looks `A` up. Concurrently the writer munmaps `A` as a design does: `clear_range`, then
//! `free_tables` of the whole (now empty) space, which unlinks `A`'s level-3, level-2 and leaf
//! tables and retires them through the domain; `barrier()` lets the grace period pass and the
//! retire callback run; then the writer maps `B` to frame `Y`. `B` lies one root entry above
//! `A` (`B = A + 2^39`), so its indices at levels 3, 2 and 1 equal `A`'s, and the pools (LIFO,
//! one table per level) hand `B` exactly the three tables `A` used: a walker still inside `A`'s
//! old level-3 table would follow `B`'s entries down to `Y`.
//!
//! Checked: the walker answers `None` or `A -> X`, never `Y` (a translation from a reused table
//! for its old address), and `B` really reused the tables (no table allocated for it), so the
//! model cannot pass vacuously.
//!
//! The second model checks the per-core hand-back (`cache.rs`): the same race, but the RCU
//! callback (grace period, then the push onto the retiring core's returned list) runs on a
//! third thread, concurrently with the retiring core's next fill, which drains its returned
//! list (or, if the callback has not run yet, allocates; the callback may also land between
//! two of its installs). Checked: the walker never sees `Y`, at most one table per level was
//! allocated, and some execution reused returned tables (so the model is not vacuous).
//!
//! Mutations that must fail (tried): `TablePool::retire` calling `pool.recycle(batch, slot)` at
//! once instead of through `domain.call` (tables returned without a grace period), and
//! `PtCache::retire` pushing the table straight onto its own free list: in both, loom finds the
//! walker that loaded the root entry before the unlink and read `B`'s entries after the reuse.
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test
//! --release -p aspace-vm --lib loom`.

use super::PageTables;
use crate::frames::Frame;
use crate::types::{Prot, PAGE_SIZE};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use std::sync::Arc;

/// Root index 0, level-3/2 indices 0, leaf index 1.
const A: u64 = PAGE_SIZE;
/// Root index 1, every other index equal to `A`'s.
const B: u64 = A + (1 << 39);

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.max_branches = 20_000;
    b.check(f);
}

#[test]
fn loom_walker_never_returns_a_translation_from_a_reused_table() {
    model(|| {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let pt = Arc::new(PageTables::new(2));
        let mut cache = pt.cache(0);
        let (x, y) = (Frame::from_index(1), Frame::from_index(2));
        pt.fill(&mut cache, A, Prot::READ, || Some(x)).unwrap();
        assert_eq!(pt.table_count(), 4);
        let tables_allocated = pt.allocated_tables();
        let reader = domain.register();
        let walker = {
            let pt = Arc::clone(&pt);
            thread::spawn(move || {
                let _guard = reader.read();
                if let Some(pte) = pt.lookup(A) {
                    assert_eq!(
                        pte.frame(),
                        x,
                        "a walker returned a translation from a reused table for its old address"
                    );
                }
            })
        };
        // munmap(A): clear, free the tables of the empty space, let the grace period pass.
        let mut freed = Vec::new();
        pt.clear_range(A..A + PAGE_SIZE, &mut freed);
        assert_eq!(freed, vec![x]);
        pt.free_tables(&mut cache, 0..1 << 47, &domain);
        assert_eq!(pt.table_count(), 1);
        domain.barrier();
        // mmap(B) + fault: reuses A's three tables.
        pt.fill(&mut cache, B, Prot::READ_WRITE, || Some(y))
            .unwrap();
        assert_eq!(
            pt.allocated_tables(),
            tables_allocated,
            "B's tables came from the pool (A's old ones)"
        );
        walker.join().unwrap();
        assert_eq!(pt.lookup(A), None);
        assert_eq!(pt.lookup(B).map(|p| p.frame()), Some(y));
    });
}

/// Executions of the second model in which the fill reused a returned table.
static REUSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn loom_tables_return_to_the_retiring_core_only_after_the_grace_period() {
    model(|| {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let pt = Arc::new(PageTables::new(2));
        let mut cache = pt.cache(0);
        let (x, y) = (Frame::from_index(1), Frame::from_index(2));
        pt.fill(&mut cache, A, Prot::READ, || Some(x)).unwrap();
        let tables_allocated = pt.allocated_tables();
        let reader = domain.register();
        let walker = {
            let pt = Arc::clone(&pt);
            thread::spawn(move || {
                let _guard = reader.read();
                if let Some(pte) = pt.lookup(A) {
                    assert_eq!(
                        pte.frame(),
                        x,
                        "a walker returned a translation from a reused table for its old address"
                    );
                }
            })
        };
        let mut freed = Vec::new();
        pt.clear_range(A..A + PAGE_SIZE, &mut freed);
        pt.free_tables(&mut cache, 0..1 << 47, &domain);
        // The reclaimer: waits for the grace period and runs the callback that returns the
        // tables to core 0's slot, concurrently with core 0's next fill.
        let returned = Arc::new(AtomicBool::new(false));
        let reclaimer = {
            let (domain, returned) = (domain.clone(), Arc::clone(&returned));
            thread::spawn(move || {
                domain.barrier();
                // Release: pairs with the Acquire load after the join (which orders it too):
                // the barrier, and with it the callback, finished before the flag.
                returned.store(true, Ordering::Release);
            })
        };
        pt.fill(&mut cache, B, Prot::READ_WRITE, || Some(y))
            .unwrap();
        let fresh = pt.allocated_tables() - tables_allocated;
        assert!(fresh <= 3, "at most one table per level was allocated");
        if fresh < 3 {
            REUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        walker.join().unwrap();
        reclaimer.join().unwrap();
        assert!(returned.load(Ordering::Acquire));
        assert_eq!(pt.lookup(A), None);
        assert_eq!(pt.lookup(B).map(|p| p.frame()), Some(y));
    });
    assert!(
        REUSED.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "some execution reused the returned tables (the model is not vacuous)"
    );
}

/// Executions of the probe model in which a core saw the other's leaf still linked.
static SAW_OTHER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The probe of `table_at` (`designs/windowed.rs`, "Page tables past separators"): two cores
/// each free the last leaf of their own part of one level-2 table (leaves 0 and 64: two words
/// of its bitmap) and then probe that level-2 table; at least one of them must see it
/// `Empty`, or neither frees it and it stays linked with nothing under it for good (the 64-core
/// churn of `tests/conformance/stress.rs` then ends above its baseline).
///
/// Mutation (tried): without the `SeqCst` fence at the start of `table_at`, loom finds the
/// store-buffering execution (each core's probe reads the other's bitmap word from before its
/// free) and fails with "neither core saw the level-2 table empty after both freed their
/// leaves: it stays linked with nothing under it".
#[test]
fn loom_two_cores_freeing_a_tables_last_children_one_sees_it_empty() {
    use super::TableAt;
    const LEAF: u64 = 2 << 20;
    const PA: u64 = PAGE_SIZE;
    const PB: u64 = 64 * LEAF + PAGE_SIZE;
    model(|| {
        let domain: aspace_rcu::Domain = aspace_rcu::Domain::new();
        let pt = Arc::new(PageTables::new(2));
        let mut c0 = pt.cache(0);
        let c1 = pt.cache(1);
        pt.fill(&mut c0, PA, Prot::READ, || Some(Frame::from_index(1)))
            .unwrap();
        pt.fill(&mut c0, PB, Prot::READ, || Some(Frame::from_index(2)))
            .unwrap();
        let free_and_probe = |pt: &PageTables, cache: &mut super::PtCache, page: u64| {
            let leaf = page & !(LEAF - 1);
            let mut freed = Vec::new();
            pt.clear_range(page..page + PAGE_SIZE, &mut freed);
            pt.free_tables(cache, leaf..leaf + LEAF, &domain);
            pt.table_at(&(0..1 << 30))
        };
        // Each core retires through a domain of its own: under loom a table retired is handed
        // to its domain at once (`RETIRE_BATCH`), and one shared domain's queue would order the
        // two cores' frees (real batches are 64 tables, so nothing orders them in general).
        let other = {
            let (pt, domain) = (Arc::clone(&pt), {
                let d: aspace_rcu::Domain = aspace_rcu::Domain::new();
                d
            });
            thread::spawn(move || {
                let mut c1 = c1;
                let leaf = PB & !(LEAF - 1);
                let mut freed = Vec::new();
                pt.clear_range(PB..PB + PAGE_SIZE, &mut freed);
                pt.free_tables(&mut c1, leaf..leaf + LEAF, &domain);
                pt.table_at(&(0..1 << 30))
            })
        };
        let mine = free_and_probe(&pt, &mut c0, PA);
        let theirs = other.join().unwrap();
        if mine == TableAt::Busy || theirs == TableAt::Busy {
            SAW_OTHER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        assert!(
            mine == TableAt::Empty || theirs == TableAt::Empty,
            "neither core saw the level-2 table empty after both freed their leaves: it stays \
             linked with nothing under it"
        );
    });
    assert!(
        SAW_OTHER.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "some execution had a core see the other's leaf still linked (not vacuous)"
    );
}
