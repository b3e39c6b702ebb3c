//! The `aspace` command line; everything else lives in the `aspace_bench` library.
//!
//! - `aspace [--threads 1,2] [--quick] [--only w1,w2]`: the default suite (every workload and
//!   design at 1 and 2 threads, a progress bar on a terminal or one line per point otherwise,
//!   results directory under `results/` updated after every point, summary table);
//! - `aspace bench <workload> [--designs a,b] [--threads 1,2] [--duration-ms N] [--repeat N]
//!   [--json] [--update-pct P] [--intervals N] [--writers K] [--mmap-pct P] [--metis-words N] [--idle-cores N]`:
//!   one workload;
//!   `--json` prints exactly one JSON object per measurement per line on stdout and nothing else
//!   (the progress bar, if any, is on stderr and hidden with `--json`);
//! - `aspace list`: workloads, what each thread does, and their designs;
//! - `aspace report <DIR>`: renders a results directory's plots, `headline.md` and `index.html`
//!   again from its `results.json` (+ `run.json`, `conflicts.json` when present).
//! - `aspace conflicts <workload> [--designs a,b] [--cores 2,4,16,64,128] [--rounds R] [--pairs]
//!   [--warmup W] [--json] [--out DIR]`: the cache-line conflict audit (see
//!   `aspace_bench::conflicts`); it needs the instrumented build (`cargo run --release
//!   --features conflicts -- conflicts ...`) and otherwise exits 2 with that one line.
//!
//! The process allocator is mimalloc (see [`GLOBAL`]), as the papers' evaluations avoid glibc
//! malloc as a bottleneck.
//!
//! Unknown workloads or designs and out-of-range numbers are refused before anything runs, with
//! a message naming the valid choices, and exit status 2.

use aspace_bench::harness::{run_points, Point};
use aspace_bench::limits::{
    check_duration_ms, check_repeat, check_threads, non_negative, positive, NumberError,
    MAX_THREADS,
};
use aspace_bench::report::{progress_line, table};
use aspace_bench::suite::SuiteOptions;
use aspace_bench::workloads::{self, resolve_designs};
use aspace_bench::{suite, BenchError, Config};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, Parser, Subcommand};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

/// The binary's allocator is mimalloc, not glibc malloc. The SOSP'25 evaluation (§7.1) used
/// jemalloc "to prevent malloc() from becoming the bottleneck"; with glibc the `ds-*` RCU maps
/// spend most of their time in `_int_malloc`/`malloc_consolidate` (nodes are allocated by the
/// worker and freed by the RCU reclaimer thread) and runs differ by 2-3x from process to process.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Benchmarks of scalable concurrent address-space building blocks.
#[derive(Parser, Debug)]
#[command(
    name = "aspace",
    version,
    about,
    args_conflicts_with_subcommands = true,
    after_help = "With no command, `aspace` runs the default suite: every workload and design \
                  (see `aspace list`) at 1 and 2 threads, 500 ms x 3 repeats per point (about \
                  9 minutes: 8 min 45 s measured on a 2-core KVM guest; `--quick` for a smoke \
                  run of 100 ms x 1 repeat). It prints one line per measured point when its output is not a \
                  terminal (a progress bar otherwise), then a summary table, and writes \
                  results/<UTC timestamp>/ relative to the current directory: results.csv and \
                  results.json (updated after every point, so an interrupted run keeps what it \
                  measured), run.json (machine, commit, settings), one SVG plot per workload, \
                  headline.svg, headline.md and index.html (open it in a browser; `aspace \
                  report DIR` renders it again)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Default suite: comma-separated thread counts, each 1..=1024 (default: 1,2).
    #[arg(long, value_delimiter = ',', value_parser = positive::<usize>, allow_hyphen_values = true)]
    threads: Vec<usize>,
    /// Default suite: 100 ms x 1 repeat per point instead of 500 ms x 3 (a smoke run, not a
    /// measurement).
    #[arg(long)]
    quick: bool,
    /// Default suite: run only these comma-separated workloads (see `aspace list`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one workload.
    Bench(BenchArgs),
    /// List workloads and their designs.
    List,
    /// Render a results directory again (plots, headline.md, index.html) from its
    /// results.json, run.json and conflicts.json.
    Report {
        /// The results directory (`results/<timestamp>`).
        dir: std::path::PathBuf,
    },
    /// Cache-line conflict audit of a VM workload (needs `--features conflicts`).
    Conflicts(ConflictsArgs),
    /// Put the headline verdicts of several results directories side by side and say whether
    /// the runs agree on every winner (Markdown on stdout).
    Agree {
        /// Two or more results directories (`results/<timestamp>`).
        #[arg(required = true, num_args = 2..)]
        dirs: Vec<std::path::PathBuf>,
    },
}

