//! Security test: concurrent readers never see memory they could not legitimately access.
//!
//! Writer cores own "slots" (a few pages each at fixed addresses). Each writer loops over its
//! slots, remapping parts of them: `munmap` of a page range, `mmap(MAP_FIXED)` over a mapped range
//! (replacement), fresh mappings of unmapped ranges by `MAP_FIXED_NOREPLACE` or by hint, and
//! `madvise(DONTNEED)`. Every mapping gets a generation `g` unique in the whole test, and the
//! writer fills each of its pages with the 64-bit word `encode(g, slot, page)` repeated. Reader
//! cores (other threads, each attached) read every slot page continuously.
//!
//! What is asserted:
//! - **No foreign or torn data.** A concurrent reader sees every aligned 8-byte word whole,
//!   either before or after a write of it (frame contents move in aligned atomic words; README,
//!   hazards). So every word of a page read is 0 (a fresh page, or a word the writer has not
//!   stored yet: a write racing the read, legitimate) or `encode(g, slot, page)` for this slot
//!   and page and one generation `g`. Any other word fails the test: a torn word (the bytes of
//!   a word half stored, which plain `memcpy` copies showed under CPU oversubscription), data of
//!   another page, or a second generation in one read.
//! - **No stale data.** A global clock (one atomic counter) orders events: a writer bumps it
//!   after each `munmap`/replacing `mmap`/`DONTNEED` returns and records, per page, the time each
//!   generation stopped being accessible; a reader loads the clock before each read. Seeing
//!   generation `g` in a read that began at or after `g`'s end time means a translation survived
//!   a shootdown (or a frame was reused early): a violation. (The clock makes "began after the
//!   unmap returned" a happens-before fact: the reader's SeqCst load saw the writer's SeqCst
//!   increment, which follows the unmap's return in the writer's program order.)
//! - **A core's own unmap is final for it.** After a writer's `munmap` or `DONTNEED` returns,
//!   its own reads of those pages fault `Unmapped` (resp. read zero) until it maps them again,
//!   even though its soft TLB held them just before (each write is read back first).
//!
//! Observations are checked after the threads join (readers keep, per page and generation, the
//! latest start time at which they saw it). The run is bounded: writers stop after ~1 s once the
//! readers have done a minimum of reads (so a starved reader makes the test longer, not vacuous),
//! with a 30 s cap.
//!
//! Run under both shootdown policies: broadcast (the `coarse` design's) and targeted.
//!
//! Not for: sequential semantics (the differential and conformance tests).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aspace_vm::{
    AddressSpace, Advice, Builder, CoreHandle, Design, Fault, MapFlags, Prot, PAGE_SIZE,
};

const WRITERS: usize = 2;
const READERS: usize = 2;
const SLOTS_PER_WRITER: usize = 4;
const SLOTS: usize = WRITERS * SLOTS_PER_WRITER;
const SLOT_PAGES: u64 = 4;
/// Slots sit 8 pages apart (a gap after each), from here.
const SLOT_BASE: u64 = 0x1000_0000;
const SLOT_STRIDE: u64 = 8 * PAGE_SIZE;
const MIN_RUN: Duration = Duration::from_millis(1000);
const MAX_RUN: Duration = Duration::from_secs(30);
const MIN_READS: u64 = 20_000;
/// Generations the writers map before the run may end (before `MAX_RUN`). A design whose faults
/// never block (`bonsai`) keeps the readers on every CPU of a small machine, and writers that
/// wait in a shootdown for a descheduled reader's access then map far fewer generations per
/// second: the run goes on until they mapped enough, instead of failing on a slow machine.
const MIN_GENERATIONS: u64 = 200;

fn page_addr(slot: usize, page: u64) -> u64 {
    SLOT_BASE + slot as u64 * SLOT_STRIDE + page * PAGE_SIZE
}

/// The word every 8 bytes of page `page` of `slot` hold in generation `g`.
fn encode(g: u64, slot: usize, page: u64) -> u64 {
    (g << 16) | ((slot as u64) << 8) | page
}

fn decode(w: u64) -> (u64, usize, u64) {
    (w >> 16, ((w >> 8) & 0xff) as usize, w & 0xff)
}

fn page_pattern(g: u64, slot: usize, page: u64) -> Vec<u8> {
    encode(g, slot, page)
        .to_ne_bytes()
        .iter()
        .copied()
        .cycle()
        .take(PAGE_SIZE as usize)
        .collect()
}

