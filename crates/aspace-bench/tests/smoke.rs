//! Smoke test: every design of every workload runs for a few milliseconds on tiny populations
//! and completes operations. Checks behaviour only (ops > 0, extras present), never timings.

use aspace_bench::workloads;
use aspace_bench::Config;
use std::time::Duration;

fn tiny() -> Config {
    Config {
        // 100 ms: a loaded machine can preempt a thread for a whole 20 ms window (a ds-map
        // bonsai run once measured nothing that way); the test checks behaviour, not speed.
        duration: Duration::from_millis(100),
        update_pct: 100,
        intervals: 64,
        writers: 1,
        update_rate: None,
        mmap_pct: 10,
        metis_words: 10_000,
        idle_cores: 0,
    }
}

#[test]
fn every_design_of_every_workload_completes_operations_at_its_fewest_threads() {
    for w in workloads::all() {
        for &design in w.designs() {
            let s = w
                .run(design, w.min_threads(&tiny()), &tiny())
                .unwrap_or_else(|e| panic!("{} {design}: {e}", w.name()));
            assert!(s.ops_per_sec > 0.0, "{} {design} did nothing", w.name());
            assert!(s.extra.values().all(|v| v.is_finite()));
        }
    }
}

#[test]
fn rcu_update_with_one_updater_and_one_reader_reports_reader_retention() {
    let w = workloads::find("rcu-update").unwrap();
    for design in ["memb", "qsbr", "crossbeam-epoch", "mutex"] {
        let s = w.run(design, 2, &tiny()).unwrap();
        assert!(s.extra["updates_per_sec"] > 0.0, "{design}: no update");
        assert!(s.extra["reader_ops_per_sec"] > 0.0, "{design}: no read");
        assert!(s.extra.contains_key("reader_retained_pct"), "{design}");
        assert_eq!(
            s.extra.contains_key("peak_pending"),
            design == "memb" || design == "qsbr"
        );
    }
}

#[test]
fn rcu_update_mixed_mode_does_reads_and_updates_on_every_thread() {
    let w = workloads::find("rcu-update").unwrap();
    let config = Config {
        update_pct: 10,
        ..tiny()
    };
    for design in w.designs() {
        let s = w.run(design, 2, &config).unwrap();
        assert!(s.extra["updates_per_sec"] > 0.0, "{design}");
        assert!(s.extra["reader_ops_per_sec"] > 0.0, "{design}");
        assert!(!s.extra.contains_key("reader_retained_pct"), "{design}");
    }
}

#[test]
fn rcu_gp_with_a_reader_thread_records_latencies() {
    let w = workloads::find("rcu-gp").unwrap();
    for design in w.designs() {
        let s = w.run(design, 2, &tiny()).unwrap();
        assert_eq!(s.op_threads, 1);
        assert_eq!(s.extra["readers"], 1.0);
        assert!(s.extra["median_us"] <= s.extra["p99_us"], "{design}");
        assert!(s.extra["reader_ops_per_sec"] > 0.0, "{design}");
    }
}

#[test]
fn ds_workloads_on_two_threads_find_every_interval_and_cycle_their_populations() {
    for name in ["ds-query", "ds-alloc", "ds-map"] {
        let w = workloads::find(name).unwrap();
        assert_eq!(w.designs(), ["btree", "bonsai", "skiplist", "radix"]);
        for design in w.designs() {
            let s = w.run(design, 2, &tiny()).unwrap();
            assert!(s.ops_per_sec > 0.0, "{name} {design}");
            assert!(
                !s.extra.contains_key("misses"),
                "{name} {design}: query missed"
            );
            if name == "ds-alloc" {
                assert!(s.extra["resets"] >= 1.0, "{design}: 64 allocs never filled");
            }
            if name == "ds-map" {
                assert!(s.extra["repopulations"] >= 1.0, "{design}");
            }
        }
    }
}

#[test]
fn readers_writers_reports_reader_and_writer_rates_without_misses() {
    let w = workloads::find("readers-writers").unwrap();
    assert_eq!(
        w.designs(),
        ["btree", "bonsai", "skiplist", "radix", "crossbeam-skipmap"]
    );
    for design in w.designs() {
        let s = w.run(design, 2, &tiny()).unwrap();
        assert_eq!(s.op_threads, 1, "{design}: one reader");
        assert_eq!(s.extra["readers"], 1.0);
        assert_eq!(s.extra["writers"], 1.0);
        assert_eq!(s.extra["reader_ops_per_sec"], s.ops_per_sec, "{design}");
        assert!(s.ops_per_sec > 0.0, "{design}: no lookup");
        assert!(s.extra["writer_ops_per_sec"] > 0.0, "{design}: no write");
        assert!(!s.extra.contains_key("misses"), "{design}: a lookup missed");
    }
}

#[test]
fn readers_writers_refuses_runs_without_a_reader() {
    let w = workloads::find("readers-writers").unwrap();
    assert!(w.run("bonsai", 1, &tiny()).is_err());
    let none = Config {
        writers: 0,
        ..tiny()
    };
    let s = w.run("skiplist", 1, &none).unwrap();
    assert_eq!(s.extra["writer_ops_per_sec"], 0.0);
    assert!(s.ops_per_sec > 0.0);
}

#[test]
fn an_unknown_design_is_an_error_not_a_panic() {
    for w in workloads::all() {
        assert!(w.run("no-such-design", 1, &tiny()).is_err(), "{}", w.name());
    }
}
