//! Differential test of aspace against the real Linux kernel.
//!
//! A window of this test process's own address space (`differential/kernel.rs`) and an aspace
//! space whose address range is exactly that window (`differential/engine.rs`) receive the same
//! seeded random sequences of `mmap` (`MAP_FIXED`, `MAP_FIXED_NOREPLACE`, hints), `munmap`,
//! `mprotect`, `madvise`, writes, reads and single accesses, bad input included
//! (`differential/ops.rs`). After every op the results (return value or errno, fault kind and
//! address, bytes read) and the whole window (maps lines, per-page access results, contents) must
//! be equal (`differential/snapshot.rs`). A mismatch is minimized by delta debugging
//! (`differential/minimize.rs`) and reported with its seed and the minimal sequence as calls.
//!
//! Knobs: `ASPACE_DIFF_SEED=n` replays case `n` alone; `ASPACE_DIFF_CASES=n` runs `n` cases
//! (default 2,000); `ASPACE_DIFF_OPS=n` ops per case (default 30); `ASPACE_DIFF_EXACT=0` compares
//! pages and protections only (maps lines coalesced on both sides) instead of requiring the lines
//! merged exactly as Linux merges them (the default).
//!
//! Every test here uses the window, and the window needs a quiet address-space neighbourhood, so
//! the tests run one at a time (`serial()`); this binary holds nothing else. The kernel-only tests
//! pin down the Linux behaviours the harness relies on (how `process_vm_writev` and
//! `/proc/self/mem` treat protections, `mprotect` over a hole, why maps lines are coalesced).
//!
//! Not for: concurrency (see `security.rs` and the conformance stress tests).

#[path = "differential/engine.rs"]
mod engine;
#[path = "differential/kernel.rs"]
mod kernel;
#[path = "differential/minimize.rs"]
mod minimize;
#[path = "differential/ops.rs"]
mod ops;
#[path = "differential/runner.rs"]
mod runner;
#[path = "differential/snapshot.rs"]
mod snapshot;

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use aspace_vm::Design;
use kernel::KernelWindow;
use ops::{generate, Acc, GenConfig, Op, PAGE};
use snapshot::{Line, Outcome, Probe};

/// Pages in the window.
const PAGES: u64 = 64;

/// Whether maps lines must be merged exactly like Linux's (see `differential/snapshot.rs`): the
/// default since aspace models `VM_ACCOUNT` (the last merge blocker the test found, seed 440).
/// `ASPACE_DIFF_EXACT=0` compares pages and protections only (lines coalesced on both sides),
/// for debugging a mismatch that is about merging alone.
fn exact_maps() -> bool {
    env_u64("ASPACE_DIFF_EXACT").is_none_or(|v| v != 0)
}

/// The generator's settings for the main test, for a window at `base`.
fn gen_config(base: u64) -> GenConfig {
    GenConfig {
        pages: PAGES,
        max_len_pages: 12,
        shared_pct: 10,
        bad_pct: 6,
        base,
    }
}

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}"))
    })
}

#[test]
fn aspace_matches_linux_on_random_sequences() {
    let _serial = serial();
    let n_ops = env_u64("ASPACE_DIFF_OPS").unwrap_or(30) as usize;
    let seeds: Vec<u64> = match env_u64("ASPACE_DIFF_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("ASPACE_DIFF_CASES").unwrap_or(2_000)).collect(),
    };
    let mut kernel = KernelWindow::reserve(PAGES);
    let cfg = gen_config(kernel.base());
    let started = Instant::now();
    let (mut ops_run, mut skipped) = (0usize, 0usize);
    for &seed in &seeds {
        let ops = generate(seed, n_ops, &cfg);
        runner::set_seed(seed);
        for &design in Design::ALL {
            let run = runner::run_case(&mut kernel, &ops, exact_maps(), design);
            ops_run += run.trace.len();
            skipped += run.skipped;
            if let Some(m) = &run.mismatch {
                let report =
                    runner::report_failure(&mut kernel, seed, &ops, m, exact_maps(), design);
                panic!("{report}");
            }
        }
    }
    eprintln!(
        "differential: {} cases x {} designs, {ops_run} ops ({skipped} hinted mmaps placed outside the window, \
         skipped) in {:.2?}, all equal to Linux",
        seeds.len(),
        Design::ALL.len(),
        started.elapsed()
    );
}