/// Shared state: the clock and the generation counter.
struct Shared {
    /// The global clock: writers bump it after an unmap-like call returns, readers load it
    /// before a read.
    clock: AtomicU64,
    generation: AtomicU64,
    reads: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    /// The time after an event: SeqCst increment, paired with the readers' SeqCst `load` in
    /// `reader()` (a load that returns this value or later happens after the event).
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// What a writer records: per (slot, page), each generation that was mapped there and when it
/// stopped being accessible (`None`: still mapped at the end... never, the writer unmaps all).
type History = HashMap<(usize, u64), Vec<(u64, Option<u64>)>>;

struct Writer<'a> {
    core: CoreHandle,
    shared: &'a Shared,
    /// Generation currently mapped at each page of each owned slot.
    current: HashMap<(usize, u64), u64>,
    history: History,
    rng: u64,
    own_checks: u64,
}

impl Writer<'_> {
    fn rand(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
    }

    fn end_pages(&mut self, slot: usize, pages: std::ops::Range<u64>, t: u64) {
        for p in pages {
            if let Some(g) = self.current.remove(&(slot, p)) {
                let h = self
                    .history
                    .get_mut(&(slot, p))
                    .expect("history of a mapped page");
                let last = h.last_mut().expect("an entry for the current generation");
                assert_eq!(last.0, g);
                last.1 = Some(t);
            }
        }
    }

    /// Maps a fresh generation over `[a, b)` of `slot` with `flags` (hint or fixed), fills it
    /// and reads it back (which fills this core's TLB).
    fn map_fill(&mut self, slot: usize, a: u64, b: u64, fixed: MapFlags, replacing: bool) {
        let g = self.shared.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let addr = page_addr(slot, a);
        let got = self
            .core
            .mmap(
                addr,
                (b - a) * PAGE_SIZE,
                Prot::READ_WRITE,
                MapFlags::PRIVATE_ANONYMOUS | fixed,
            )
            .unwrap_or_else(|e| panic!("mmap of slot {slot} pages {a}..{b}: {e}"));
        assert_eq!(got, addr, "a free hint or a fixed address is honoured");
        if replacing {
            // The old generations stopped being accessible when the replacing mmap returned.
            let t = self.shared.tick();
            self.end_pages(slot, a..b, t);
        }
        for p in a..b {
            self.current.insert((slot, p), g);
            self.history.entry((slot, p)).or_default().push((g, None));
        }
        let mut buf = vec![0u8; PAGE_SIZE as usize];
        for p in a..b {
            let at = page_addr(slot, p);
            self.core.read(at, &mut buf).expect("a fresh mapping reads");
            assert!(buf.iter().all(|&x| x == 0), "a fresh mapping reads as zero");
            self.core
                .write(at, &page_pattern(g, slot, p))
                .expect("writing a fresh RW mapping");
            self.core.read(at, &mut buf).expect("reading back");
            assert_eq!(
                buf,
                page_pattern(g, slot, p),
                "reading back what was written"
            );
        }
    }

    /// This core's own reads of `[a, b)` of `slot` after it unmapped them: every one faults.
    fn check_unmapped(&mut self, slot: usize, a: u64, b: u64) {
        let mut buf = [0u8; 8];
        for p in a..b {
            let at = page_addr(slot, p);
            match self.core.read(at, &mut buf) {
                Err(Fault::Unmapped { addr }) => assert_eq!(addr, at),
                other => panic!(
                    "a core read slot {slot} page {p} after its own munmap returned: {other:?}"
                ),
            }
            self.own_checks += 1;
        }
    }

    fn step(&mut self, slot: usize) {
        let a = self.rand(SLOT_PAGES);
        let b = a + 1 + self.rand(SLOT_PAGES - a);
        let mapped: Vec<bool> = (a..b)
            .map(|p| self.current.contains_key(&(slot, p)))
            .collect();
        // Unmapped pages of the range stay unmapped for this core until it maps them.
        for (i, m) in mapped.iter().enumerate() {
            if !m {
                self.check_unmapped(slot, a + i as u64, a + i as u64 + 1);
            }
        }
        let all_mapped = mapped.iter().all(|&m| m);
        let none_mapped = mapped.iter().all(|&m| !m);
        match self.rand(4) {
            0 => {
                self.core
                    .munmap(page_addr(slot, a), (b - a) * PAGE_SIZE)
                    .expect("munmap");
                let t = self.shared.tick();
                self.end_pages(slot, a..b, t);
                self.check_unmapped(slot, a, b);
            }
            1 if none_mapped => {
                let how = if self.rand(2) == 0 {
                    MapFlags::FIXED_NOREPLACE
                } else {
                    MapFlags::from_bits_retain(0) // a hint: honoured, the range is free
                };
                self.map_fill(slot, a, b, how, false);
            }
            2 if all_mapped => {
                self.core
                    .madvise(page_addr(slot, a), (b - a) * PAGE_SIZE, Advice::DONTNEED)
                    .expect("madvise DONTNEED over mapped pages");
                // DONTNEED ends the contents of these pages: a later read of them must not see
                // the old generation (it reads zero until the writer writes again, and it does
                // not write again: the generation is ended here and a new one is mapped below).
                let t = self.shared.tick();
                self.end_pages(slot, a..b, t);
                let mut buf = vec![0u8; PAGE_SIZE as usize];
                for p in a..b {
                    self.core
                        .read(page_addr(slot, p), &mut buf)
                        .expect("DONTNEED pages stay mapped");
                    assert!(
                        buf.iter().all(|&x| x == 0),
                        "slot {slot} page {p} reads non-zero after this core's DONTNEED"
                    );
                    self.own_checks += 1;
                }
                // Map a new generation over them (MAP_FIXED replaces the zeroed pages).
                self.map_fill(slot, a, b, MapFlags::FIXED, false);
            }
            _ => self.map_fill(slot, a, b, MapFlags::FIXED, true),
        }
    }
}

