//! [`File`]: an in-memory file in the spirit of Linux's `memfd`: a length and pages in the page
//! cache of the [`Memory`] it was created in, read and written at offsets, truncated and
//! extended with [`File::set_len`].
//!
//! # Semantics (Linux's, for a tmpfs/memfd file)
//! - A hole (a page never written, or past a truncation) reads as zeros and takes no frame;
//!   a page gets its frame at its first write.
//! - `write_at` past the end extends the file; `read_at` stops at the end (a short read).
//! - Shrinking frees the pages wholly past the new end and zeroes the rest of the page the new
//!   end falls in (Linux's `truncate_inode_pages_range`), so a later extension reads zeros
//!   there, as it does after `ftruncate` on Linux.
//! - Errors carry Linux's errno: `EINVAL` for offsets and lengths past `i64::MAX` (negative
//!   `loff_t`s to Linux), `EFBIG` for a write at the largest file size (`i64::MAX`, Linux's
//!   `MAX_LFS_FILESIZE`), `ENOSPC` when the memory has no frame left for a new page (tmpfs'
//!   answer; a write that wrote some bytes first returns their count, as `pwrite` does).
//! - In a forked child of the process that made the file (its memory's page cache has locks
//!   and a reclaimer thread of the parent's), every call refuses with `ENOTRECOVERABLE` and
//!   dropping the last handle leaks its pages, as spaces do (`fork.rs`).
//!
//! # Concurrency
//! Writes and length changes of one file take the file's lock (Linux takes the inode's
//! `i_rwsem` for both), which also guards the set of page indices the file has: a page is in
//! the set exactly when it is in the page cache, both changed under the lock. Reads take no
//! lock: they read the length, look pages up in the page cache inside one RCU read section
//! (`page_cache.rs`), copy, and clamp the count to the length read again afterwards, so a read
//! racing a truncation returns no byte past the end the truncation left. Frame contents are
//! moved with `frame_io` (aligned 64-bit atomic words): a read racing a write of the same bytes
//! sees each aligned word before or after it, never a torn word. A truncated page leaves the
//! cache under the lock; its frame is freed only after a grace period of the cache's domain,
//! which `set_len` waits for after unlocking, so no racing read copies from a reused frame.
//!
//! Not for: mapping files into address spaces (comes with file-backed `mmap`), or persistence.

use crate::error::VmError;
use crate::frame_io::{read_from_frame, write_to_frame};
use crate::frames::Frame;
use crate::memory::{Memory, MemoryInner};
use crate::page_cache::PageKey;
use crate::sync::stat::{AtomicU64, Mutex};
use crate::types::PAGE_SIZE;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The largest file size (Linux's `MAX_LFS_FILESIZE` on 64-bit: `LLONG_MAX`).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// Bytes per page, as `usize`.
const PAGE: usize = PAGE_SIZE as usize;

/// An in-memory file (module doc). Clones are handles to the same file; its pages are freed
/// when the last handle goes.
#[derive(Clone)]
pub struct File {
    inner: Arc<FileInner>,
}

/// What the handles of one file share.
struct FileInner {
    memory: Memory,
    /// The file's number in its memory (1, 2, ...: its inode number).
    id: u64,
    /// Its length in bytes. Written under `pages`' lock; read without it.
    len: AtomicU64,
    /// The indices of the pages the file has in the page cache; its lock is the file's lock.
    pages: Mutex<BTreeSet<u64>>,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("id", &self.inner.id)
            .field("len", &self.len())
            .finish()
    }
}

impl File {
    /// A new file of `len` bytes (all a hole: zeros, no frame taken) in `memory`.
    ///
    /// # Errors
    /// [`VmError::InvalidArgument`] (`EINVAL`) for `len` past [`MAX_FILE_SIZE`] (a negative
    /// length to `ftruncate`); [`VmError::OutOfMemory`] when the memory's first file cannot
    /// start the page cache's RCU reclaimer thread; [`VmError::ForkedChild`] in a forked child.
    pub fn create(memory: &Memory, len: u64) -> Result<File, VmError> {
        if memory.inner.in_forked_child() {
            return Err(VmError::ForkedChild);
        }
        if len > MAX_FILE_SIZE {
            return Err(VmError::InvalidArgument(
                "file length past 2^63 - 1 (a negative loff_t)",
            ));
        }
        memory.inner.cache_or_make()?;
        Ok(File {
            inner: Arc::new(FileInner {
                id: memory.inner.next_file(),
                memory: memory.clone(),
                len: AtomicU64::new(len),
                pages: Mutex::new(BTreeSet::new()),
            }),
        })
    }