// ---- Kernel-only tests: the harness's own assumptions about Linux ----

/// The kernel side replays a sequence identically: same outcomes, same snapshots.
#[test]
fn kernel_window_replays_sequences_identically() {
    let _serial = serial();
    let mut k = KernelWindow::reserve(PAGES);
    let cfg = gen_config(k.base());
    for seed in 0..40 {
        let ops = generate(seed, 30, &cfg);
        let mut runs = Vec::new();
        for _ in 0..2 {
            k.reset();
            let mut trace = Vec::new();
            for op in &ops {
                trace.push(k.apply(op));
                let s = k.snapshot();
                for w in s.lines.windows(2) {
                    assert!(w[0].end <= w[1].start, "maps lines overlap: {:?}", s.lines);
                }
                assert!(s
                    .lines
                    .iter()
                    .all(|l| l.start < l.end && l.end <= PAGES * PAGE));
                // Shmem inode numbers are new on every run: compare which lines share one.
                let lines = snapshot::same_objects(&s.lines);
                let shape = (lines, &s.access, &s.contents);
                trace.push(Outcome::Done(format!("{shape:?}").into_bytes()));
            }
            runs.push(trace);
        }
        assert_eq!(runs[0], runs[1], "seed {seed} replayed differently");
    }
}

/// `process_vm_writev` honours protections (no `FOLL_FORCE`), `process_vm_readv` needs
/// `VM_READ` (so it refuses `-w-` and `--x` pages the CPU could read), `/proc/self/mem` reads any
/// mapped page (including `PROT_NONE`) and fails on unmapped ones.
#[test]
fn linux_probes_honour_protections_as_the_harness_assumes() {
    let _serial = serial();
    let mut k = KernelWindow::reserve(PAGES);
    k.reset();
    let fixed = ops::MAP_PRIVATE | ops::MAP_ANONYMOUS | ops::MAP_FIXED;
    // Pages 0..5: rw-, r--, ---, -w-, --x; page 5 unmapped.
    for (p, prot) in [3u32, 1, 0, 2, 4].into_iter().enumerate() {
        let op = Op::Mmap {
            off: p as u64 * PAGE,
            len: PAGE,
            prot: 3,
            flags: fixed,
        };
        assert_eq!(k.apply(&op), Outcome::Ok(p as u64 * PAGE));
        let w = Op::Write {
            off: p as u64 * PAGE,
            len: 8,
            fill: 7,
        };
        assert_eq!(k.apply(&w), Outcome::Done(Vec::new()));
        let m = Op::Mprotect {
            off: p as u64 * PAGE,
            len: PAGE,
            prot,
        };
        assert_eq!(k.apply(&m), Outcome::Ok(0));
    }
    let written = ops::pattern(7, 8);
    let expect_writev = [
        Ok(1),
        Err(libc::EFAULT),
        Err(libc::EFAULT),
        Ok(1),
        Err(libc::EFAULT),
        Err(libc::EFAULT),
    ];
    let expect_readv = [true, true, false, false, false, false];
    for p in 0..6u64 {
        let off = p * PAGE;
        assert_eq!(
            k.mem_read(off, 8).ok(),
            (p < 5).then(|| written.clone()),
            "/proc/self/mem at page {p}"
        );
        assert_eq!(
            k.readv(off, 8).is_ok(),
            expect_readv[p as usize],
            "process_vm_readv at page {p}"
        );
        // Write back what is there, so a successful probe changes nothing.
        let data = if p < 5 { written.clone() } else { vec![0; 8] };
        assert_eq!(
            k.writev(off, &data[..1]),
            expect_writev[p as usize],
            "process_vm_writev at page {p}"
        );
    }
    // A write spanning rw- into r-- faults at the r-- page and writes nothing (harness rule).
    let w = Op::Write {
        off: PAGE - 4,
        len: 8,
        fill: 9,
    };
    assert_eq!(k.apply(&w), Outcome::Fault(Probe::Protection, PAGE));
    assert_eq!(k.mem_read(PAGE - 4, 4).unwrap(), vec![0; 4]);
}