/// Per (slot, page, generation): the latest clock value at which a read that saw it began.
type Seen = HashMap<(usize, u64, u64), u64>;

fn reader(mut core: CoreHandle, shared: &Shared) -> Result<Seen, String> {
    let mut seen = Seen::new();
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    let mut n = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        for slot in 0..SLOTS {
            for page in 0..SLOT_PAGES {
                // SeqCst: pairs with the writers' SeqCst increment in `Shared::tick`.
                let t0 = shared.clock.load(Ordering::SeqCst);
                match core.read(page_addr(slot, page), &mut buf) {
                    Ok(()) => {}
                    Err(Fault::Unmapped { .. }) => continue,
                    Err(f) => return Err(format!("reader got {f:?}")),
                }
                let mut value = 0u64;
                for w in buf.chunks_exact(8) {
                    let w = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
                    if w == 0 {
                        continue;
                    }
                    if value == 0 {
                        value = w;
                    } else if w != value {
                        return Err(format!(
                            "slot {slot} page {page}: one read saw two values {value:#x} and {w:#x}"
                        ));
                    }
                }
                if value != 0 {
                    let (g, s, p) = decode(value);
                    if s != slot || p != page {
                        return Err(format!(
                            "slot {slot} page {page} holds data of slot {s} page {p} (gen {g})"
                        ));
                    }
                    let e = seen.entry((slot, page, g)).or_insert(t0);
                    *e = (*e).max(t0);
                }
                n += 1;
            }
        }
        shared.reads.fetch_add(n, Ordering::Relaxed);
        n = 0;
    }
    Ok(seen)
}

#[test]
fn readers_never_see_unmapped_or_foreign_data_while_writers_remap_coarse() {
    readers_versus_writers(AddressSpace::builder().design(Design::Coarse));
}

/// The same under targeted shootdown (the builder's testing hook): a reader is flushed by a
/// writer's unmap only because its page-table walks recorded it in the leaf tables
/// (`page_table/users.rs`), so a reader that cached a translation and was left out would read
/// stale or foreign data here.
#[test]
fn readers_never_see_unmapped_or_foreign_data_while_writers_remap_coarse_with_targeted_shootdown() {
    readers_versus_writers(
        AddressSpace::builder()
            .design(Design::Coarse)
            .targeted_shootdown_for_testing(),
    );
}

/// The `faultlock` design (ASPLOS'12 §5.1): faults under the fault lock only, while writers'
/// `mmap(NULL)` searches run beside them.
#[test]
fn readers_never_see_unmapped_or_foreign_data_while_writers_remap_faultlock() {
    readers_versus_writers(AddressSpace::builder().design(Design::FaultLock));
}

/// The `hybrid` design (ASPLOS'12 §5.2): faults without any space lock, over RCU-freed region
/// objects, while writers remap.
#[test]
fn readers_never_see_unmapped_or_foreign_data_while_writers_remap_hybrid() {
    readers_versus_writers(AddressSpace::builder().design(Design::Hybrid));
}

/// The `interval` design (targeted shootdown is its policy; lock-free faults).
#[test]
fn readers_never_see_unmapped_or_foreign_data_while_writers_remap_interval() {
    readers_versus_writers(AddressSpace::builder().design(Design::Interval));
}

/// The `bonsai` design (ASPLOS'12 §5.3): faults take no lock at all while writers remap.
#[test]
fn readers_never_see_unmapped_or_foreign_data_while_writers_remap_bonsai() {
    readers_versus_writers(AddressSpace::builder().design(Design::Bonsai));
}