    /// The file's number in its memory (1, 2, ... in creation order; what `/proc/self/maps`
    /// shows as a mapping's inode).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The memory its pages live in.
    pub fn memory(&self) -> &Memory {
        &self.inner.memory
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        // Acquire: pairs with the Release stores of `write_at` and `set_len`: the pages an
        // extension wrote are in the cache before the new length is seen.
        self.inner.len.load(Ordering::Acquire)
    }

    /// Whether its length is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pages the file holds in the page cache (holes take none).
    pub fn cached_pages(&self) -> usize {
        self.inner.pages.lock().len()
    }

    /// Whether `a` and `b` are handles to the same file.
    pub fn ptr_eq(a: &File, b: &File) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }

    fn mem(&self) -> &MemoryInner {
        &self.inner.memory.inner
    }

    fn key(&self, index: u64) -> PageKey {
        PageKey {
            file: self.inner.id,
            index,
        }
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf`; returns how many (fewer at the
    /// end of the file, 0 at or past it). Holes read as zeros.
    ///
    /// # Errors
    /// [`VmError::InvalidArgument`] (`EINVAL`) for an offset past [`MAX_FILE_SIZE`] (a
    /// negative `loff_t` to Linux's `pread`); [`VmError::ForkedChild`] in a forked child.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VmError> {
        self.usable()?;
        if offset > MAX_FILE_SIZE {
            return Err(VmError::InvalidArgument(
                "file offset past 2^63 - 1 (a negative loff_t)",
            ));
        }
        let len = self.len();
        if offset >= len {
            return Ok(0);
        }
        let want = usize::try_from(len - offset).map_or(buf.len(), |n| n.min(buf.len()));
        let mem = self.mem();
        mem.cache().read(|lookup| {
            let mut done = 0;
            while done < want {
                let at = offset + done as u64;
                let in_page = (at % PAGE_SIZE) as usize;
                let n = (PAGE - in_page).min(want - done);
                let dst = &mut buf[done..done + n];
                match lookup(self.key(at / PAGE_SIZE)) {
                    // SAFETY: the frame was found in the page cache inside this read section,
                    // so it is not freed or reused before the section ends (`page_cache.rs`);
                    // `in_page + n <= 4096` keeps the range inside it, and every access to a
                    // frame's bytes goes through `frame_io`.
                    Some(f) => unsafe { read_from_frame(mem.pool.ptr(f).add(in_page), dst) },
                    None => dst.fill(0),
                }
                done += n;
            }
        });
        // A truncation that raced this read: no byte past the end it left is returned.
        let now = self.len();
        Ok(if now >= offset + want as u64 {
            want
        } else {
            now.saturating_sub(offset) as usize
        })
    }

    /// Writes `buf` at `offset`, extending the file when it ends past the end; returns the
    /// bytes written (all of them unless the memory filled up after some were written).
    ///
    /// # Errors
    /// [`VmError::InvalidArgument`] (`EINVAL`) for an offset past [`MAX_FILE_SIZE`] (a
    /// negative `loff_t` to Linux); [`VmError::FileTooLarge`] (`EFBIG`) for a non-empty write
    /// at [`MAX_FILE_SIZE`] (a write crossing it writes up to it); [`VmError::NoSpace`]
    /// (`ENOSPC`) when not one byte could be written for want of a frame;
    /// [`VmError::ForkedChild`] in a forked child (module doc). A failed write changes nothing.
    pub fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize, VmError> {
        self.usable()?;
        if offset > MAX_FILE_SIZE {
            return Err(VmError::InvalidArgument(
                "file offset past 2^63 - 1 (a negative loff_t)",
            ));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        if offset == MAX_FILE_SIZE {
            return Err(VmError::FileTooLarge);
        }
        let count = usize::try_from(MAX_FILE_SIZE - offset).map_or(buf.len(), |n| n.min(buf.len()));
        let mem = self.mem();
        let mut pages = self.inner.pages.lock();
        let mut done = 0;
        while done < count {
            let at = offset + done as u64;
            let index = at / PAGE_SIZE;
            let in_page = (at % PAGE_SIZE) as usize;
            let n = (PAGE - in_page).min(count - done);
            let frame = if pages.contains(&index) {
                mem.cache().read(|lookup| lookup(self.key(index)))
            } else {
                None
            };
            let frame = match frame {
                Some(f) => f,
                None => {
                    let Some(f) = mem.alloc_io() else {
                        break;
                    };
                    mem.pool.refs().share(f);
                    // Under the file's lock, the index is in the file's set exactly when its
                    // page is in the cache (`set_len` removes both under it).
                    mem.cache().insert(self.key(index), f);
                    pages.insert(index);
                    f
                }
            };
            // SAFETY: the frame is this file's page (under the file's lock nobody removes it),
            // `in_page + n <= 4096`, and frames' bytes are only accessed through `frame_io`.
            unsafe { write_to_frame(&buf[done..done + n], mem.pool.ptr(frame).add(in_page)) };
            done += n;
        }
        if done == 0 {
            return Err(VmError::NoSpace);
        }
        let end = offset + done as u64;
        if end > self.inner.len.load(Ordering::Relaxed) {
            // Release: pairs with `len`'s Acquire: the bytes and pages written are visible to
            // a reader that sees the new length. (Relaxed load above: `len` is only written
            // under this lock.)
            self.inner.len.store(end, Ordering::Release);
        }
        Ok(done)
    }

    /// Sets the length to `len`: shrinking frees the pages past it and zeroes the rest of the
    /// page it falls in; growing adds a hole. Waits for a grace period of the page cache when
    /// it removed pages (a racing read may still be copying them).
    ///
    /// # Errors
    /// [`VmError::InvalidArgument`] (`EINVAL`) for `len` past [`MAX_FILE_SIZE`] (a negative
    /// length to Linux's `ftruncate`); [`VmError::ForkedChild`] in a forked child. Nothing
    /// changes then.
    pub fn set_len(&self, len: u64) -> Result<(), VmError> {
        self.usable()?;
        if len > MAX_FILE_SIZE {
            return Err(VmError::InvalidArgument(
                "file length past 2^63 - 1 (a negative loff_t)",
            ));
        }
        let mem = self.mem();
        let mut pages = self.inner.pages.lock();
        let old = self.inner.len.load(Ordering::Relaxed);
        // Release: as in `write_at`. Set before the pages go, so that a read that copied a page
        // being removed clamps its count to this length.
        self.inner.len.store(len, Ordering::Release);
        if len >= old {
            return Ok(());
        }
        if len % PAGE_SIZE != 0 && pages.contains(&(len / PAGE_SIZE)) {
            let in_page = (len % PAGE_SIZE) as usize;
            let zeros = [0u8; PAGE];
            if let Some(f) = mem.cache().read(|lookup| lookup(self.key(len / PAGE_SIZE))) {
                // SAFETY: this file's page, kept under its lock; the range ends at the frame's
                // end; frames' bytes are only accessed through `frame_io`.
                unsafe { write_to_frame(&zeros[in_page..], mem.pool.ptr(f).add(in_page)) };
            }
        }
        let gone = pages.split_off(&len.div_ceil(PAGE_SIZE));
        // Out of the cache while the lock is held: a write that takes the lock next finds the
        // page neither in the file's set nor in the cache (review of issue 23: removed after the
        // unlock, a racing write re-added the index, had its frame refused by the cache, and two
        // truncations then put the old frame twice).
        let frames = remove_pages(mem, self.inner.id, gone);
        drop(pages);
        put_after_grace_period(mem, frames);
        Ok(())
    }

    /// `Ok` unless this is a forked child of the process that made the file (module doc).
    fn usable(&self) -> Result<(), VmError> {
        if self.mem().in_forked_child() {
            Err(VmError::ForkedChild)
        } else {
            Ok(())
        }
    }
}

/// Removes the pages `indices` of file `file` from the cache and returns their frames (each
/// still holding the cache's reference). The caller holds the file's lock, under which it took
/// them out of the file's set: they are in the cache, and nobody else removes them.
fn remove_pages(mem: &MemoryInner, file: u64, indices: BTreeSet<u64>) -> Vec<Frame> {
    indices
        .into_iter()
        .map(|index| mem.cache().remove(PageKey { file, index }))
        .collect()
}

/// Drops the cache's references to `frames` (removed from the cache) after a grace period of
/// the cache's domain, so that no read still copies from them, freeing those nothing else
/// holds.
fn put_after_grace_period(mem: &MemoryInner, frames: Vec<Frame>) {
    if frames.is_empty() {
        return;
    }
    mem.cache().synchronize();
    for f in frames {
        if mem.pool.refs().put(f) {
            mem.free_io(f);
        }
    }
}

impl Drop for FileInner {
    fn drop(&mut self) {
        let mem = &self.memory.inner;
        if mem.in_forked_child() {
            // The cache's locks and its domain's reclaimer belong to the parent's threads:
            // leak the pages (as a space leaks itself there, `fork.rs`).
            return;
        }
        let pages = std::mem::take(self.pages.get_mut());
        let frames = remove_pages(mem, self.id, pages);
        put_after_grace_period(mem, frames);
    }
}
