//! The `aspace` binary as a user runs it: refusals exit non-zero with a clear message, `list`
//! names every workload, and `--json` prints nothing but one JSON object per measurement.

use std::process::Command;

fn aspace(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_aspace"))
        .args(args)
        .output()
        .expect("the aspace binary runs")
}

#[test]
fn unknown_workload_exits_non_zero_and_names_the_known_ones() {
    let out = aspace(&["bench", "no-such-workload", "--duration-ms", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown workload `no-such-workload`"), "{err}");
    assert!(err.contains("rcu-read"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn unknown_design_exits_non_zero_and_names_the_designs() {
    let out = aspace(&["bench", "rcu-read", "--designs", "none,spinlock"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no design `spinlock`"), "{err}");
    assert!(err.contains("crossbeam-epoch"), "{err}");
}

#[test]
fn list_names_every_workload_with_its_designs() {
    let out = aspace(&["list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for w in [
        "rcu-read",
        "rcu-update",
        "rcu-gp",
        "ds-query",
        "ds-alloc",
        "ds-map",
        "readers-writers",
        "refcount",
        "interp",
    ] {
        assert!(text.contains(w), "{w} missing from:\n{text}");
    }
    assert!(text.contains("btree (baseline)"));
    assert!(text.contains("crossbeam-skipmap"), "{text}");
    assert!(text.contains("skiplist"), "{text}");
}

#[test]
fn readers_writers_refuses_as_many_writers_as_threads() {
    for args in [
        &["--threads", "1"][..],
        &["--threads", "1,2", "--writers", "1"],
        &["--threads", "2", "--writers", "2"],
    ] {
        let mut all = vec!["bench", "readers-writers", "--duration-ms", "1"];
        all.extend_from_slice(args);
        let out = aspace(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--writers"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn readers_writers_with_two_writers_reports_both_rates_in_json() {
    let out = aspace(&[
        "bench",
        "readers-writers",
        "--designs",
        "skiplist",
        "--threads",
        "3",
        "--writers",
        "2",
        "--duration-ms",
        "10",
        "--repeat",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["threads"], 3);
    let extra = &v["extra"];
    assert_eq!(extra["writers"], 2.0, "{v}");
    assert_eq!(extra["readers"], 1.0, "{v}");
    assert!(extra["writer_ops_per_sec"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(extra["reader_ops_per_sec"], v["ops_per_sec"], "{v}");
}

#[test]
fn json_output_is_exactly_one_parseable_object_per_measurement() {
    let out = aspace(&[
        "bench",
        "rcu-read",
        "--designs",
        "none,mutex",
        "--threads",
        "1,2",
        "--duration-ms",
        "5",
        "--repeat",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["workload"], "rcu-read");
        assert_eq!(v["repeat"], 2);
        assert!(v["ops_per_sec"].as_f64().unwrap() > 0.0);
        assert!(v["min_ops_per_sec"].as_f64() <= v["max_ops_per_sec"].as_f64());
        assert!(v["ns_per_op"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn table_output_shows_ratios_to_the_baseline_and_scaling() {
    let out = aspace(&[
        "bench",
        "rcu-read",
        "--designs",
        "none,rwlock",
        "--threads",
        "1,2",
        "--duration-ms",
        "5",
        "--repeat",
        "1",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("== rcu-read"), "{text}");
    assert!(text.contains("% of none"), "{text}");
    assert!(text.contains("vs 1T"), "{text}");
}

/// Runs `aspace bench <args>` and checks it was refused the way a user should see it: exit
/// status 2, an `error:` line on stderr naming `option`, and no panic or abort.
fn assert_refused(args: &[&str], option: &str) {
    let out = aspace(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    assert!(
        err.contains(option),
        "{args:?} does not name {option}: {err}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}");
}

#[test]
fn out_of_range_numbers_are_refused_with_status_2_never_a_panic() {
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "local", "--threads", "100000"], "--threads"),
        (&["bench", "rcu-read", "--threads", "1,1025"], "--threads"),
        (&["bench", "fault-load", "--threads", "65"], "--threads"),
        (&["bench", "rcu-read", "--threads", "0"], "--threads"),
        (
            &["bench", "rcu-read", "--duration-ms", "60001"],
            "--duration-ms",
        ),
        (
            &["bench", "rcu-read", "--duration-ms", "0"],
            "--duration-ms",
        ),
        (&["bench", "rcu-read", "--repeat", "1001"], "--repeat"),
        (&["bench", "rcu-read", "--repeat", "0"], "--repeat"),
        (
            &["bench", "rcu-update", "--update-pct", "101"],
            "--update-pct",
        ),
        (
            &["bench", "rcu-update", "--update-rate", "0"],
            "--update-rate",
        ),
        (&["bench", "fault-load", "--mmap-pct", "101"], "--mmap-pct"),
        (&["bench", "ds-map", "--intervals", "0"], "--intervals"),
        (&["bench", "metis", "--metis-words", "0"], "--metis-words"),
        (
            &["bench", "metis-64k", "--metis-words", "16777217"],
            "--metis-words",
        ),
        (
            &[
                "bench",
                "metis",
                "--threads",
                "64",
                "--metis-words",
                "16777216",
            ],
            "--metis-words",
        ),
        (
            &["bench", "ds-map", "--intervals", "1000000000000"],
            "--intervals",
        ),
        (
            &[
                "bench",
                "readers-writers",
                "--writers",
                "18446744073709551615",
            ],
            "--writers",
        ),
        (
            &["bench", "readers-writers", "--writers", "1024"],
            "--writers",
        ),
    ];
    for (args, option) in cases {
        assert_refused(args, option);
    }
}

/// Every numeric option, with a value that is not an unsigned decimal integer: negative (which
/// clap would otherwise take for a flag and answer with a "use '-- -5'" tip), a fraction, a
/// word, empty, too large for the option's type, and a bad item inside a list. Each gets one
/// line that names the option and what was typed, and status 2.
#[test]
fn negative_and_malformed_numbers_get_one_line_naming_the_option() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["bench", "rcu-read", "--duration-ms", "-5"],
            "error: --duration-ms must be a positive integer, got -5",
        ),
        (
            &["bench", "rcu-read", "--duration-ms", "1.5"],
            "error: --duration-ms must be a positive integer, got 1.5",
        ),
        (
            &["bench", "rcu-read", "--duration-ms", "ten"],
            "error: --duration-ms must be a positive integer, got ten",
        ),
        (
            &["bench", "rcu-read", "--duration-ms", ""],
            "error: --duration-ms must be a positive integer, got nothing",
        ),
        (
            &["bench", "rcu-read", "--duration-ms", "18446744073709551616"],
            "error: --duration-ms must be a positive integer, got 18446744073709551616 (too large)",
        ),
        (
            &["bench", "rcu-read", "--repeat", "-1"],
            "error: --repeat must be a positive integer, got -1",
        ),
        (
            &["bench", "rcu-read", "--threads", "-2"],
            "error: --threads must be a positive integer, got -2",
        ),
        (
            &["bench", "rcu-read", "--threads", "-1,2"],
            "error: --threads must be a positive integer, got -1",
        ),
        (
            &["bench", "rcu-read", "--threads", "1,x"],
            "error: --threads must be a positive integer, got x",
        ),
        (
            &["bench", "rcu-update", "--update-pct", "-10"],
            "error: --update-pct must be a non-negative integer, got -10",
        ),
        (
            &["bench", "rcu-update", "--update-rate", "-2400000"],
            "error: --update-rate must be a positive integer, got -2400000",
        ),
        (
            &["bench", "ds-map", "--intervals", "-1"],
            "error: --intervals must be a positive integer, got -1",
        ),
        (
            &["bench", "readers-writers", "--writers", "-1"],
            "error: --writers must be a non-negative integer, got -1",
        ),
        (
            &["bench", "fault-load", "--mmap-pct", "-10"],
            "error: --mmap-pct must be a non-negative integer, got -10",
        ),
        (
            &["bench", "fault-load", "--mmap-pct", "4294967296"],
            "error: --mmap-pct must be a non-negative integer, got 4294967296 (too large)",
        ),
        (
            &["bench", "metis", "--metis-words", "-1"],
            "error: --metis-words must be a positive integer, got -1",
        ),
        (
            &["conflicts", "local", "--cores", "2,-4"],
            "error: --cores must be a positive integer, got -4",
        ),
        (
            &["conflicts", "local", "--rounds", "-40"],
            "error: --rounds must be a positive integer, got -40",
        ),
        (
            &["conflicts", "local", "--warmup", "-8"],
            "error: --warmup must be a non-negative integer, got -8",
        ),
        (
            &["--threads", "-1"],
            "error: --threads must be a positive integer, got -1",
        ),
    ];
    for (args, line) in cases {
        let out = aspace(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end(), *line, "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("tip:"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_negative_thread_count_is_refused_by_the_default_suite_before_anything_is_written() {
    let cwd = scratch("negative");
    let out = Command::new(env!("CARGO_BIN_EXE_aspace"))
        .args(["--threads", "-2"])
        .current_dir(&cwd)
        .output()
        .expect("the aspace binary runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(!cwd.join("results").exists());
    std::fs::remove_dir_all(&cwd).unwrap();
}

#[test]
fn help_states_the_suites_measured_duration_and_quick() {
    let out = aspace(&["--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--quick"), "{text}");
    // The help and the README state the same measured duration (one figure, two places).
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let at = flat
        .find(" s measured")
        .expect("help states a measured duration");
    let start = flat[..at]
        .rfind("about ")
        .expect("help says 'about N minutes: ...'");
    let about = &flat[start..at + " s measured".len()];
    let minutes = about.split(':').next().unwrap();
    let measured = about.rsplit(": ").next().unwrap();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md readable");
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(readme.contains(minutes), "README lacks {minutes:?}");
    assert!(readme.contains(measured), "README lacks {measured:?}");
}

#[test]
fn bench_help_states_the_limits() {
    let out = aspace(&["bench", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for limit in ["1..=1024", "1..=60000", "1..=1000"] {
        assert!(text.contains(limit), "{limit} missing from:\n{text}");
    }
}

#[test]
fn help_says_what_no_command_does_and_where_results_go() {
    let out = aspace(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "With no command, `aspace` runs the default suite",
        "results/<UTC timestamp>/ relative to the current directory",
        "results.csv",
        "results.json",
        "SVG plot",
        "index.html",
        "--quick",
        "--only",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

/// A fresh empty directory under the system temp dir for one test.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("aspace-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn quick_suite_prints_a_line_per_point_and_writes_the_csv() {
    let cwd = scratch("quick");
    let out = Command::new(env!("CARGO_BIN_EXE_aspace"))
        .args(["--quick", "--threads", "1", "--only", "rcu-read,ds-map"])
        .current_dir(&cwd)
        .output()
        .expect("the aspace binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // stdout is a pipe here: one progress line per measured point, before the table.
    let progress: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" 1T: ") && l.contains(" ops/s ["))
        .collect();
    let expected = ["rcu-read", "ds-map"].map(|w| {
        aspace_bench::workloads::find(w)
            .unwrap()
            .designs()
            .iter()
            .map(|d| format!("{w} {d} 1T: "))
            .collect::<Vec<_>>()
    });
    let expected: Vec<String> = expected.concat();
    assert_eq!(progress.len(), expected.len(), "{stdout}");
    for (line, prefix) in progress.iter().zip(&expected) {
        assert!(line.starts_with(prefix.as_str()), "{line} vs {prefix}");
    }
    // One timestamped directory under ./results with one CSV row per point.
    let dirs: Vec<_> = std::fs::read_dir(cwd.join("results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = &dirs[0];
    assert!(stdout.contains("writing results to results/"), "{stdout}");
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), expected.len(), "{csv}");
    for (row, prefix) in rows.iter().zip(&expected) {
        let (w, rest) = prefix.split_once(' ').unwrap();
        let d = rest.split_once(' ').unwrap().0;
        assert!(row.starts_with(&format!("{w},{d},1,")), "{row} vs {prefix}");
        // --quick: 100 ms x 1 repeat (columns repeat and duration_ms).
        let fields: Vec<&str> = row.split(',').collect();
        assert_eq!((fields[5], fields[8]), ("1", "100"), "{row}");
    }
    // The end: the headline table, then where the page is.
    let headline = stdout.find("== headline ==").expect("headline printed");
    assert!(stdout[headline..].contains("verdict (median)"), "{stdout}");
    let last = stdout.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with("open results/") && last.ends_with("/index.html"),
        "{stdout}"
    );
    for f in ["results.json", "rcu-read.svg", "ds-map.svg", "index.html"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    std::fs::remove_dir_all(&cwd).unwrap();
}

#[test]
fn bad_suite_options_are_refused_before_anything_is_written() {
    let cwd = scratch("refused");
    for (args, option) in [
        (&["--threads", "100000"][..], "--threads"),
        (&["--threads", "0"], "--threads"),
        (&["--only", "no-such-workload"], "no-such-workload"),
        (
            &["--only", "readers-writers", "--threads", "1"],
            "--threads",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_aspace"))
            .args(args)
            .current_dir(&cwd)
            .output()
            .expect("the aspace binary runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(option), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert!(!cwd.join("results").exists());
    std::fs::remove_dir_all(&cwd).unwrap();
}

#[test]
fn report_on_a_missing_directory_exits_2_with_one_line() {
    let out = aspace(&["report", "/nonexistent/aspace-results-dir"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not a usable results directory: /nonexistent/aspace-results-dir"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn report_renders_a_results_directory_again() {
    let dir = scratch("report");
    std::fs::write(
        dir.join("results.json"),
        r#"[{"workload":"local","design":"linux","threads":1,"ops_per_sec":1e5,
             "ns_per_op":1e4,"repeat":1,"min_ops_per_sec":1e5,"max_ops_per_sec":1e5,
             "duration_ms":100},
            {"workload":"local","design":"coarse","threads":1,"ops_per_sec":4e6,
             "ns_per_op":250,"repeat":1,"min_ops_per_sec":4e6,"max_ops_per_sec":4e6,
             "duration_ms":100}]"#,
    )
    .unwrap();
    let out = aspace(&["report", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(
        html.contains("40x the baseline <code>linux</code>"),
        "{html}"
    );
    for f in ["local.svg", "headline.svg", "headline.md"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    // Invalid JSON is refused the same way.
    std::fs::write(dir.join("results.json"), "[{").unwrap();
    let out = aspace(&["report", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(not(feature = "conflicts"))]
#[test]
fn conflicts_without_the_instrumented_build_says_how_to_run_it() {
    let out = aspace(&["conflicts", "local", "--cores", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cargo run --release --features conflicts -- conflicts local"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn conflicts_refuses_linux_and_bad_core_counts_with_status_2() {
    for (args, says) in [
        (
            &["conflicts", "local", "--designs", "linux"][..],
            "cannot be audited",
        ),
        (
            &["conflicts", "local", "--cores", "0"],
            "--cores must be in 1..=256",
        ),
        (
            &["conflicts", "local", "--cores", "257"],
            "--cores must be in 1..=256",
        ),
        (&["conflicts", "rcu-read"], "unknown workload `rcu-read`"),
        (
            &["conflicts", "local", "--rounds", "4", "--warmup", "4"],
            "--warmup",
        ),
    ] {
        let out = aspace(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn local_refuses_too_many_idle_cores_and_reports_the_idle_ones() {
    let out = aspace(&["bench", "local", "--idle-cores", "33", "--duration-ms", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--idle-cores"));
    assert!(out.stdout.is_empty());
    let out = aspace(&[
        "bench",
        "local",
        "--designs",
        "coarse",
        "--threads",
        "1",
        "--idle-cores",
        "1",
        "--duration-ms",
        "10",
        "--repeat",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"idle_cores\":1.0"), "{text}");
}
