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
//! Readers for callers' threads come from a small pool of registered RCU readers (a thread
//! registering per call would cost a registry insertion each time).
//!
//! Not for: deciding which pages exist (the file's lock and its list of pages, `file.rs`), or
//! the frames' memory (`frames.rs`).

use crate::frames::Frame;
use crate::sync::stat::Mutex;
use aspace_map::{Cht, ChtConfig};
use aspace_rcu::{Domain, DomainConfig, Reader};
use std::hash::{BuildHasher, Hasher};

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

/// Pages of all files of one memory (module doc).
pub(crate) struct PageCache {
    map: Cht<PageKey, Frame, PageHasher>,
    /// Registered readers of the map's domain, lent to callers' threads one lookup batch at a
    /// time.
    readers: Mutex<Vec<Reader>>,
}

impl PageCache {
    /// An empty cache with its own RCU domain; `None` when the domain's reclaimer thread
    /// cannot be started.
    pub(crate) fn new() -> Option<PageCache> {
        let domain = Domain::try_with_config(DomainConfig::default()).ok()?;
        Some(PageCache {
            map: Cht::with_config(domain, ChtConfig::default(), PageHasher),
            readers: Mutex::new(Vec::new()),
        })
    }

    /// Pages cached.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Runs `f` inside one read section of the cache's domain, with a lookup function valid in
    /// it: frames it returns are neither freed nor reused before `f` returns (module doc).
    pub(crate) fn read<R>(&self, f: impl FnOnce(&dyn Fn(PageKey) -> Option<Frame>) -> R) -> R {
        let reader = self
            .readers
            .lock()
            .pop()
            .unwrap_or_else(|| self.map.domain().register());
        let r = {
            let guard = reader.read();
            let lookup = |key: PageKey| self.map.get(&key, &guard).copied();
            f(&lookup)
        };
        self.readers.lock().push(reader);
        r
    }

    /// Adds `frame` (counted, its count holding the cache's reference) as `key`'s page.
    /// The caller holds the file's lock, under which `key` is absent.
    pub(crate) fn insert(&self, key: PageKey, frame: Frame) {
        let added = self.map.insert_unique(key, frame);
        debug_assert!(added.is_ok(), "page {key:?} inserted twice");
    }

    /// Removes `key`'s page, returning its frame (still holding the cache's reference, which
    /// the caller drops after [`PageCache::synchronize`]). The caller holds the file's lock.
    pub(crate) fn remove(&self, key: PageKey) -> Option<Frame> {
        let frame = self.read(|lookup| lookup(key))?;
        let removed = self.map.remove(&key);
        debug_assert!(removed, "page {key:?} vanished under its file's lock");
        Some(frame)
    }

    /// Waits until every lookup that may have found a removed page has ended.
    pub(crate) fn synchronize(&self) {
        self.map.domain().synchronize();
    }
}
