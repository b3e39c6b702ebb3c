//! `file-read`: reads of random 4 KiB pages of a set of in-memory files that every thread
//! shares, through the page cache: `aspace_vm::File::read_at` (lookups in the thesis' CHT under
//! RCU, no lock) against Linux's `pread` of `memfd` files (the kernel's page cache, an xarray
//! under RCU).
//!
//! Sixteen files of 64 KiB (the SOSP'25 Apache shape's file size, §7.3) are written before the
//! run; each operation reads one whole page at a random page of a random file into the
//! thread's buffer. The files are shared and read-only during the run, so any contention comes
//! from the page cache's reads, which should share no written line: the figure to look at is
//! the 2t/1t ratio, and the cost of one page read against the kernel's.
//!
//! Not for: mapped files (file-backed `mmap` is not built yet: the `apache` and `leveldb`
//! workloads of issue 23 come with it), writes or truncation (`tests/file.rs` checks them).

use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_vm::{File, Memory};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &["linux", "aspace"];

/// Files read.
pub const FILES: usize = 16;

/// Pages per file (64 KiB).
pub const FILE_PAGES: u64 = 16;

const PAGE: usize = 4096;

/// The `file-read` workload.
pub struct FileRead;

impl Workload for FileRead {
    fn name(&self) -> &'static str {
        "file-read"
    }
    fn about(&self) -> &'static str {
        "read random 4 KiB pages of 16 shared 64 KiB in-memory files (File::read_at vs pread of memfd files)"
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "linux",
            style: RatioStyle::TimesVs,
        })
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads == 0 {
            return Err(BenchError::InvalidArgument(
                "file-read needs at least one thread".to_string(),
            ));
        }
        match design {
            "linux" => linux(threads, config),
            "aspace" => aspace(threads, config),
            other => Err(self.unknown_design(other)),
        }
    }
}

/// The bytes of page `page` of file `file` (every byte names both, so a test can check a read).
fn contents(file: usize, page: u64) -> Vec<u8> {
    vec![(file as u8).wrapping_mul(31).wrapping_add(page as u8); PAGE]
}

fn sample(elapsed: std::time::Duration, ops: &[u64]) -> Sample {
    let counts: Vec<ThreadCount> = ops
        .iter()
        .map(|&ops| ThreadCount {
            ops,
            ..Default::default()
        })
        .collect();
    Sample::from_threads(elapsed, &counts)
}

/// Runs `read(thread's rng, buffer)` on every thread for the configured duration.
fn run<R>(threads: usize, config: &Config, read: R) -> Sample
where
    R: Fn(&mut SmallRng, &mut [u8]) + Sync,
{
    let timed = run_timed(threads, config.duration, None, |t| {
        let read = &read;
        move |stop: &Stop| {
            let mut rng = SmallRng::seed_from_u64(0x5eed ^ t as u64);
            let mut buf = vec![0u8; PAGE];
            stop.count_batched(|| read(&mut rng, &mut buf))
        }
    });
    sample(timed.elapsed, &timed.results)
}

fn random_page(rng: &mut SmallRng) -> (usize, u64) {
    (rng.gen_range(0..FILES), rng.gen_range(0..FILE_PAGES))
}

fn aspace(threads: usize, config: &Config) -> Result<Sample, BenchError> {
    let vm = |e: aspace_vm::VmError| BenchError::Setup(format!("file-read: {e}"));
    let memory = Memory::new(4 * FILES as u64 * FILE_PAGES * PAGE as u64).map_err(vm)?;
    let files = (0..FILES)
        .map(|f| {
            let file = File::create(&memory, 0)?;
            for p in 0..FILE_PAGES {
                file.write_at(p * PAGE as u64, &contents(f, p))?;
            }
            Ok(file)
        })
        .collect::<Result<Vec<File>, aspace_vm::VmError>>()
        .map_err(vm)?;
    Ok(run(threads, config, |rng, buf| {
        let (f, p) = random_page(rng);
        let n = files[f].read_at(p * PAGE as u64, buf).unwrap_or(0);
        debug_assert_eq!(n, PAGE);
        std::hint::black_box(&buf[..n]);
    }))
}

/// A `memfd` file of the process, closed on drop.
struct Memfd(i32);

impl Drop for Memfd {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns, once.
        unsafe { libc::close(self.0) };
    }
}

fn linux(threads: usize, config: &Config) -> Result<Sample, BenchError> {
    let os = |what: &str| {
        BenchError::Setup(format!(
            "file-read: {what}: {}",
            std::io::Error::last_os_error()
        ))
    };
    let mut files = Vec::with_capacity(FILES);
    for f in 0..FILES {
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let fd = unsafe { libc::memfd_create(c"aspace-file-read".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os("memfd_create"));
        }
        let file = Memfd(fd);
        for p in 0..FILE_PAGES {
            let page = contents(f, p);
            // SAFETY: `page` is a live buffer of `PAGE` bytes; the result is checked.
            let n = unsafe {
                libc::pwrite(
                    fd,
                    page.as_ptr().cast(),
                    PAGE,
                    (p * PAGE as u64) as libc::off_t,
                )
            };
            if n != PAGE as isize {
                return Err(os("pwrite"));
            }
        }
        files.push(file);
    }
    Ok(run(threads, config, |rng, buf| {
        let (f, p) = random_page(rng);
        // SAFETY: `buf` is a live, writable buffer of `PAGE` bytes.
        let n = unsafe {
            libc::pread(
                files[f].0,
                buf.as_mut_ptr().cast(),
                PAGE,
                (p * PAGE as u64) as libc::off_t,
            )
        };
        debug_assert_eq!(n, PAGE as isize);
        std::hint::black_box(&buf[..]);
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn both_designs_read_the_pages_written() {
        let config = Config {
            duration: Duration::from_millis(5),
            ..Config::default()
        };
        for design in DESIGNS {
            for threads in [1, 2] {
                let s = FileRead.run(design, threads, &config).unwrap();
                assert!(s.ops_per_sec > 0.0, "{design}");
            }
        }
        assert!(FileRead.run("nope", 1, &config).is_err());
        assert!(FileRead.run("aspace", 0, &config).is_err());
        // What every operation reads: a page of the right file, at the right place.
        let memory = Memory::new(1 << 20).unwrap();
        let file = File::create(&memory, 0).unwrap();
        file.write_at(PAGE as u64, &contents(3, 1)).unwrap();
        let mut buf = vec![0; PAGE];
        assert_eq!(file.read_at(PAGE as u64, &mut buf), Ok(PAGE));
        assert_eq!(buf, contents(3, 1));
    }
}