/// `mprotect` over a hole changes the regions before the hole, then fails with `ENOMEM`;
/// `madvise(MADV_DONTNEED)` over a hole zaps the mapped parts, then fails with `ENOMEM`.
#[test]
fn linux_mprotect_and_madvise_over_a_hole_apply_the_mapped_prefix() {
    let _serial = serial();
    let mut k = KernelWindow::reserve(PAGES);
    k.reset();
    let fixed = ops::MAP_PRIVATE | ops::MAP_ANONYMOUS | ops::MAP_FIXED;
    for off in [0, 3 * PAGE] {
        let op = Op::Mmap {
            off,
            len: 2 * PAGE,
            prot: 3,
            flags: fixed,
        };
        assert_eq!(k.apply(&op), Outcome::Ok(off));
        let w = Op::Write {
            off,
            len: 2 * PAGE,
            fill: off,
        };
        assert_eq!(k.apply(&w), Outcome::Done(Vec::new()));
    }
    let mp = Op::Mprotect {
        off: PAGE,
        len: 4 * PAGE,
        prot: 1,
    };
    assert_eq!(k.apply(&mp), Outcome::Err(libc::ENOMEM));
    let line = |start, end, prot| Line {
        start,
        end,
        prot,
        shared: false,
        ..Line::default()
    };
    assert_eq!(
        k.raw_lines(),
        vec![
            line(0, PAGE, 3),
            line(PAGE, 2 * PAGE, 1),
            line(3 * PAGE, 5 * PAGE, 3)
        ]
    );
    let md = Op::Madvise {
        off: 0,
        len: 5 * PAGE,
        advice: ops::MADV_DONTNEED,
    };
    assert_eq!(k.apply(&md), Outcome::Err(libc::ENOMEM));
    let s = k.snapshot();
    for p in [0, 1, 3, 4] {
        assert!(
            s.contents[p].as_ref().unwrap().iter().all(|&b| b == 0),
            "page {p} was zapped by DONTNEED before the hole error"
        );
    }
}

/// Why kernel lines are coalesced before comparison: two regions that were both written have
/// different `anon_vma`s, and a mapping that fills the hole between them merges with one side
/// only, so `/proc/self/maps` shows two adjacent `rw-p` lines where the pages are identical in
/// every observable way.
#[test]
fn linux_keeps_written_neighbours_apart_in_maps() {
    let _serial = serial();
    let mut k = KernelWindow::reserve(PAGES);
    k.reset();
    let fixed = ops::MAP_PRIVATE | ops::MAP_ANONYMOUS | ops::MAP_FIXED;
    for off in [0, 2 * PAGE] {
        let op = Op::Mmap {
            off,
            len: PAGE,
            prot: 3,
            flags: fixed,
        };
        assert_eq!(k.apply(&op), Outcome::Ok(off));
        let w = Op::Write {
            off,
            len: 1,
            fill: 1,
        };
        assert_eq!(k.apply(&w), Outcome::Done(Vec::new()));
    }
    let fill = Op::Mmap {
        off: PAGE,
        len: PAGE,
        prot: 3,
        flags: fixed,
    };
    assert_eq!(k.apply(&fill), Outcome::Ok(PAGE));
    let raw = k.raw_lines();
    assert_eq!(raw.len(), 2, "expected two lines, got {raw:?}");
    assert_eq!(snapshot::coalesce(&raw).len(), 1);
}