#[derive(Args, Debug)]
struct ConflictsArgs {
    /// VM workload: local, alloc, alloc-fault-modify, pipeline, global, fault-load, soft-fault.
    workload: String,
    /// Comma-separated engine designs (default: all of them; `linux` cannot be audited).
    #[arg(long, value_delimiter = ',')]
    designs: Vec<String>,
    /// Comma-separated core (thread) counts, each 1..=256.
    #[arg(long, value_delimiter = ',', default_value = "2,4,16,64,128", value_parser = positive::<usize>, allow_hyphen_values = true)]
    cores: Vec<usize>,
    /// Rounds per point (one operation per core per round).
    #[arg(long, default_value_t = aspace_bench::conflicts::DEFAULT_ROUNDS, value_parser = positive::<u64>, allow_hyphen_values = true)]
    rounds: u64,
    /// Warm-up rounds not counted (steady state).
    #[arg(long, default_value_t = aspace_bench::conflicts::DEFAULT_WARMUP, value_parser = non_negative::<u64>, allow_hyphen_values = true)]
    warmup: u64,
    /// Print one JSON object per design and core count per line, nothing else.
    #[arg(long)]
    json: bool,
    /// Also report which other core's site each conflicting site met (the pairs behind the
    /// conflicts, most frequent first).
    #[arg(long)]
    pairs: bool,
    /// Also merge the rows into DIR/conflicts.json (same workload/design/cores replaced).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Workload name (see `aspace list`).
    workload: String,
    /// Comma-separated designs (default: all of the workload's designs).
    #[arg(long, value_delimiter = ',')]
    designs: Vec<String>,
    /// Comma-separated thread counts, each 1..=1024 (the VM workloads: 1..=64).
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = positive::<usize>, allow_hyphen_values = true)]
    threads: Vec<usize>,
    /// Measured milliseconds per repeat, 1..=60000.
    #[arg(long, default_value_t = 500, value_parser = positive::<u64>, allow_hyphen_values = true)]
    duration_ms: u64,
    /// Repeats per point, 1..=1000 (median and range are reported).
    #[arg(long, default_value_t = 5, value_parser = positive::<usize>, allow_hyphen_values = true)]
    repeat: usize,
    /// Print one JSON object per measurement per line, nothing else.
    #[arg(long)]
    json: bool,
    /// rcu-update: percentage of operations that update (100 = one updater + readers).
    #[arg(long, value_parser = non_negative::<u32>, allow_hyphen_values = true)]
    update_pct: Option<u32>,
    /// ds-*: intervals per thread (at least 1; the maximum, what fits in an arena, is named when
    /// exceeded).
    #[arg(long, default_value_t = 10_000, value_parser = positive::<usize>, allow_hyphen_values = true)]
    intervals: usize,
    /// readers-writers: how many of the threads (the last ones) write; needs threads > writers.
    #[arg(long, default_value_t = 1, value_parser = non_negative::<usize>, allow_hyphen_values = true)]
    writers: usize,
    /// rcu-update at --update-pct 100: pace the updater to this many updates/s (default: unpaced).
    #[arg(long, value_parser = positive::<u64>, allow_hyphen_values = true)]
    update_rate: Option<u64>,
    /// fault-load: percentage of thread 0's time spent in mmap/munmap (0..=100); without it,
    /// `fault-load` runs its four load levels (fault-load-0pct, -25pct, -50pct, -100pct).
    #[arg(long, value_parser = non_negative::<u32>, allow_hyphen_values = true)]
    mmap_pct: Option<u32>,
    /// metis, metis-64k: words in the synthetic text, 1..=16777216 (one job indexes them all).
    #[arg(long, default_value_t = workloads::metis::DEFAULT_WORDS, value_parser = positive::<usize>, allow_hyphen_values = true)]
    metis_words: usize,
    /// local: cores attached before the run and never used (0..=32; one upgrades `coarse`'s
    /// space lock out of its one-core mode).
    #[arg(long, default_value_t = 0, value_parser = non_negative::<usize>, allow_hyphen_values = true)]
    idle_cores: usize,
}

