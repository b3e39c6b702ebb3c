//! Runs one op sequence on both sides and compares after every op; on a mismatch, minimizes the
//! sequence and writes the report.
//!
//! A case starts from an empty kernel window and a fresh aspace space, so a sequence replays the
//! same way alone (the minimizer and `ASPACE_DIFF_SEED` rely on that). Per op: the kernel applies
//! it first; if the kernel placed a hinted mapping outside the window the op is skipped on both
//! sides; otherwise aspace applies it and the two outcomes must be equal, then the two snapshots.
//! A panic inside aspace is a mismatch too (caught, with its message).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use super::engine::EngineWindow;
use super::kernel::KernelWindow;
use super::minimize::minimize;
use super::ops::{listing, Op};
use super::snapshot::{diff_snapshots, Outcome};
use aspace_vm::Design;

/// Where and how a sequence went wrong.
#[derive(Clone, Debug)]
pub struct Mismatch {
    /// Index of the op after which the sides differed.
    pub step: usize,
    pub what: String,
}

/// What a run saw: per op, the kernel's and aspace's outcomes (aspace's is `None` when skipped or
/// not reached), and the first mismatch.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub trace: Vec<(Outcome, Option<Outcome>)>,
    pub mismatch: Option<Mismatch>,
    pub skipped: usize,
}

/// How long one aspace call may take before the watchdog declares a hang.
const HANG: Duration = Duration::from_secs(20);

/// Odd while an aspace call runs; bumped on entry and exit.
static CALLS: AtomicU64 = AtomicU64::new(0);
/// What the running call is, for the watchdog's message.
static CURRENT: Mutex<String> = Mutex::new(String::new());

/// A thread that aborts the process, naming the call, when one aspace call runs longer than
/// [`HANG`] (an engine livelock would otherwise spin until CI's timeout, silently).
fn start_watchdog() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::thread::spawn(|| {
            let tick = Duration::from_millis(250);
            let (mut last, mut same) = (u64::MAX, Duration::ZERO);
            loop {
                std::thread::sleep(tick);
                let c = CALLS.load(Ordering::Relaxed);
                if c % 2 == 1 && c == last {
                    same += tick;
                    if same >= HANG {
                        let what = CURRENT.lock().map(|s| s.clone()).unwrap_or_default();
                        let seed = SEED.load(Ordering::Relaxed);
                        // Straight to fd 2: the test harness captures `eprintln!` from threads a
                        // test spawned, and that buffer dies with the abort.
                        let msg = format!(
                            "differential: seed {seed}: an aspace call hung for {HANG:?}: {what}\n"
                        );
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), msg.as_bytes());
                        std::process::abort();
                    }
                } else {
                    same = Duration::ZERO;
                }
                last = c;
            }
        });
    });
}

/// The seed being run, for the watchdog's message.
static SEED: AtomicU64 = AtomicU64::new(u64::MAX);

/// Records the seed being run (named by the watchdog).
pub fn set_seed(seed: u64) {
    SEED.store(seed, Ordering::Relaxed);
}

/// Sets what the watchdog names if the next aspace call hangs.
fn set_context(what: String) {
    if let Ok(mut s) = CURRENT.lock() {
        *s = what;
    }
}

fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    start_watchdog();
    CALLS.fetch_add(1, Ordering::Relaxed);
    let r = catch_unwind(AssertUnwindSafe(f));
    CALLS.fetch_add(1, Ordering::Relaxed);
    r.map_err(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "(non-string panic)".into());
        format!("aspace panicked: {msg}")
    })
}

