//! Smoke tests of the VM workloads (`alloc`, `alloc-fault-modify`, `local`, `pipeline`, `global`,
//! `fault-load` and its load levels, `soft-fault`, `metis`, `metis-64k`): each runs briefly for every design (`linux` and every `aspace_vm` design) at 1
//! and 2 threads and completes operations, and each reports the extras its doc promises. They
//! check behaviour only, never timings.
//!
//! The `linux` design maps hinted pages of this very process at fixed places (anchors with
//! `MAP_FIXED_NOREPLACE`), so two VM runs must not overlap: every test takes [`LOCK`].

use aspace_bench::workloads::{self, vm};
use aspace_bench::Config;
use std::sync::Mutex;
use std::time::Duration;

static LOCK: Mutex<()> = Mutex::new(());

const VM_WORKLOADS: [&str; 12] = [
    "alloc",
    "alloc-fault-modify",
    "local",
    "pipeline",
    "global",
    "fault-load",
    "fault-load-0pct",
    "fault-load-25pct",
    "fault-load-50pct",
    "soft-fault",
    "metis",
    "metis-64k",
];

/// 100 ms: `alloc` on `linux` with 2 threads spends up to ~30 ms in one excluded reset (8,192
/// interleaved munmaps); in a 20 ms window a thread's reset could cover the whole window and
/// leave it no measured time (rate 0), which made this test flaky under load.
fn tiny() -> Config {
    Config {
        duration: Duration::from_millis(100),
        ..Config::default()
    }
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The hinted mappings (start, end) of this process in the VM workloads' area.
fn hinted_mappings() -> Vec<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| {
            let range = l.split_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .filter(|&(a, _)| (vm::HINT_BASE..vm::HINT_BASE + (4 << 40)).contains(&a))
        .collect()
}

#[test]
fn every_vm_workload_runs_every_design_at_one_and_two_threads() {
    let _g = serial();
    for name in VM_WORKLOADS {
        let w = workloads::find(name).unwrap();
        let expected = if name == "alloc" {
            vm::designs_with_breakdown()
        } else {
            vm::designs()
        };
        assert_eq!(w.designs(), expected, "{name}");
        assert_eq!(w.baseline().unwrap().design, "linux");
        for &design in w.designs() {
            for threads in [1, 2] {
                let s = w
                    .run(design, threads, &tiny())
                    .unwrap_or_else(|e| panic!("{name} {design} {threads}T: {e}"));
                assert!(
                    s.ops_per_sec > 0.0,
                    "{name} {design} {threads}T did nothing"
                );
                assert!(
                    s.extra.values().all(|v| v.is_finite()),
                    "{name} {design} {threads}T: {:?}",
                    s.extra
                );
            }
        }
    }
}

#[test]
fn linux_runs_leave_no_mapping_behind_in_the_hinted_area() {
    let _g = serial();
    assert_eq!(hinted_mappings(), [], "before");
    for name in VM_WORKLOADS {
        let w = workloads::find(name).unwrap();
        for threads in [1, 2] {
            w.run("linux", threads, &tiny()).unwrap();
            assert_eq!(hinted_mappings(), [], "{name} {threads}T left mappings");
        }
    }
}

#[test]
fn local_reports_the_floor_and_the_ratio_to_it() {
    let _g = serial();
    let w = workloads::find("local").unwrap();
    for design in w.designs() {
        let s = w.run(design, 1, &tiny()).unwrap();
        let floor = s.extra["floor_ns"];
        assert!(floor > 0.0, "{design}");
        let ns_per_iter = 1e9 / s.ops_per_sec;
        let ratio = s.extra["local_over_floor"];
        assert!(
            (ratio - ns_per_iter / floor).abs() <= 1e-6 * ratio,
            "{design}"
        );
        assert!(!s.extra.contains_key("hint_missed"), "{design}: hint taken");
    }
}

#[test]
fn alloc_fault_modify_faults_every_page_once_per_iteration() {
    let _g = serial();
    let w = workloads::find("alloc-fault-modify").unwrap();
    for design in w.designs() {
        let s = w.run(design, 1, &tiny()).unwrap();
        let f = s.extra["faults_per_iter"];
        // 512 pages; `linux` counts the process's minor faults (thread start-up adds a few).
        assert!(
            (512.0..640.0).contains(&f),
            "{design}: {f} faults/iteration"
        );
        assert!(s.extra["ns_per_fault"] > 0.0);
    }
}

#[test]
fn alloc_resets_within_its_budget_and_excludes_the_reset_time() {
    let _g = serial();
    let w = workloads::find("alloc").unwrap();
    let config = Config {
        duration: Duration::from_millis(100),
        ..Config::default()
    };
    for design in w.designs() {
        let s = w.run(design, 2, &config).unwrap();
        assert!(s.extra.contains_key("resets"), "{design}");
        assert!(s.extra["excluded_pct"] >= 0.0 && s.extra["excluded_pct"] <= 100.0);
    }
}

#[test]
fn pipeline_and_global_count_page_writes_across_threads() {
    let _g = serial();
    for design in vm::designs() {
        let p = workloads::find("pipeline")
            .unwrap()
            .run(design, 2, &tiny())
            .unwrap();
        assert_eq!(p.extra["touches_per_sec"], 2.0 * p.ops_per_sec, "{design}");
        let g = workloads::find("global")
            .unwrap()
            .run(design, 2, &tiny())
            .unwrap();
        assert!(g.extra["rounds"] >= 1.0, "{design}: no round completed");
    }
}

#[test]
fn fault_load_counts_only_the_faulting_threads_and_paces_the_mapper() {
    let _g = serial();
    let w = workloads::find("fault-load").unwrap();
    let config = Config {
        duration: Duration::from_millis(50),
        mmap_pct: 50,
        ..Config::default()
    };
    for design in w.designs() {
        let alone = w.run(design, 1, &config).unwrap();
        assert_eq!(alone.op_threads, 1);
        assert!(alone.ops_per_sec > 0.0, "{design}: the lone thread faults");
        assert!(alone.extra["mapper_pairs_per_sec"] > 0.0, "{design}");
        let two = w.run(design, 2, &config).unwrap();
        assert_eq!(two.op_threads, 1, "{design}: the mapper is not counted");
        assert!(two.extra["mapper_busy_pct"] > 0.0, "{design}");
        assert_eq!(two.extra["mmap_pct"], 50.0);
    }
    let none = Config {
        mmap_pct: 0,
        ..config
    };
    let s = w.run("linux", 2, &none).unwrap();
    assert_eq!(s.extra["mapper_pairs_per_sec"], 0.0);
    assert!(w
        .run(
            "linux",
            1,
            &Config {
                mmap_pct: 101,
                ..none
            }
        )
        .is_err());
}

/// The load levels run at their own share whatever `--mmap-pct` says; the 100% level needs a
/// faulter besides the mapper and refuses one thread.
#[test]
fn fault_load_levels_run_at_their_own_share_and_the_full_load_needs_two_threads() {
    let _g = serial();
    let config = Config {
        duration: Duration::from_millis(50),
        mmap_pct: 10,
        ..Config::default()
    };
    for (name, pct) in [("fault-load-0pct", 0.0), ("fault-load-100pct", 100.0)] {
        let w = workloads::find(name).unwrap();
        for &design in w.designs() {
            let s = w.run(design, 2, &config).unwrap();
            assert_eq!(s.extra["mmap_pct"], pct, "{name} {design}");
            assert_eq!(
                s.op_threads, 1,
                "{name} {design}: the mapper is not counted"
            );
            assert!(s.ops_per_sec > 0.0, "{name} {design}: the faulter faults");
        }
    }
    let full = workloads::find("fault-load-100pct").unwrap();
    assert_eq!(full.min_threads(&config), 2);
    assert!(full.run("faultlock", 1, &config).is_err());
}

/// `soft-fault`: every thread counts, and rounds complete (each ends with the untimed
/// `DONTNEED`, so pages fault again in the next round).
#[test]
fn soft_fault_counts_every_thread_and_completes_rounds() {
    let _g = serial();
    let w = workloads::find("soft-fault").unwrap();
    for &design in w.designs() {
        for threads in [1, 2] {
            let s = w.run(design, threads, &tiny()).unwrap();
            assert_eq!(s.op_threads, threads, "{design}");
            assert!(
                s.extra["rounds"] >= 1.0,
                "{design} {threads}T: no round completed"
            );
        }
    }
}

#[test]
fn metis_reports_its_index_and_per_job_figures_on_every_design() {
    let _g = serial();
    let config = Config {
        duration: Duration::from_millis(20),
        metis_words: 30_000,
        ..Config::default()
    };
    for name in ["metis", "metis-64k"] {
        let w = workloads::find(name).unwrap();
        for design in w.designs() {
            let s = w.run(design, 2, &config).unwrap();
            assert_eq!(s.op_threads, 1, "{name} {design}: jobs are counted once");
            assert_eq!(s.extra["index_positions"], 30_000.0);
            for k in [
                "index_words",
                "index_bytes",
                "segments_per_job",
                "faults_per_job",
            ] {
                assert!(s.extra[k] > 0.0, "{name} {design}: {k}");
            }
        }
    }
}