/// What `aspace bench` will run, after validation.
#[derive(Debug)]
struct BenchPlan {
    points: Vec<Point<'static>>,
    config: Config,
    repeat: usize,
    json: bool,
}

fn plan(args: &BenchArgs) -> Result<BenchPlan, BenchError> {
    let group = workloads::expand(&args.workload, args.mmap_pct)?;
    check_threads(&args.threads)?;
    check_duration_ms(args.duration_ms)?;
    check_repeat(args.repeat)?;
    if args.writers >= MAX_THREADS {
        return Err(BenchError::InvalidArgument(format!(
            "--writers must be below {MAX_THREADS} (the --threads limit), got {}",
            args.writers
        )));
    }
    let update_pct = args.update_pct.unwrap_or(100);
    if update_pct > 100 {
        return Err(BenchError::InvalidArgument(format!(
            "--update-pct {update_pct} is above 100"
        )));
    }
    let config = Config {
        duration: Duration::from_millis(args.duration_ms),
        update_pct,
        intervals: args.intervals,
        writers: args.writers,
        update_rate: args.update_rate,
        mmap_pct: args.mmap_pct.unwrap_or(10),
        metis_words: args.metis_words,
        idle_cores: args.idle_cores,
    };
    if config.idle_cores > workloads::local::MAX_IDLE_CORES {
        return Err(BenchError::InvalidArgument(format!(
            "--idle-cores must be at most {}, got {}",
            workloads::local::MAX_IDLE_CORES,
            config.idle_cores
        )));
    }
    if config.mmap_pct > 100 {
        return Err(BenchError::InvalidArgument(format!(
            "--mmap-pct {} is above 100",
            config.mmap_pct
        )));
    }
    if config.update_rate == Some(0) {
        return Err(BenchError::InvalidArgument(
            "--update-rate must be at least 1 update/s".into(),
        ));
    }
    let mut points = Vec::new();
    for workload in group {
        let designs = resolve_designs(workload, Some(&args.designs))?;
        let threads = workload_threads(workload, args, &config)?;
        for design in designs {
            for &threads in &threads {
                points.push(Point {
                    workload,
                    design,
                    threads,
                });
            }
        }
    }
    Ok(BenchPlan {
        points,
        config,
        repeat: args.repeat,
        json: args.json,
    })
}

