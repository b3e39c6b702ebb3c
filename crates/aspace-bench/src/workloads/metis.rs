//! `metis` and `metis-64k` [RadixVM §5.2; ASPLOS'12 (Bonsai) §6]: Metis, a MapReduce library,
//! running its inverted-index job, whose per-core Streamflow allocator "mmaps 8 MB segments" and
//! page-faults them in: "Metis allocates lots of memory and page-faults it in", which is what
//! stresses the VM system.
//!
//! # The job
//! The input is a synthetic text of `--metis-words` words (Zipf-distributed over a 65,536-word
//! vocabulary, fixed seed; `metis/text.rs`). One worker per thread; every worker's intermediate
//! tables live in the address space, in pages of segments its own allocator maps
//! (`metis/segments.rs`: 8 MiB segments for `metis`, 64 KiB for `metis-64k`), written and read
//! through the worker's core a page at a time (`metis/table.rs`). One operation is one whole
//! job on all workers, four phases separated by barriers:
//! 1. **Map.** Worker `w` scans its contiguous share of the text and appends a `(word,
//!    position)` record for each word to bucket `r` of its `threads` buckets, `r` the word's
//!    reducer. Words are assigned to reducers so each gets about the same number of occurrences
//!    ([`Text::assignment`], planned from the text's counts like Metis's sampling, before the
//!    measured window): a hash would leave the two reducers of a 2-thread run several percent
//!    apart under Zipf's skew.
//! 2. **Reduce.** Reducer `r` reads bucket `r` of *every* mapper (other workers' memory, through
//!    its own core), groups the positions by word (a counting sort in a scratch buffer of its
//!    own; positions come out increasing because mappers' shares are in text order) and writes
//!    its run, `word, count, positions...` for each of its words in increasing order, to its own
//!    segments. While writing it notes where each merge range starts in the run.
//! 3. **Merge.** Merger `m` owns a range of words giving about `1/threads` of the merge work
//!    (occurrences plus a cost per word; the splitters come from the text's word counts, like
//!    TeraSort's sampled splitters, before the measured window), reads that
//!    range of *every* reducer's run through its core and merges them by word (the runs hold
//!    disjoint words, so whole groups are copied) into its piece of the final index, in its own
//!    segments. The pieces, in merger order, are the final index, sorted by word.
//! 4. **Free.** Every worker unmaps all its segments; the next job maps fresh ones and faults
//!    them in again.
//!
//! Thread 0 decides at each job boundary whether another job runs (while the measurement lasts;
//! always at least one) and the others follow after a barrier, so every job is whole. The rate is
//! jobs per second of thread 0's time from the start barrier to the end of the last job.
//!
//! # Checking
//! Before the measured window (untimed) the workers run one job whose final index thread 0
//! reads back through its core and compares, entry by entry, with the index computed
//! sequentially in plain Rust; a difference fails the repeat with [`BenchError::WrongResult`].
//!
//! # Extras
//! `jobs_per_sec` (the rate again: the report's Mops/s column rounds it away), `index_words`
//! (distinct words), `index_positions`, `index_bytes` (of the final index), `segments_per_job`
//! (segments mapped by all workers per job), `faults_per_job` (page faults the space counted per
//! job; `linux` counts the process's minor faults).
//!
//! `linux` runs the same code over real memory (`mmap`/`munmap` of this process, `memcpy` to
//! and from the segments). A worker that panics (an engine error) aborts the process: its
//! partners would otherwise wait at the next barrier forever.
//!
//! Not for: Metis's other jobs (word count, k-means), its hash-table / B-tree intermediate
//! structures, or realistic text processing.

pub mod segments;
pub mod table;
pub mod text;

use super::vm::{VmBench, VmCore, VmDriver, ASPACE_MEMORY, FRAME_BATCH, PAGE};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample};
use segments::Segments;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, RwLock};
use std::time::Instant;
use table::{TableDir, TableWriter};
use text::{check_index, Assignment, Text, VOCAB};

pub use crate::limits::{METIS_DEFAULT_WORDS as DEFAULT_WORDS, METIS_MAX_WORDS as MAX_WORDS};

/// `metis`: 8 MiB segments, like Streamflow in Metis.
pub struct Metis;

/// `metis-64k`: the same job with 64 KiB segments (128 times as many `mmap`/`munmap` calls).
pub struct Metis64k;