/// The errnos Linux gives for bad input (what aspace must reproduce; the random test covers them
/// too, this pins them down by name).
#[test]
fn linux_bad_input_errnos() {
    let _serial = serial();
    let mut k = KernelWindow::reserve(PAGES);
    k.reset();
    let anon = ops::MAP_PRIVATE | ops::MAP_ANONYMOUS;
    let fixed = anon | ops::MAP_FIXED;
    let huge = u64::MAX - 5;
    let cases: Vec<(&str, Op, Outcome)> = vec![
        (
            "mmap unaligned FIXED",
            Op::Mmap {
                off: 1,
                len: PAGE,
                prot: 3,
                flags: fixed,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "mmap zero length",
            Op::Mmap {
                off: 0,
                len: 0,
                prot: 3,
                flags: fixed,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "mmap overflowing length",
            Op::Mmap {
                off: 0,
                len: huge,
                prot: 3,
                flags: fixed,
            },
            Outcome::Err(libc::ENOMEM),
        ),
        (
            "mmap without PRIVATE or SHARED",
            Op::Mmap {
                off: 0,
                len: PAGE,
                prot: 3,
                flags: ops::MAP_ANONYMOUS | ops::MAP_FIXED,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "mmap not anonymous, fd -1",
            Op::Mmap {
                off: 0,
                len: PAGE,
                prot: 3,
                flags: ops::MAP_PRIVATE | ops::MAP_FIXED,
            },
            Outcome::Err(libc::EBADF),
        ),
        (
            "mmap SHARED_VALIDATE, anonymous (any flags): only files validate",
            Op::Mmap {
                off: 0,
                len: PAGE,
                prot: 3,
                flags: ops::MAP_SHARED_VALIDATE
                    | ops::MAP_ANONYMOUS
                    | ops::MAP_FIXED
                    | ops::MAP_UNKNOWN,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "mmap type 0x4..0x7",
            Op::Mmap {
                off: 0,
                len: PAGE,
                prot: 3,
                flags: 0x05 | ops::MAP_ANONYMOUS | ops::MAP_FIXED,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "mmap not anonymous is checked before a zero length",
            Op::Mmap {
                off: 0,
                len: 0,
                prot: 3,
                flags: ops::MAP_PRIVATE,
            },
            Outcome::Err(libc::EBADF),
        ),
        (
            "mmap overflowing length is checked before the FIXED alignment",
            Op::Mmap {
                off: 1,
                len: huge,
                prot: 3,
                flags: fixed,
            },
            Outcome::Err(libc::ENOMEM),
        ),
        (
            "mprotect with an unknown prot bit",
            Op::Mprotect {
                off: 0,
                len: PAGE,
                prot: 0x10,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "mprotect with PROT_GROWSDOWN over nothing (checked against the region, later)",
            Op::Mprotect {
                off: 0,
                len: PAGE,
                prot: 1 | ops::PROT_GROWSDOWN,
            },
            Outcome::Err(libc::ENOMEM),
        ),
        (
            "mprotect zero length is checked before the prot bits",
            Op::Mprotect {
                off: 0,
                len: 0,
                prot: 0x10,
            },
            Outcome::Ok(0),
        ),
        (
            "mprotect overflowing length is checked before the prot bits",
            Op::Mprotect {
                off: 0,
                len: huge,
                prot: 0x10,
            },
            Outcome::Err(libc::ENOMEM),
        ),
        (
            "madvise unknown advice is checked before a zero length",
            Op::Madvise {
                off: 0,
                len: 0,
                advice: 77,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "madvise alignment is checked before a zero length",
            Op::Madvise {
                off: 1,
                len: 0,
                advice: ops::MADV_DONTNEED,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "munmap unaligned",
            Op::Munmap { off: 1, len: PAGE },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "munmap zero length",
            Op::Munmap { off: 0, len: 0 },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "munmap overflowing length",
            Op::Munmap { off: 0, len: huge },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "munmap of nothing",
            Op::Munmap { off: 0, len: PAGE },
            Outcome::Ok(0),
        ),
        (
            "mprotect unaligned",
            Op::Mprotect {
                off: 1,
                len: PAGE,
                prot: 1,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "mprotect zero length (even unmapped)",
            Op::Mprotect {
                off: 0,
                len: 0,
                prot: 1,
            },
            Outcome::Ok(0),
        ),
        (
            "mprotect overflowing length",
            Op::Mprotect {
                off: 0,
                len: huge,
                prot: 1,
            },
            Outcome::Err(libc::ENOMEM),
        ),
        (
            "mprotect unmapped",
            Op::Mprotect {
                off: 0,
                len: PAGE,
                prot: 1,
            },
            Outcome::Err(libc::ENOMEM),
        ),
        (
            "madvise unknown advice",
            Op::Madvise {
                off: 0,
                len: PAGE,
                advice: 5,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "madvise unaligned",
            Op::Madvise {
                off: 1,
                len: PAGE,
                advice: ops::MADV_DONTNEED,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "madvise zero length (even unmapped)",
            Op::Madvise {
                off: 0,
                len: 0,
                advice: ops::MADV_DONTNEED,
            },
            Outcome::Ok(0),
        ),
        (
            "madvise overflowing length",
            Op::Madvise {
                off: 0,
                len: huge,
                advice: ops::MADV_DONTNEED,
            },
            Outcome::Err(libc::EINVAL),
        ),
        (
            "madvise unmapped",
            Op::Madvise {
                off: 0,
                len: PAGE,
                advice: ops::MADV_DONTNEED,
            },
            Outcome::Err(libc::ENOMEM),
        ),
    ];
    let mut wrong = Vec::new();
    for (name, op, expect) in &cases {
        let got = k.apply(op);
        if &got != expect {
            wrong.push(format!("{name}: {op} gave {got}, expected {expect}"));
        }
    }
    assert!(k.raw_lines().is_empty(), "bad input changed the window");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Linux accepts and ignores unknown `PROT_*` bits in `mmap` (`/proc/self/maps` shows only
/// `rwx`, and such a region merges with a plain one); `mprotect` accepts `PROT_SEM` (x86) and
/// rejects other unknown bits; an unaligned hint is rounded down (x86 `addr &= PAGE_MASK`).
#[test]
fn linux_ignores_unknown_mmap_prot_bits_and_rounds_hints_down() {
    let _serial = serial();
    let mut k = KernelWindow::reserve(PAGES);
    k.reset();
    let fixed = ops::MAP_PRIVATE | ops::MAP_ANONYMOUS | ops::MAP_FIXED;
    for (p, prot) in [
        0x3 | ops::PROT_SEM,
        0x3 | 0x10,
        0x3 | ops::PROT_GROWSDOWN,
        0x3,
    ]
    .into_iter()
    .enumerate()
    {
        let off = p as u64 * PAGE;
        let op = Op::Mmap {
            off,
            len: PAGE,
            prot,
            flags: fixed,
        };
        assert_eq!(k.apply(&op), Outcome::Ok(off), "{op}");
    }
    let one = |start, end, prot| Line {
        start,
        end,
        prot,
        shared: false,
        ..Line::default()
    };
    assert_eq!(k.raw_lines(), vec![one(0, 4 * PAGE, 3)]);
    let sem = Op::Mprotect {
        off: 0,
        len: PAGE,
        prot: 1 | ops::PROT_SEM,
    };
    assert_eq!(k.apply(&sem), Outcome::Ok(0));
    assert_eq!(k.raw_lines(), vec![one(0, PAGE, 1), one(PAGE, 4 * PAGE, 3)]);
    let grows = Op::Mprotect {
        off: 0,
        len: PAGE,
        prot: 1 | ops::PROT_GROWSDOWN,
    };
    assert_eq!(k.apply(&grows), Outcome::Err(libc::EINVAL));
    let hint = Op::Mmap {
        off: 10 * PAGE + 123,
        len: PAGE,
        prot: 3,
        flags: ops::MAP_PRIVATE | ops::MAP_ANONYMOUS,
    };
    assert_eq!(k.apply(&hint), Outcome::Ok(10 * PAGE));
    let _ = Acc::Read;
}

/// The minimizer finds a 1-minimal failing sub-sequence.
#[test]
fn minimizer_reduces_to_the_ops_that_matter() {
    let items: Vec<u32> = (0..40).collect();
    // Fails when 7 comes before 31 and 12 is present.
    let fails = |s: &[u32]| {
        let i7 = s.iter().position(|&x| x == 7);
        let i31 = s.iter().position(|&x| x == 31);
        matches!((i7, i31), (Some(a), Some(b)) if a < b) && s.contains(&12)
    };
    assert_eq!(minimize::minimize(&items, fails), vec![7, 12, 31]);
}