/// Runs `ops` from a fresh state on both sides, comparing after every op.
pub fn run_case(kernel: &mut KernelWindow, ops: &[Op], exact: bool, design: Design) -> Run {
    let mut run = Run::default();
    kernel.reset();
    let (base, pages) = (kernel.base(), kernel.pages());
    let mut engine = match guarded(|| EngineWindow::new(base, pages, design)) {
        Ok(e) => e,
        Err(what) => {
            run.mismatch = Some(Mismatch { step: 0, what });
            return run;
        }
    };
    for (step, op) in ops.iter().enumerate() {
        set_context(format!(
            "op {step} of the sequence being run: {op}\n{}",
            listing(ops)
        ));
        let k = kernel.apply(op);
        if k == Outcome::Skipped {
            run.skipped += 1;
            run.trace.push((k, None));
            continue;
        }
        let a = match guarded(|| engine.apply(op)) {
            Ok(a) => a,
            Err(what) => {
                run.trace.push((k, None));
                run.mismatch = Some(Mismatch { step, what });
                return run;
            }
        };
        run.trace.push((k.clone(), Some(a.clone())));
        if k != a {
            run.mismatch = Some(Mismatch {
                step,
                what: format!("results differ: kernel {k}, aspace {a}"),
            });
            return run;
        }
        let ks = kernel.snapshot();
        set_context(format!(
            "probing (touch/read of every page, maps) after op {step}: {op}\nsequence:\n{}",
            listing(ops)
        ));
        let as_ = match guarded(|| engine.snapshot()) {
            Ok(s) => s,
            Err(what) => {
                run.mismatch = Some(Mismatch { step, what });
                return run;
            }
        };
        if let Some(what) = diff_snapshots(&ks, &as_, exact) {
            run.mismatch = Some(Mismatch { step, what });
            return run;
        }
    }
    // Finally write-fault every page on both sides, and compare what that did and the state after.
    let step = ops.len().saturating_sub(1);
    set_context(format!(
        "write-probing every page at the end\nsequence:\n{}",
        listing(ops)
    ));
    let kw = kernel.probe_writes();
    let aw = match guarded(|| engine.probe_writes()) {
        Ok(w) => w,
        Err(what) => {
            run.mismatch = Some(Mismatch { step, what });
            return run;
        }
    };
    if let Some(p) = (0..kw.len()).find(|&p| kw[p] != aw[p]) {
        run.mismatch = Some(Mismatch {
            step,
            what: format!(
                "final write probe of page W + {:#x}: kernel {:?}, aspace {:?}",
                p as u64 * super::ops::PAGE,
                kw[p],
                aw[p]
            ),
        });
        return run;
    }
    let ks = kernel.snapshot();
    match guarded(|| engine.snapshot()) {
        Ok(as_) => {
            if let Some(what) = diff_snapshots(&ks, &as_, exact) {
                run.mismatch = Some(Mismatch {
                    step,
                    what: format!("after write-faulting every page at the end: {what}"),
                });
            }
        }
        Err(what) => run.mismatch = Some(Mismatch { step, what }),
    }
    run
}

/// Minimizes a failing sequence and renders the failure report (seed, replay command, the minimal
/// sequence with each op's outcome on both sides, and the mismatch).
pub fn report_failure(
    kernel: &mut KernelWindow,
    seed: u64,
    ops: &[Op],
    first: &Mismatch,
    exact: bool,
    design: Design,
) -> String {
    // Panics inside aspace are expected while minimizing; one line each, not a backtrace.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let at = info.location().map(|l| l.to_string()).unwrap_or_default();
        eprintln!("(minimizing) panic at {at}");
    }));
    let minimal = minimize(ops, |cand| {
        run_case(kernel, cand, exact, design).mismatch.is_some()
    });
    let run = run_case(kernel, &minimal, exact, design);
    std::panic::set_hook(hook);

    let mut s = format!(
        "aspace ({}) differs from Linux: seed {seed} (replay: ASPACE_DIFF_SEED={seed} cargo \
         test --release -p aspace-vm --test differential)\n\
         first seen after op {} of {}: {}\n\n\
         minimal sequence ({} ops; W = window base {:#x}, `pattern` from tests/differential/ops.rs):\n",
        design.name(),
        first.step,
        ops.len(),
        first.what,
        minimal.len(),
        kernel.base()
    );
    for (i, op) in minimal.iter().enumerate() {
        s.push_str(&format!("    {op}\n"));
        if let Some((k, a)) = run.trace.get(i) {
            let a = a.as_ref().map_or("-".to_string(), |a| a.to_string());
            s.push_str(&format!("        // kernel: {k}; aspace: {a}\n"));
        }
    }
    match &run.mismatch {
        Some(m) => s.push_str(&format!("\nafter op {}: {}\n", m.step, m.what)),
        None => s.push_str("\n(the minimal sequence no longer fails when re-run: flaky?)\n"),
    }
    s.push_str(&format!("\nfull sequence:\n{}", listing(ops)));
    s
}
