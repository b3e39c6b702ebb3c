//! `access` and `access-wide` (issue 24): 8-byte loads and stores at random offsets of a
//! thread's own range, the operation an emulator or interpreter performs for every guest load
//! and store. `access` uses a range the soft TLB holds ([`RESIDENT_PAGES`] pages, half of the
//! default 64 entries, contiguous so no two share a slot): every access hits. `access-wide`
//! uses [`WIDE_PAGES`] pages, 16 times the TLB: nearly every access misses and walks the
//! page tables.
//!
//! Each thread maps its own range in one space (the default design), touches every page once
//! (untimed), then loops: a load at one random aligned offset and a store at another (two
//! operations). Offsets come from a per-thread xorshift generator, the same in every design.
//! Designs, baseline first:
//! - `raw`: the same loop over a plain `Vec` of `AtomicU64` (relaxed loads and stores: a
//!   `mov` each on x86, what a plain load or store of guest memory costs);
//! - `session`: `aspace_vm::Session::read_u64`/`write_u64` inside one session per thread
//!   (a relaxed check of the core's request word, a TLB lookup and one atomic access);
//! - `call`: `CoreHandle::read`/`write` of 8 bytes, the per-call path (an access window with a
//!   fence per call).
//!
//! Target (issue 24): `session` within 2x of `raw` on `access`; `call` no slower than before.
//!
//! Not for: shootdown latency under a running session (`access-munmap`).

use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_vm::{AddressSpace, MapFlags, Prot, PAGE_SIZE};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &["raw", "session", "call"];

/// Pages of `access`'s range: half of the default soft TLB (64 entries).
pub const RESIDENT_PAGES: u64 = 32;

/// Pages of `access-wide`'s range: 16 times the default soft TLB.
pub const WIDE_PAGES: u64 = 1024;

/// Most threads (each maps its own range; the space's memory is sized for them).
pub const MAX_THREADS: usize = 64;

/// The `access` workload over `PAGES` pages.
pub struct Access<const PAGES: u64>;

/// `access`: a TLB-resident range.
pub const ACCESS: Access<RESIDENT_PAGES> = Access;
/// `access-wide`: a range 16 times the TLB.
pub const ACCESS_WIDE: Access<WIDE_PAGES> = Access;

impl<const PAGES: u64> Workload for Access<PAGES> {
    fn name(&self) -> &'static str {
        if PAGES == RESIDENT_PAGES {
            "access"
        } else {
            "access-wide"
        }
    }
    fn about(&self) -> &'static str {
        if PAGES == RESIDENT_PAGES {
            "8-byte loads and stores at random offsets of a TLB-resident range (session/call/raw)"
        } else {
            "8-byte loads and stores at random offsets of a range 16x the soft TLB (session/call/raw)"
        }
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "raw",
            style: RatioStyle::PercentOf,
        })
    }
    fn max_threads(&self) -> usize {
        MAX_THREADS
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads == 0 || threads > MAX_THREADS {
            return Err(BenchError::InvalidArgument(format!(
                "{} runs on 1 to {MAX_THREADS} threads",
                self.name()
            )));
        }
        if !DESIGNS.contains(&design) {
            return Err(self.unknown_design(design));
        }
        Ok(run(design, PAGES, threads, config))
    }
}

/// The next xorshift64 value.
#[inline(always)]
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// One repeat of `design` over `pages` pages per thread.
fn run(design: &str, pages: u64, threads: usize, config: &Config) -> Sample {
    let bytes = pages * PAGE_SIZE;
    // The offset mask: ranges are powers of two; aligned to 8.
    let mask = (bytes - 1) & !7;
    let space = AddressSpace::builder()
        .memory((threads as u64 * pages + 256) * PAGE_SIZE)
        .build()
        .expect("the access space");
    let timed = run_timed(threads, config.duration, None, |t| {
        let space = &space;
        move |stop: &Stop| {
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
            let mut sum = 0u64;
            let ops = match design {
                "raw" => {
                    let words: Vec<AtomicU64> = (0..bytes / 8).map(|_| AtomicU64::new(0)).collect();
                    let n = stop.count_batched(|| {
                        let a = (next(&mut x) & mask) as usize / 8;
                        let b = (next(&mut x) & mask) as usize / 8;
                        sum = sum.wrapping_add(words[a].load(Ordering::Relaxed));
                        words[b].store(sum, Ordering::Relaxed);
                    });
                    black_box(&words);
                    n
                }
                _ => {
                    let mut h = space.attach().expect("a core");
                    let base = h
                        .mmap(0, bytes, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
                        .expect("the range");
                    for p in 0..pages {
                        h.write(base + p * PAGE_SIZE, &[1]).expect("touch");
                    }
                    if design == "session" {
                        let mut s = h.session().expect("a session");
                        stop.count_batched(|| {
                            let a = base + (next(&mut x) & mask);
                            let b = base + (next(&mut x) & mask);
                            sum = sum.wrapping_add(s.read_u64(a).expect("mapped"));
                            s.write_u64(b, sum).expect("mapped");
                        })
                    } else {
                        stop.count_batched(|| {
                            let a = base + (next(&mut x) & mask);
                            let b = base + (next(&mut x) & mask);
                            let mut buf = [0u8; 8];
                            h.read(a, &mut buf).expect("mapped");
                            sum = sum.wrapping_add(u64::from_le_bytes(buf));
                            h.write(b, &sum.to_le_bytes()).expect("mapped");
                        })
                    }
                }
            };
            black_box(sum);
            ThreadCount {
                ops: 2 * ops,
                ..Default::default()
            }
        }
    });
    let s = Sample::from_threads(timed.elapsed, &timed.results);
    let st = space.stats();
    let lookups = (st.tlb_hits + st.tlb_misses).max(1);
    s.with("tlb_hit_pct", 100.0 * st.tlb_hits as f64 / lookups as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_design_runs_on_both_ranges() {
        let config = Config {
            duration: Duration::from_millis(5),
            ..Config::default()
        };
        for design in DESIGNS {
            for threads in [1, 2] {
                let s = ACCESS.run(design, threads, &config).unwrap();
                assert!(s.ops_per_sec >= 0.0, "{design}");
                ACCESS_WIDE.run(design, threads, &config).unwrap();
            }
        }
        assert!(ACCESS.run("nope", 1, &config).is_err());
        assert!(ACCESS.run("raw", 0, &config).is_err());
    }
}