/// Segment size of `metis`.
pub const SEGMENT: u64 = 8 << 20;

/// Segment size of `metis-64k`.
pub const SEGMENT_64K: u64 = 64 << 10;

impl VmBench for Metis {
    const NAME: &'static str = "metis";
    const ABOUT: &'static str = "MapReduce inverted index over a Zipf text, tables in 8 MiB \
                                 mmap'd segments; jobs/s [RadixVM §5.2, ASPLOS'12 §6 Metis]";
    const MIRRORS: Option<&'static str> =
        Some("RadixVM §5.2, Fig. 4 (8 MB); ASPLOS'12 §6, Fig. 13; SOSP'25 Fig. 15");

    fn check_config(&self, threads: usize, config: &Config) -> Result<(), BenchError> {
        check_fits(threads, config.metis_words)
    }

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        run(driver, threads, config, SEGMENT, Self::NAME)
    }
}

impl VmBench for Metis64k {
    const NAME: &'static str = "metis-64k";
    const ABOUT: &'static str = "metis with 64 KiB segments instead of 8 MiB (more mmap/munmap \
                                 per job) [RadixVM §5.2, ASPLOS'12 §6 Metis]";
    const MIRRORS: Option<&'static str> = Some("RadixVM §5.2, Fig. 4 (64 KB)");

    fn check_config(&self, threads: usize, config: &Config) -> Result<(), BenchError> {
        check_fits(threads, config.metis_words)
    }

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        run(driver, threads, config, SEGMENT_64K, Self::NAME)
    }
}

/// Pages one job on `threads` workers touches with a text of `words` words, plus the frames the
/// workers' cores may hold in their caches: buckets (8 bytes a word), runs and final index (4
/// bytes a word and 8 a distinct word, each), a partial page per bucket, run and piece.
pub fn frames_needed(threads: usize, words: usize) -> u64 {
    let (p, n) = (threads as u64, words as u64);
    let distinct = n.min(VOCAB as u64);
    let bytes = 8 * n + 2 * (4 * n + 8 * distinct);
    bytes.div_ceil(PAGE) + p * p + 2 * p + 2 * FRAME_BATCH as u64 * (p + 1)
}

/// Refuses a text size out of `1..=MAX_WORDS`, or a job that would not fit in half of an
/// engine space's frames (the other half left for page tables and slack).
pub fn check_fits(threads: usize, words: usize) -> Result<(), BenchError> {
    if words == 0 || words > MAX_WORDS {
        return Err(BenchError::InvalidArgument(format!(
            "--metis-words must be in 1..={MAX_WORDS}, got {words}"
        )));
    }
    let need = frames_needed(threads, words);
    let have = ASPACE_MEMORY / PAGE / 2;
    if need > have {
        return Err(BenchError::InvalidArgument(format!(
            "metis with {words} words on {threads} threads needs about {need} pages of a \
             space's {} (half of {} MiB); use fewer --metis-words or threads",
            have,
            ASPACE_MEMORY >> 20
        )));
    }
    Ok(())
}

/// A reducer's output: its run and where each merge range starts in it.
#[derive(Debug, Default)]
struct Run {
    dir: TableDir,
    /// `threads + 1` entry offsets: merge range `m` is `bounds[m]..bounds[m + 1]`.
    bounds: Vec<usize>,
}

/// What the workers of one repeat share. Every field written in one phase is read only after
/// the barrier ending that phase (the locks are never contended for writing).
struct Shared {
    threads: usize,
    text: Arc<Text>,
    /// Merge ranges' first words (`threads + 1`, see [`Text::splitters`]).
    splitters: Vec<u32>,
    /// Each word's reducer and each reducer's words.
    assignment: Assignment,
    barrier: Barrier,
    /// Thread 0's decision whether the next job runs. Relaxed: written before a barrier and read
    /// after it, and the barrier (a mutex and condition variable) orders the two.
    go: AtomicBool,
    /// `buckets[mapper][reducer]`, published at the end of the map phase.
    buckets: Vec<RwLock<Vec<TableDir>>>,
    /// `runs[reducer]`, published at the end of the reduce phase.
    runs: Vec<RwLock<Run>>,
    /// `pieces[merger]`: the final index in merger order, published at the end of the merge.
    pieces: Vec<RwLock<TableDir>>,
    /// The checked job's verdict (`Err`: what differed).
    verdict: Mutex<Option<Result<(), String>>>,
    /// Tests only: thread 0 overwrites an entry of the final index in the space before the
    /// check, which must then fail.
    corrupt: bool,
}

