//! [`Memory`]: real memory that files live in: a frame pool, the reference counts of its shared
//! frames, and the page cache of the files created in it.
//!
//! A [`File`](crate::File) is created in a `Memory` and keeps its pages there, in the page cache
//! (`page_cache.rs`: the thesis' CHT keyed by file and page index). `Memory` is a handle: clones
//! share one memory, which lives until the last handle and the last file in it are gone.
//!
//! File I/O runs on the caller's thread, which is no core of any space, so its frames come from
//! one cache of the pool behind a mutex (`io_frames`): `File::write_at` of a new page and the
//! frees of truncated pages take it once per page. The page cache's lookups take no lock.
//!
//! Not for: the frames of an address space's anonymous memory (each space has its own pool,
//! `frames.rs`; spaces built in a `Memory`, so that they can map its files and share its
//! frames, come with file mappings), or page-table memory.

use crate::error::{Limit, VmError};
use crate::frames::{Frame, FrameCache, FramePool};
use crate::page_cache::PageCache;
use crate::sync::stat::{AtomicU64, Mutex};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Frames moved at once between the I/O cache and the pool's global list.
const IO_BATCH: usize = 64;

/// Real memory for files (module doc). Cheap to clone: clones are handles to one memory.
#[derive(Clone)]
pub struct Memory {
    pub(crate) inner: Arc<MemoryInner>,
}

/// What the handles of one [`Memory`] share.
pub(crate) struct MemoryInner {
    /// The frames (page-cache pages are counted frames: `FramePool::refs`).
    pub(crate) pool: FramePool,
    /// Frames for file I/O on callers' threads (module doc).
    io_frames: Mutex<FrameCache>,
    /// The files' pages.
    pub(crate) cache: PageCache,
    /// The last file number handed out (files are numbered 1, 2, ... like inodes).
    last_file: AtomicU64,
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
    /// like a space's: untouched frames cost nothing.
    ///
    /// # Errors
    /// [`VmError::OutOfMemory`]`(`[`Limit::Frames`]`)` when `bytes` holds no whole frame or
    /// more than 2^32 - 1, or the reservation fails; `(`[`Limit::Memory`]`)` when the page
    /// cache's RCU reclaimer thread cannot be started.
    pub fn new(bytes: u64) -> Result<Memory, VmError> {
        let pool = FramePool::new(bytes, IO_BATCH)?;
        let cache = PageCache::new().ok_or(VmError::OutOfMemory(Limit::Memory))?;
        Ok(Memory {
            inner: Arc::new(MemoryInner {
                pool,
                io_frames: Mutex::new(FrameCache::new()),
                cache,
                last_file: AtomicU64::new(0),
            }),
        })
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
        self.inner.cache.len()
    }

    /// Whether `a` and `b` are handles to the same memory.
    pub fn ptr_eq(a: &Memory, b: &Memory) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }
}

impl MemoryInner {
    /// A fresh file number.
    pub(crate) fn next_file(&self) -> u64 {
        // Relaxed: uniqueness needs only the RMW's atomicity.
        self.last_file.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A zeroed exclusive frame for file I/O, or `None` when the memory is full.
    pub(crate) fn alloc_io(&self) -> Option<Frame> {
        self.io_frames.lock().alloc(&self.pool)
    }

    /// Frees the exclusive frame `f` (zeroed on the way). The caller guarantees nothing can
    /// reach it any more: no page-cache lookup (removed a grace period ago) and no holder.
    pub(crate) fn free_io(&self, f: Frame) {
        self.io_frames.lock().free(&self.pool, f);
    }
}

impl Drop for MemoryInner {
    fn drop(&mut self) {
        // The I/O cache's frames go back to the pool (which is dropped right after; this keeps
        // the pool's accounting exact for a test that inspects it before).
        self.io_frames.lock().drain(&self.pool);
    }
}
