//! [`Memory`]: real memory that files live in: a frame pool, the reference counts of its shared
//! frames, and the page cache of the files created in it.
//!
//! A [`File`](crate::File) is created in a `Memory` and keeps its pages there, in the page cache
//! (`page_cache.rs`: the thesis' CHT keyed by file and page index). `Memory` is a handle: clones
//! share one memory, which lives until the last handle and the last file in it are gone.
//!
//! File I/O runs on the caller's thread, which is no core of any space, so its frames come from
//! and go back to the pool's global list directly (`FramePool::alloc_direct`/`free_direct`:
//! one lock per page a write adds or a truncation frees; no per-thread cache that would keep
//! frees out of the spaces' reach). The page cache's lookups take no lock.
//!
//! Not for: the frames of an address space's anonymous memory (each space has its own pool,
//! `frames.rs`; spaces built in a `Memory`, so that they can map its files and share its
//! frames, come with file mappings), or page-table memory.

use crate::config::Config;
use crate::error::{Limit, VmError};
use crate::fork;
use crate::frames::{Frame, FramePool};
use crate::page_cache::PageCache;
use crate::sync::stat::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// Real memory for files (module doc). Cheap to clone: clones are handles to one memory.
#[derive(Clone)]
pub struct Memory {
    pub(crate) inner: Arc<MemoryInner>,
}

/// What the handles of one [`Memory`] share.
pub(crate) struct MemoryInner {
    /// The frames (page-cache pages are counted frames: `FramePool::refs`).
    pub(crate) pool: FramePool,
    /// The files' pages (made with the first file: a space's own memory has none and starts
    /// no reclaimer thread for it).
    cache: OnceLock<PageCache>,
    /// The last file number handed out (files are numbered 1, 2, ... like inodes).
    last_file: AtomicU64,
    /// The process's fork generation when the memory was made (`fork.rs`).
    born: u64,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("frames_total", &self.frames_total())
            .field("frames_in_use", &self.frames_in_use())
            .field("cached_pages", &self.cached_pages())
            .finish()
    }
}

impl Memory {
    /// `bytes` of memory (rounded down to whole 4 KiB frames), reserved with `MAP_NORESERVE`
    /// like a space's: untouched frames cost nothing. Frames move between the pool and the
    /// per-core caches of the spaces built in it 64 at a time (`Config`'s default
    /// `frame_batch`).
    ///
    /// # Errors
    /// [`VmError::OutOfMemory`]`(`[`Limit::Frames`]`)` when `bytes` holds no whole frame or
    /// more than 2^32 - 1, or the reservation fails.
    pub fn new(bytes: u64) -> Result<Memory, VmError> {
        Memory::with_batch(bytes, Config::default().frame_batch)
    }

    /// `bytes` of memory whose frames move between the pool and the per-core caches `batch` at
    /// a time (a space's own memory: `Config::frame_batch`).
    pub(crate) fn with_batch(bytes: u64, batch: usize) -> Result<Memory, VmError> {
        Ok(Memory {
            inner: Arc::new(MemoryInner {
                pool: FramePool::new(bytes, batch)?,
                cache: OnceLock::new(),
                last_file: AtomicU64::new(0),
                born: fork::generation(),
            }),
        })
    }

    /// Whether another handle than the caller's exists (another space, a file, the user's).
    pub(crate) fn is_shared(&self) -> bool {
        Arc::strong_count(&self.inner) > 1
    }

    /// Frames in this memory.
    pub fn frames_total(&self) -> u64 {
        self.inner.pool.capacity()
    }

    /// Frames in use (pages of live files, and truncated pages whose grace period has not
    /// ended yet). Exact when no file operation is in flight.
    pub fn frames_in_use(&self) -> u64 {
        self.inner.pool.in_use()
    }

    /// Pages in the page cache, over all files.
    pub fn cached_pages(&self) -> usize {
        self.inner.cache.get().map_or(0, PageCache::len)
    }

    /// Whether `a` and `b` are handles to the same memory.
    pub fn ptr_eq(a: &Memory, b: &Memory) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }
}

impl MemoryInner {
    /// The page cache, made by the first call.
    ///
    /// # Errors
    /// [`VmError::OutOfMemory`]`(`[`Limit::Memory`]`)` when its RCU reclaimer thread cannot be
    /// started.
    pub(crate) fn cache_or_make(&self) -> Result<&PageCache, VmError> {
        if let Some(c) = self.cache.get() {
            return Ok(c);
        }
        let made = PageCache::new().ok_or(VmError::OutOfMemory(Limit::Memory))?;
        // A racing first file may have set it: that one is kept, ours dropped.
        Ok(self.cache.get_or_init(|| made))
    }

    /// The page cache of a memory that has files (every caller holds a file of it).
    pub(crate) fn cache(&self) -> &PageCache {
        self.cache
            .get()
            .expect("the page cache exists once a file does")
    }

    /// Whether this is a forked child of the process that made the memory: its page cache's
    /// locks and RCU reclaimer thread are the parent's (`fork.rs`).
    pub(crate) fn in_forked_child(&self) -> bool {
        fork::forked_since(self.born)
    }

    /// A fresh file number.
    pub(crate) fn next_file(&self) -> u64 {
        // Relaxed: uniqueness needs only the RMW's atomicity.
        self.last_file.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A zeroed exclusive frame for file I/O, or `None` when the memory is full.
    pub(crate) fn alloc_io(&self) -> Option<Frame> {
        self.pool.alloc_direct()
    }

    /// Frees the exclusive frame `f` (zeroed on the way) to the pool's global list, where the
    /// spaces' cores can take it. The caller guarantees nothing can reach it any more: no
    /// page-cache lookup (removed a grace period ago) and no holder.
    pub(crate) fn free_io(&self, f: Frame) {
        self.pool.free_direct(f);
    }
}

impl Drop for MemoryInner {
    fn drop(&mut self) {
        if self.in_forked_child() {
            // Dropping the page cache would join its RCU domain's reclaimer thread, which does
            // not exist in the child (and its locks may be frozen held): leak it.
            if let Some(cache) = self.cache.take() {
                std::mem::forget(cache);
            }
        }
    }
}