/// The thread counts of `args` that `workload` runs: all of them, or an error naming the first
/// it refuses. A load level of `fault-load` expanded from the group (no `--mmap-pct`) skips the
/// counts below its minimum instead (`fault-load-100pct` at 1 thread), as the suite does.
fn workload_threads(
    workload: &'static dyn aspace_bench::Workload,
    args: &BenchArgs,
    config: &Config,
) -> Result<Vec<usize>, BenchError> {
    let mut threads = args.threads.clone();
    if workload.name() != args.workload {
        let min = workload.min_threads(config);
        threads.retain(|&t| t >= min);
    }
    if workload.name().starts_with("ds-") {
        workloads::arena::check_intervals(config)?;
    }
    if workload.name().starts_with("metis") {
        for &t in &threads {
            workloads::metis::check_fits(t, config.metis_words)?;
        }
    }
    let max_threads = workload.max_threads();
    if let Some(&t) = threads.iter().find(|&&t| t > max_threads) {
        return Err(BenchError::InvalidArgument(format!(
            "{} runs at most {max_threads} threads, got --threads {t}",
            workload.name()
        )));
    }
    let min_threads = workload.min_threads(config);
    if let Some(&t) = threads.iter().find(|&&t| t < min_threads) {
        let why = if workload.name() == "readers-writers" {
            format!(
                " with --writers {} (a reader besides the writers)",
                config.writers
            )
        } else {
            String::new()
        };
        return Err(BenchError::InvalidArgument(format!(
            "{} needs at least {min_threads} threads{why}, got --threads {t}",
            workload.name(),
        )));
    }
    Ok(threads)
}

