//! Zero-copy access to the bytes of one page ([`PageSlice`]), in the style of rust-vmm's
//! `VolatileSlice`: a pointer and a length into frame memory, lent by a [`crate::Session`]
//! for as long as the session is borrowed.
//!
//! The project's memory rule is that no `&[u8]`/`&mut [u8]` is ever formed over frame memory:
//! another core may write the same page through its own translation at any time (as on real
//! RAM), and a Rust reference over memory that changes under it is undefined behaviour. So a
//! `PageSlice` is not a slice: every access goes through `frame_io.rs`, in atomic accesses of
//! the aligned 8-byte words it covers (whole words, never torn; partial words by
//! compare-exchange, so neighbouring bytes another core writes are kept). That is also how
//! rust-vmm's `VolatileSlice` reads and writes guest memory (volatile or atomic accesses,
//! never references), and why it has no `as_slice`.
//!
//! Why the frame stays valid: the slice's lifetime borrows the session mutably, so the session
//! can neither renew its window (take a shootdown request) nor close it while the slice lives,
//! and a shooter that removed the page's translation waits for that window before the frame
//! is reused (`shootdown.rs`). Holding a slice therefore holds shooters, like a session that
//! does not poll (the latency contract in `session.rs`): use it for bulk work on the page,
//! then drop it.
//!
//! A slice of a page mapped read-only (or lent by `Session::page`) refuses writes with
//! [`SliceError::ReadOnly`]: writing through a read translation could write a copy-on-write
//! frame another space shares. Offsets and lengths out of the slice are
//! [`SliceError::OutOfBounds`], never a panic.
//!
//! Not for: accesses spanning pages (`Session::read`/`write`) or translation (`session.rs`).

use crate::frame_io;
use std::marker::PhantomData;
use thiserror::Error;

/// Why a [`PageSlice`] access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Error)]
pub enum SliceError {
    /// The range `offset .. offset + len` does not lie inside the slice.
    #[error("range {offset}+{len} outside a slice of {size} bytes")]
    OutOfBounds {
        /// The first byte asked for.
        offset: usize,
        /// The bytes asked for.
        len: usize,
        /// The slice's length.
        size: usize,
    },
    /// A write through a slice lent for reading.
    #[error("write through a read-only page slice")]
    ReadOnly,
}

/// The bytes of one page from some offset to its end, borrowed from a session (module doc).
pub struct PageSlice<'s> {
    ptr: *mut u8,
    len: usize,
    writable: bool,
    _session: PhantomData<&'s mut ()>,
}

impl std::fmt::Debug for PageSlice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageSlice")
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

impl<'s> PageSlice<'s> {
    /// A slice of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr .. ptr + len` lies inside one frame translated (for writing if `writable`) in an
    /// access window that stays open for `'s`, and every other access to that frame goes
    /// through `frame_io`.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize, writable: bool) -> PageSlice<'s> {
        PageSlice {
            ptr,
            len,
            writable,
            _session: PhantomData,
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes (never, for a slice lent by a session).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether writes are allowed.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// `offset .. offset + len` checked against the slice.
    fn check(&self, offset: usize, len: usize) -> Result<(), SliceError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(SliceError::OutOfBounds {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Copies `buf.len()` bytes from `offset` into `buf` (each aligned word whole).
    ///
    /// # Errors
    /// [`SliceError::OutOfBounds`].
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), SliceError> {
        self.check(offset, buf.len())?;
        // SAFETY: inside the slice (checked), whose frame stays translated for 's (`new`).
        unsafe { frame_io::read_from_frame(self.ptr.add(offset), buf) };
        Ok(())
    }

    /// Copies `buf` to `offset` (each aligned word whole; bytes of partial words around it
    /// are kept).
    ///
    /// # Errors
    /// [`SliceError::ReadOnly`], [`SliceError::OutOfBounds`].
    pub fn write(&self, offset: usize, buf: &[u8]) -> Result<(), SliceError> {
        if !self.writable {
            return Err(SliceError::ReadOnly);
        }
        self.check(offset, buf.len())?;
        // SAFETY: as in `read`; the translation allows writes (`writable`).
        unsafe { frame_io::write_to_frame(buf, self.ptr.add(offset)) };
        Ok(())
    }

    /// Loads the little-endian `u64` at `offset` (one atomic load when 8-byte aligned in the
    /// page).
    ///
    /// # Errors
    /// [`SliceError::OutOfBounds`].
    pub fn load_u64(&self, offset: usize) -> Result<u64, SliceError> {
        self.check(offset, 8)?;
        // SAFETY: inside the slice (checked).
        let p = unsafe { self.ptr.add(offset) };
        if p as usize % 8 == 0 {
            // SAFETY: aligned, inside the slice's frame.
            return Ok(u64::from_le(unsafe { frame_io::load_word(p) }));
        }
        let mut b = [0; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Stores the little-endian `u64` `v` at `offset` (one atomic store when 8-byte aligned
    /// in the page).
    ///
    /// # Errors
    /// [`SliceError::ReadOnly`], [`SliceError::OutOfBounds`].
    pub fn store_u64(&self, offset: usize, v: u64) -> Result<(), SliceError> {
        if !self.writable {
            return Err(SliceError::ReadOnly);
        }
        self.check(offset, 8)?;
        // SAFETY: inside the slice (checked).
        let p = unsafe { self.ptr.add(offset) };
        if p as usize % 8 == 0 {
            // SAFETY: aligned, inside the slice's writable frame.
            unsafe { frame_io::store_word(p, v.to_le()) };
            return Ok(());
        }
        self.write(offset, &v.to_le_bytes())
    }

    /// Sets `len` bytes from `offset` to `byte`.
    ///
    /// # Errors
    /// [`SliceError::ReadOnly`], [`SliceError::OutOfBounds`].
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), SliceError> {
        if !self.writable {
            return Err(SliceError::ReadOnly);
        }
        self.check(offset, len)?;
        let chunk = [byte; 64];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The sub-slice `offset .. offset + len` (rust-vmm's `VolatileSlice::subslice`).
    ///
    /// # Errors
    /// [`SliceError::OutOfBounds`].
    pub fn subslice(&self, offset: usize, len: usize) -> Result<PageSlice<'_>, SliceError> {
        self.check(offset, len)?;
        // SAFETY: a part of this slice (checked), borrowed for no longer than it.
        Ok(unsafe { PageSlice::new(self.ptr.add(offset), len, self.writable) })
    }

    /// Copies `src` (another page's bytes, possibly of another space) into this slice at
    /// `offset`, word by word through a bounce buffer: no reference over either page.
    ///
    /// # Errors
    /// [`SliceError::ReadOnly`], [`SliceError::OutOfBounds`].
    pub fn copy_from(&self, offset: usize, src: &PageSlice<'_>) -> Result<(), SliceError> {
        if !self.writable {
            return Err(SliceError::ReadOnly);
        }
        self.check(offset, src.len)?;
        let mut buf = [0u8; 256];
        let mut done = 0;
        while done < src.len {
            let n = (src.len - done).min(buf.len());
            src.read(done, &mut buf[..n])?;
            self.write(offset + done, &buf[..n])?;
            done += n;
        }
        Ok(())
    }
}