/// One worker: its core, allocator and scratch buffers (process memory, reused by every job).
struct Worker<C> {
    t: usize,
    core: C,
    segs: Segments,
    writers: Vec<TableWriter>,
    /// Reduce: the records read from every mapper.
    recs: Vec<u32>,
    /// Reduce: occurrences of each word in this partition, then each word's next slot.
    counts: Vec<u32>,
    cursor: Vec<u32>,
    /// Reduce: the run being built; merge: scratch.
    out: Vec<u32>,
    /// Merge: the slice of each run.
    slices: Vec<Vec<u32>>,
}

/// Aborts the process if dropped while panicking (see the module doc).
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("metis: a worker panicked; aborting (its partners wait at a barrier)");
            std::process::abort();
        }
    }
}

impl<C: VmCore> Worker<C> {
    fn new(t: usize, core: C, segment: u64, threads: usize) -> Self {
        Worker {
            t,
            core,
            segs: Segments::new(segment),
            writers: (0..threads).map(|_| TableWriter::default()).collect(),
            recs: Vec::new(),
            counts: vec![0; VOCAB],
            cursor: vec![0; VOCAB],
            out: Vec::new(),
            slices: vec![Vec::new(); threads],
        }
    }

    /// Runs one whole job (the module doc's four phases) with the other workers; with `check`,
    /// thread 0 also reads the final index back and records the verdict in `sh`.
    fn job(&mut self, sh: &Shared, check: bool) {
        let (t, p) = (self.t, sh.threads);
        // 1. Map.
        let n = sh.text.words.len();
        let (lo, hi) = (t * n / p, (t + 1) * n / p);
        for (i, &w) in sh.text.words[lo..hi].iter().enumerate() {
            let r = sh.assignment.reducer_of[w as usize] as usize;
            self.writers[r].push2(&mut self.core, &mut self.segs, w, (lo + i) as u32);
        }
        {
            let mut slot = sh.buckets[t].write().unwrap_or_else(|e| e.into_inner());
            slot.clear();
            for w in &mut self.writers {
                slot.push(w.finish(&mut self.core, &mut self.segs));
            }
        }
        sh.barrier.wait();
        // 2. Reduce partition t.
        self.recs.clear();
        for m in 0..p {
            let slot = sh.buckets[m].read().unwrap_or_else(|e| e.into_inner());
            let b = &slot[t];
            // SAFETY: mapper m finished the bucket before the barrier and unmaps it only after
            // the merge phase's barrier; nobody writes it meanwhile.
            unsafe { b.read_range(&mut self.core, 0, b.len, &mut self.recs) };
        }
        for r in self.recs.chunks_exact(2) {
            self.counts[r[0] as usize] += 1;
        }
        self.out.clear();
        let mut bounds = Vec::with_capacity(p + 1);
        for &w in &sh.assignment.words_of[t] {
            while bounds.len() < p && sh.splitters[bounds.len()] <= w {
                bounds.push(self.out.len());
            }
            let w = w as usize;
            let c = self.counts[w];
            if c > 0 {
                self.counts[w] = 0;
                self.out.extend_from_slice(&[w as u32, c]);
                self.cursor[w] = self.out.len() as u32;
                self.out.resize(self.out.len() + c as usize, 0);
            }
        }
        while bounds.len() <= p {
            bounds.push(self.out.len());
        }
        for r in self.recs.chunks_exact(2) {
            let slot = &mut self.cursor[r[0] as usize];
            self.out[*slot as usize] = r[1];
            *slot += 1;
        }
        let run = &mut self.writers[0];
        run.push(&mut self.core, &mut self.segs, &self.out);
        let dir = run.finish(&mut self.core, &mut self.segs);
        *sh.runs[t].write().unwrap_or_else(|e| e.into_inner()) = Run { dir, bounds };
        sh.barrier.wait();
        // 3. Merge range t of every run.
        for r in 0..p {
            let run = sh.runs[r].read().unwrap_or_else(|e| e.into_inner());
            let s = &mut self.slices[r];
            s.clear();
            // SAFETY: reducer r finished its run before the barrier and unmaps it only after
            // the next one; nobody writes it meanwhile.
            unsafe {
                run.dir
                    .read_range(&mut self.core, run.bounds[t], run.bounds[t + 1], s)
            };
        }
        let mut at = vec![0usize; p];
        let piece = &mut self.writers[0];
        loop {
            // The run whose next group has the smallest word (runs hold disjoint words).
            let next = (0..p)
                .filter(|&r| at[r] < self.slices[r].len())
                .min_by_key(|&r| self.slices[r][at[r]]);
            let Some(r) = next else { break };
            let s = &self.slices[r];
            let len = 2 + s[at[r] + 1] as usize;
            piece.push(&mut self.core, &mut self.segs, &s[at[r]..at[r] + len]);
            at[r] += len;
        }
        let dir = piece.finish(&mut self.core, &mut self.segs);
        *sh.pieces[t].write().unwrap_or_else(|e| e.into_inner()) = dir;
        sh.barrier.wait();
        if check {
            if t == 0 {
                if sh.corrupt {
                    let d = sh.pieces[0].read().unwrap_or_else(|e| e.into_inner());
                    // SAFETY: a finished page of the final index, read by no one but this
                    // thread until the barrier below.
                    unsafe { self.core.write(d.pages[0] + 4, &[0xff; 4]) };
                }
                let mut index = Vec::new();
                for piece in &sh.pieces {
                    let d = piece.read().unwrap_or_else(|e| e.into_inner());
                    // SAFETY: finished before the barrier, unmapped only after the next one.
                    unsafe { d.read_range(&mut self.core, 0, d.len, &mut index) };
                }
                let verdict = check_index(&index, &sh.text.reference);
                *sh.verdict.lock().unwrap_or_else(|e| e.into_inner()) = Some(verdict);
            }
            sh.barrier.wait();
        }
        // 4. Free.
        // SAFETY: every worker passed the barrier after the merge (and the check), the last
        // phase that reads other workers' tables.
        unsafe { self.segs.unmap_all(&mut self.core) };
    }
}

