//! The page cache: the pages of every file of one [`Memory`](crate::Memory), in the thesis' RCU
//! hash table (`aspace_map::Cht`, RCU for HelenOS §5.1) keyed by (file number, page index),
//! each value a counted frame of the memory's pool holding one reference for the cache.
//!
//! Lookups are lock-free: a read section of the cache's own RCU domain, one CHT lookup, then the
//! frame is used (read, or referenced with `FrameRefs::get`) before the section ends. A page
//! leaves the cache only under its file's lock (`file.rs`: truncation and the file's end); the
//! remover waits for a grace period of the domain before it drops the cache's reference, so a
//! frame found inside a section is neither freed nor reused before that section ends: no
//! "get unless zero" and no re-check after the lookup (Linux's `folio_try_get` plus the
//! xarray re-check do that job for its lock-free page-cache lookups).
//!
//! Readers for callers' threads come from a pool of registered RCU readers, one slot per
//! thread number (as `aspace_map`'s skiplist pools its updaters' readers): a thread
//! registering per call would cost a registry insertion each time, and one shared list of
//! readers would be a line every read writes.
//!
//! Not for: deciding which pages exist (the file's lock and its list of pages, `file.rs`), or
//! the frames' memory (`frames.rs`).

use crate::frames::Frame;
use crate::sync::stat::Mutex;
use aspace_map::{Cht, ChtConfig};
use aspace_rcu::{Domain, DomainConfig, Reader};
use crossbeam_utils::CachePadded;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A page of a file: the file's number and the page's index in it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct PageKey {
    pub(crate) file: u64,
    pub(crate) index: u64,
}

/// The cache's hasher: a multiplicative mix of the key's two words (the CHT mixes the result
/// again before taking its top bits, `cht/node.rs`), so a lookup hashes without SipHash's cost.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct PageHasher;

/// [`PageHasher`]'s state.
#[derive(Default)]
pub(crate) struct PageHash(u64);

impl Hasher for PageHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl BuildHasher for PageHasher {
    type Hasher = PageHash;

    fn build_hasher(&self) -> PageHash {
        PageHash(0)
    }
}

/// Reader slots: threads with consecutive numbers have slots of their own up to this many.
const SLOTS: usize = 64;

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's number (its home slot is the number modulo [`SLOTS`]).
    static THREAD_NO: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// Pages of all files of one memory (module doc).
pub(crate) struct PageCache {
    map: Cht<PageKey, Frame, PageHasher>,
    /// Registered readers of the map's domain, each behind an uncontended lock on its own line:
    /// a thread takes its home slot's (another free one, or registers a temporary reader, when
    /// it is taken), so concurrent reads on different threads write no common line.
    readers: Box<[CachePadded<Mutex<Option<Reader>>>]>,
}

impl PageCache {
    /// An empty cache with its own RCU domain; `None` when the domain's reclaimer thread
    /// cannot be started.
    pub(crate) fn new() -> Option<PageCache> {
        let domain = Domain::try_with_config(DomainConfig::default()).ok()?;
        Some(PageCache {
            map: Cht::with_config(domain, ChtConfig::default(), PageHasher),
            readers: (0..SLOTS)
                .map(|_| CachePadded::new(Mutex::new(None)))
                .collect(),
        })
    }

    /// Pages cached.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Runs `f` inside one read section of the cache's domain, with a lookup function valid in
    /// it: frames it returns are neither freed nor reused before `f` returns (module doc).
    pub(crate) fn read<R>(&self, f: impl FnOnce(&dyn Fn(PageKey) -> Option<Frame>) -> R) -> R {
        let home = THREAD_NO.with(|n| *n);
        let slot = (0..SLOTS).find_map(|k| self.readers[(home + k) % SLOTS].try_lock());
        let section = |reader: &Reader| {
            let guard = reader.read();
            let lookup = |key: PageKey| self.map.get(&key, &guard).copied();
            f(&lookup)
        };
        match slot {
            Some(mut slot) => {
                let reader = slot.get_or_insert_with(|| self.map.domain().register());
                section(reader)
            }
            // Every slot is in use (more than `SLOTS` threads reading at once, or a read
            // inside a read): a reader for this call only.
            None => section(&self.map.domain().register()),
        }
    }

    /// Adds `frame` (counted, its count holding the cache's reference) as `key`'s page.
    /// The caller holds the file's lock, under which `key` is absent.
    pub(crate) fn insert(&self, key: PageKey, frame: Frame) {
        let added = self.map.insert_unique(key, frame);
        // A hard check: a refused insert would lose the caller's page (and leak its frame).
        assert!(added.is_ok(), "page {key:?} inserted twice");
    }

    /// Removes `key`'s page, returning its frame (still holding the cache's reference, which
    /// the caller drops after [`PageCache::synchronize`]).
    /// The caller holds the file's lock and knows the page is cached (the file's set says so):
    /// nobody else removes it, so the frame looked up is the one removed.
    pub(crate) fn remove(&self, key: PageKey) -> Frame {
        let frame = self.read(|lookup| lookup(key));
        let removed = self.map.remove(&key);
        // Hard checks: a page missing here would mean the file's set and the cache disagree,
        // and a frame put twice frees another owner's page.
        assert!(
            removed,
            "page {key:?} missing from the cache under its file's lock"
        );
        frame.expect("present: removed just after")
    }

    /// Waits until every lookup that may have found a removed page has ended.
    pub(crate) fn synchronize(&self) {
        self.map.domain().synchronize();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{File, Memory};
    use std::sync::mpsc::channel;
    use std::time::Duration;

    /// A read never waits for a reader slot: with every slot held (by this thread, as a
    /// preempted reader would hold its own), a read on another thread still finishes, with a
    /// reader of its own (review of issue 23: the pool was one mutex that every read took
    /// twice). The 10 s bound is a watchdog that turns a hang into a failure, not a timing.
    #[test]
    fn a_read_does_not_wait_for_a_held_reader_slot() {
        let m = Memory::new(16 * 4096).unwrap();
        let a = File::create(&m, 0).unwrap();
        a.write_at(0, &[1; 8]).unwrap();
        let cache = m.inner.cache();
        let held: Vec<_> = cache.readers.iter().map(|slot| slot.lock()).collect();
        let (tx, rx) = channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut buf = [0; 8];
                tx.send(a.read_at(0, &mut buf).map(|n| (n, buf))).unwrap();
            });
            let got = rx.recv_timeout(Duration::from_secs(10));
            drop(held);
            assert_eq!(
                got,
                Ok(Ok((8, [1; 8]))),
                "a read waited for a held reader slot"
            );
        });
    }
}