fn bench(args: &BenchArgs) -> Result<(), BenchError> {
    let plan = plan(args)?;
    warn_if_busy();
    let stdout = std::io::stdout();
    let ms = run_points(&plan.points, &plan.config, plan.repeat, plan.json, |m| {
        if plan.json {
            let line = m.to_json_line()?;
            let mut out = stdout.lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        Ok(())
    })?;
    if !plan.json {
        print!("{}", table(&ms));
    }
    Ok(())
}

fn list() {
    for w in workloads::all() {
        println!("{:<12} {}", w.name(), w.about());
        let base = w.baseline().map(|b| b.design);
        let designs: Vec<String> = w
            .designs()
            .iter()
            .map(|d| {
                if Some(*d) == base {
                    format!("{d} (baseline)")
                } else {
                    d.to_string()
                }
            })
            .collect();
        println!("{:<12} designs: {}", "", designs.join(", "));
    }
}

fn conflicts(args: &ConflictsArgs) -> Result<(), BenchError> {
    use aspace_bench::conflicts::{self as audit, Plan};
    let plan = Plan::new(
        &args.workload,
        &args.designs,
        &args.cores,
        args.rounds,
        args.warmup,
    )?
    .with_pairs(args.pairs);
    if !audit::INSTRUMENTED {
        return Err(BenchError::NotInstrumented(args.workload.clone()));
    }
    if !args.json {
        print!("{}", audit::table_header());
    }
    let rows = audit::run(&plan, |row| {
        let mut out = std::io::stdout().lock();
        if args.json {
            let _ = writeln!(out, "{}", serde_json::to_string(row)?);
        } else {
            let _ = write!(out, "{}", audit::table_row(row));
        }
        let _ = out.flush();
        Ok(())
    })?;
    if let Some(dir) = &args.out {
        audit::merge_into(dir, &rows)?;
        if !args.json {
            println!("merged into {}", dir.join("conflicts.json").display());
        }
    }
    Ok(())
}

fn default_suite(cli: &Cli) -> Result<(), BenchError> {
    let mut opts = SuiteOptions::default();
    if !cli.threads.is_empty() {
        opts.threads = cli.threads.clone();
    }
    opts.only = cli.only.clone();
    if cli.quick {
        opts = opts.quick();
    }
    // Refuse bad options before creating the results directory.
    suite::points_for(&opts)?;
    let dir = suite::results_dir(std::path::Path::new("results"));
    warn_if_busy();
    // The progress bar is drawn only when stderr is a terminal; whenever that bar is not what
    // the user sees (stderr or stdout redirected), print one line per measured point instead.
    let lines = !(std::io::stdout().is_terminal() && std::io::stderr().is_terminal());
    if lines {
        println!("writing results to {}", dir.display());
    }
    let ms = suite::run(&dir, &opts, |m| {
        if lines {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", progress_line(m));
            let _ = out.flush();
        }
        Ok(())
    })?;
    print!("{}", table(&ms));
    print!("{}", aspace_bench::report::headline::text(&ms));
    println!("results written to {}", dir.display());
    println!("open {}", dir.join("index.html").display());
    Ok(())
}

/// `aspace agree`: the runs' headline verdicts side by side.
fn agree(dirs: &[std::path::PathBuf]) -> Result<(), BenchError> {
    use aspace_bench::report::agreement::{compare_runs, markdown};
    let runs = dirs
        .iter()
        .map(|d| aspace_bench::render::read_measurements(d))
        .collect::<Result<Vec<_>, _>>()?;
    let names: Vec<String> = dirs
        .iter()
        .map(|d| {
            d.file_name()
                .map_or_else(|| d.display().to_string(), |n| n.to_string_lossy().into())
        })
        .collect();
    print!("{}", markdown(&names, &compare_runs(&runs)));
    Ok(())
}

/// Prints a warning (stderr) when other work takes a noticeable share of the CPUs in the quarter
/// second before a run (`interference.rs`); every point measured meanwhile is flagged anyway.
fn warn_if_busy() {
    let now = aspace_bench::interference::sample(std::time::Duration::from_millis(250));
    if let Some(w) = aspace_bench::interference::busy_warning(now) {
        eprintln!("{w}");
    }
}

/// Ends the process for a command line clap refused. A number that did not parse (a negative
/// one included: its options take values starting with `-`) gets one line naming the option,
/// `error: --duration-ms must be a positive integer, got -5`, and status 2, like every other
/// refusal of this binary; everything else is clap's own message (help and version included).
fn refuse(e: clap::Error) -> ! {
    if e.kind() == ErrorKind::ValueValidation {
        let number = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<NumberError>());
        if let (Some(ContextValue::String(arg)), Some(number)) =
            (e.get(ContextKind::InvalidArg), number)
        {
            // `arg` is the option with its value name: `--duration-ms <DURATION_MS>`.
            let option = arg.split_whitespace().next().unwrap_or(arg);
            eprintln!("error: {option} {number}");
            std::process::exit(2);
        }
    }
    e.exit()
}

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| refuse(e));
    let result = match &cli.command {
        None => default_suite(&cli),
        Some(Command::List) => {
            list();
            Ok(())
        }
        Some(Command::Bench(args)) => bench(args),
        Some(Command::Report { dir }) => aspace_bench::render::report_dir(dir)
            .map(|()| println!("wrote {}", dir.join("index.html").display())),
        Some(Command::Conflicts(args)) => conflicts(args),
        Some(Command::Agree { dirs }) => agree(dirs),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("aspace").chain(args.iter().copied()))
    }

    fn bench_args(args: &[&str]) -> BenchArgs {
        match parse(args).unwrap().command {
            Some(Command::Bench(b)) => b,
            other => panic!("not a bench command: {other:?}"),
        }
    }

    #[test]
    fn no_arguments_means_the_default_suite() {
        assert!(parse(&[]).unwrap().command.is_none());
    }

    #[test]
    fn bench_defaults_are_two_thread_counts_500ms_and_5_repeats() {
        let b = bench_args(&["bench", "rcu-read"]);
        assert_eq!(b.threads, [1, 2]);
        assert_eq!(b.duration_ms, 500);
        assert_eq!(b.repeat, 5);
        assert!(!b.json);
        let p = plan(&b).unwrap();
        assert_eq!(p.points.len(), 6 * 2);
        assert_eq!(p.config.update_pct, 100);
        assert_eq!(p.config.intervals, 10_000);
    }

    #[test]
    fn bench_parses_comma_separated_lists_and_every_option() {
        let b = bench_args(&[
            "bench",
            "rcu-update",
            "--designs",
            "memb,mutex",
            "--threads",
            "2",
            "--duration-ms",
            "20",
            "--repeat",
            "3",
            "--json",
            "--update-pct",
            "10",
        ]);
        let p = plan(&b).unwrap();
        assert!(p.json);
        assert_eq!(p.repeat, 3);
        assert_eq!(p.config.update_pct, 10);
        assert_eq!(p.config.duration, Duration::from_millis(20));
        assert_eq!(
            format!("{:?}", p.points),
            "[rcu-update memb 2T, rcu-update mutex 2T]"
        );
    }

    #[test]
    fn unknown_workload_is_rejected() {
        let b = bench_args(&["bench", "rcu-raed"]);
        let e = plan(&b).unwrap_err();
        assert!(matches!(e, BenchError::UnknownWorkload { .. }), "{e}");
    }

    #[test]
    fn unknown_design_is_rejected() {
        let b = bench_args(&["bench", "ds-query", "--designs", "btree,maple"]);
        let e = plan(&b).unwrap_err();
        assert!(matches!(e, BenchError::UnknownDesign { .. }), "{e}");
        assert!(e.to_string().contains("maple"));
    }

    #[test]
    fn zero_threads_and_too_many_updates_are_rejected() {
        let b = bench_args(&["bench", "rcu-read", "--threads", "1,0"]);
        assert!(matches!(plan(&b), Err(BenchError::InvalidArgument(_))));
        let b = bench_args(&["bench", "rcu-update", "--update-pct", "101"]);
        assert!(matches!(plan(&b), Err(BenchError::InvalidArgument(_))));
        let b = bench_args(&["bench", "ds-map", "--intervals", "0"]);
        assert!(matches!(plan(&b), Err(BenchError::InvalidArgument(_))));
        let b = bench_args(&["bench", "rcu-update", "--update-rate", "0"]);
        assert!(matches!(plan(&b), Err(BenchError::InvalidArgument(_))));
        let b = bench_args(&["bench", "fault-load", "--mmap-pct", "101"]);
        assert!(matches!(plan(&b), Err(BenchError::InvalidArgument(_))));
        let b = bench_args(&["bench", "fault-load", "--mmap-pct", "25"]);
        assert_eq!(plan(&b).unwrap().config.mmap_pct, 25);
        // Without --mmap-pct: the four load levels, the 100% level only at 2 threads.
        let b = bench_args(&["bench", "fault-load", "--designs", "coarse"]);
        let names: Vec<_> = plan(&b)
            .unwrap()
            .points
            .iter()
            .map(|p| (p.workload.name(), p.threads))
            .collect();
        assert_eq!(
            names,
            [
                ("fault-load-0pct", 1),
                ("fault-load-0pct", 2),
                ("fault-load-25pct", 1),
                ("fault-load-25pct", 2),
                ("fault-load-50pct", 1),
                ("fault-load-50pct", 2),
                ("fault-load-100pct", 2),
            ]
        );
        let b = bench_args(&["bench", "fault-load-100pct", "--threads", "1"]);
        assert!(matches!(plan(&b), Err(BenchError::InvalidArgument(_))));
        let b = bench_args(&["bench", "rcu-update", "--update-rate", "2400000"]);
        assert_eq!(plan(&b).unwrap().config.update_rate, Some(2_400_000));
    }

    #[test]
    fn readers_writers_needs_more_threads_than_writers() {
        let rw = |threads, writers| {
            plan(&bench_args(&[
                "bench",
                "readers-writers",
                "--threads",
                threads,
                "--writers",
                writers,
            ]))
        };
        let b = bench_args(&["bench", "readers-writers", "--threads", "1,2"]);
        assert!(matches!(plan(&b), Err(BenchError::InvalidArgument(_))));
        assert!(matches!(rw("3", "3"), Err(BenchError::InvalidArgument(_))));
        let p = rw("3", "2").unwrap();
        assert_eq!(p.config.writers, 2);
        assert_eq!(p.points.len(), 5, "one point per design at 3 threads");
        assert!(rw("1", "0").is_ok());
    }

    #[test]
    fn non_numeric_threads_are_a_parse_error() {
        assert!(parse(&["bench", "rcu-read", "--threads", "one"]).is_err());
    }
}