/// The `pervma` design (per-VMA locks): faults under their region's read lock.
#[test]
fn readers_never_see_unmapped_or_foreign_data_while_writers_remap_pervma() {
    readers_versus_writers(AddressSpace::builder().design(Design::PerVma));
}

/// The `radix` design (RadixVM): per-core page tables, each core's copies cleared and shot down
/// by the writers' edits.
#[test]
fn readers_never_see_unmapped_or_foreign_data_while_writers_remap_radix() {
    readers_versus_writers(AddressSpace::builder().design(Design::Radix));
}

/// The test (module doc) on a space of `builder`'s design and shootdown policy.
fn readers_versus_writers(builder: Builder) {
    let space = builder
        .memory(16 << 20)
        .max_cores(WRITERS + READERS + 1)
        .tlb_entries(64)
        .frame_batch(4)
        .build()
        .expect("build");
    let shared = Arc::new(Shared {
        clock: AtomicU64::new(0),
        generation: AtomicU64::new(0),
        reads: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let started = Instant::now();
    let (histories, seen, own_checks) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let core = space.attach().expect("attach reader");
                let shared = &*shared;
                s.spawn(move || reader(core, shared))
            })
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let core = space.attach().expect("attach writer");
                let shared = &*shared;
                s.spawn(move || {
                    let mut wr = Writer {
                        core,
                        shared,
                        current: HashMap::new(),
                        history: History::new(),
                        rng: 0x9e37_79b9_7f4a_7c15 ^ (w as u64 + 1),
                        own_checks: 0,
                    };
                    let slots: Vec<usize> =
                        (w * SLOTS_PER_WRITER..(w + 1) * SLOTS_PER_WRITER).collect();
                    let mut i = 0usize;
                    loop {
                        let elapsed = started.elapsed();
                        if elapsed > MAX_RUN
                            || (elapsed > MIN_RUN
                                && shared.reads.load(Ordering::Relaxed) >= MIN_READS
                                && shared.generation.load(Ordering::Relaxed) >= MIN_GENERATIONS)
                        {
                            break;
                        }
                        wr.step(slots[i % slots.len()]);
                        i += 1;
                    }
                    // Unmap everything owned, ending every generation.
                    for &slot in &slots {
                        wr.core
                            .munmap(page_addr(slot, 0), SLOT_PAGES * PAGE_SIZE)
                            .expect("final munmap");
                        let t = shared.tick();
                        wr.end_pages(slot, 0..SLOT_PAGES, t);
                        wr.check_unmapped(slot, 0, SLOT_PAGES);
                    }
                    (wr.history, wr.own_checks)
                })
            })
            .collect();
        let mut histories = History::new();
        let mut own_checks = 0;
        for w in writers {
            let (h, c) = w.join().expect("writer panicked");
            histories.extend(h);
            own_checks += c;
        }
        shared.stop.store(true, Ordering::Relaxed);
        let seen: Vec<Seen> = readers
            .into_iter()
            .map(|r| r.join().expect("reader panicked").expect("reader check"))
            .collect();
        (histories, seen, own_checks)
    });
    let reads = shared.reads.load(Ordering::Relaxed);
    assert!(
        reads >= MIN_READS,
        "readers did only {reads} reads in {MAX_RUN:?}"
    );
    let generations = shared.generation.load(Ordering::Relaxed);
    assert!(
        generations > 100,
        "writers mapped only {generations} generations"
    );
    let mut violations = Vec::new();
    let mut observed = 0usize;
    for s in &seen {
        for (&(slot, page, g), &t0) in s {
            observed += 1;
            let Some(h) = histories.get(&(slot, page)) else {
                violations.push(format!(
                    "slot {slot} page {page}: gen {g} never mapped there"
                ));
                continue;
            };
            match h.iter().find(|(hg, _)| *hg == g) {
                None => violations.push(format!(
                    "slot {slot} page {page}: gen {g} seen but never mapped there"
                )),
                Some((_, Some(end))) if t0 >= *end => violations.push(format!(
                    "slot {slot} page {page}: gen {g} seen by a read that began at {t0}, \
                     after it was unmapped/zapped at {end}"
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        violations.is_empty(),
        "{} violations, first: {:?}",
        violations.len(),
        &violations[..violations.len().min(10)]
    );
    assert!(space.maps().is_empty(), "everything was unmapped");
    eprintln!(
        "security: {generations} generations, {reads} reads, {observed} (page, generation) \
         observations, {own_checks} own-unmap checks in {:.2?}",
        started.elapsed()
    );
}