/// What a worker's measured body returns.
#[derive(Debug, Default)]
struct Counted {
    jobs: u64,
    segments: u64,
    faults: u64,
    secs: f64,
}

/// One repeat of `name` with segments of `segment` bytes.
fn run<D: VmDriver>(
    driver: &D,
    threads: usize,
    config: &Config,
    segment: u64,
    name: &str,
) -> Result<Sample, BenchError> {
    run_checked(driver, threads, config, segment, name, false)
}

/// [`run`], with the final index corrupted before its check when `corrupt` (tests).
fn run_checked<D: VmDriver>(
    driver: &D,
    threads: usize,
    config: &Config,
    segment: u64,
    name: &str,
    corrupt: bool,
) -> Result<Sample, BenchError> {
    check_fits(threads, config.metis_words)?;
    let text = text::text(config.metis_words);
    let sh = Shared {
        threads,
        splitters: text.splitters(threads),
        assignment: text.assignment(threads),
        text: text.clone(),
        barrier: Barrier::new(threads),
        go: AtomicBool::new(false),
        buckets: (0..threads).map(|_| RwLock::default()).collect(),
        runs: (0..threads).map(|_| RwLock::default()).collect(),
        pieces: (0..threads).map(|_| RwLock::default()).collect(),
        verdict: Mutex::new(None),
        corrupt,
    };
    let timed = run_timed(threads, config.duration, None, |t| {
        let guard = AbortOnPanic;
        let mut worker = Worker::new(t, driver.attach(), segment, threads);
        worker.job(&sh, true);
        let sh = &sh;
        move |stop: &Stop| {
            let _guard = guard;
            let start = Instant::now();
            let (faults0, segs0) = (driver.faults(), worker.segs.total_mapped());
            let ok = || {
                let v = sh.verdict.lock().unwrap_or_else(|e| e.into_inner());
                matches!(*v, Some(Ok(())))
            };
            let mut jobs = 0u64;
            loop {
                if t == 0 {
                    let go = ok() && (jobs == 0 || !stop.is_set());
                    // Relaxed: published by the barrier below (see `Shared::go`).
                    sh.go.store(go, Ordering::Relaxed);
                }
                sh.barrier.wait();
                if !sh.go.load(Ordering::Relaxed) {
                    break;
                }
                worker.job(sh, false);
                jobs += 1;
            }
            Counted {
                jobs,
                segments: worker.segs.total_mapped() - segs0,
                faults: driver.faults().saturating_sub(faults0),
                secs: start.elapsed().as_secs_f64(),
            }
        }
    });
    if let Some(Err(message)) = sh.verdict.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(BenchError::WrongResult {
            workload: name.to_string(),
            design: String::new(),
            message,
        });
    }
    let lead = &timed.results[0];
    let jobs = lead.jobs.max(1) as f64;
    let segments: u64 = timed.results.iter().map(|c| c.segments).sum();
    let index_entries: usize = sh
        .pieces
        .iter()
        .map(|p| p.read().unwrap_or_else(|e| e.into_inner()).len)
        .sum();
    let rate = lead.jobs as f64 / lead.secs;
    let mut s = Sample {
        ops_per_sec: rate,
        op_threads: 1,
        ..Sample::default()
    };
    // Also as an extra: the table's Mops/s column rounds a few dozen jobs/s to 0.000.
    s = s
        .with("jobs_per_sec", rate)
        .with("index_words", text.distinct() as f64)
        .with("index_positions", text.words.len() as f64)
        .with("index_bytes", (4 * index_entries) as f64)
        .with("segments_per_job", segments as f64 / jobs)
        .with("faults_per_job", lead.faults as f64 / jobs);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::super::vm::{engine_builder, AspaceDriver, LinuxDriver, Vm};
    use super::*;
    use crate::workload::Workload;
    use std::time::Duration;

    fn small(words: usize) -> Config {
        Config {
            duration: Duration::from_millis(1),
            metis_words: words,
            ..Config::default()
        }
    }

    /// Every run checks its first job's index against the sequential one and fails otherwise,
    /// so `Ok` here means the index was right (on every design, both segment sizes, even and
    /// uneven shares, more workers than CPUs).
    #[test]
    fn the_index_equals_the_sequential_one_on_every_design_and_segment_size() {
        let config = small(20_000);
        for w in [&Vm(Metis) as &dyn Workload, &Vm(Metis64k)] {
            for &design in w.designs() {
                for threads in [1, 2, 3] {
                    let s = w
                        .run(design, threads, &config)
                        .unwrap_or_else(|e| panic!("{} {design} {threads}T: {e}", w.name()));
                    assert!(s.ops_per_sec > 0.0, "{} {design} {threads}T", w.name());
                    assert_eq!(s.extra["index_positions"], 20_000.0);
                    let words = s.extra["index_words"];
                    let bytes = 4.0 * (2.0 * words + 20_000.0);
                    assert_eq!(s.extra["index_bytes"], bytes, "{} {design}", w.name());
                    assert!(s.extra["faults_per_job"] > 0.0);
                    assert!(s.extra["segments_per_job"] >= threads as f64);
                }
            }
        }
    }

    #[test]
    fn small_segments_take_more_segments_per_job() {
        let config = small(50_000);
        let big = Vm(Metis).run("interval", 2, &config).unwrap();
        let small = Vm(Metis64k).run("interval", 2, &config).unwrap();
        assert!(
            small.extra["segments_per_job"] > 4.0 * big.extra["segments_per_job"],
            "{:?} vs {:?}",
            small.extra,
            big.extra
        );
    }

    #[test]
    fn a_corrupted_index_fails_the_run() {
        let config = small(5_000);
        let e = run_checked(&LinuxDriver, 2, &config, SEGMENT, "metis", true).unwrap_err();
        assert!(matches!(e, BenchError::WrongResult { .. }), "{e}");
        let driver = AspaceDriver::new(engine_builder("interval").unwrap(), "interval", 2).unwrap();
        let e = run_checked(&driver, 2, &config, SEGMENT_64K, "metis-64k", true).unwrap_err();
        assert!(e.to_string().contains("wrong result"), "{e}");
        // The same size, uncorrupted, passes.
        assert!(Vm(Metis).run("coarse", 1, &config).is_ok());
    }

    #[test]
    fn sizes_that_cannot_fit_are_refused_before_running() {
        for (threads, words) in [(1, 0), (1, MAX_WORDS + 1), (64, MAX_WORDS)] {
            let e = Vm(Metis).run("linux", threads, &small(words)).unwrap_err();
            assert!(matches!(e, BenchError::InvalidArgument(_)), "{e}");
        }
        assert!(check_fits(64, DEFAULT_WORDS).is_ok());
        assert!(check_fits(1, MAX_WORDS).is_ok());
    }
}
