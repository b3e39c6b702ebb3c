//! A table of the `metis` workloads: a sequence of `u32` entries living in the address space,
//! stored as a chain of pages from a worker's [`Segments`], written and read through a
//! [`VmCore`] (the map phase's buckets, the reducers' runs, the final index's pieces).
//!
//! The writer ([`TableWriter`]) keeps the current page in process memory and writes it to a
//! fresh page of the space when it is full (one bulk [`VmCore::write`] of 4 KiB, the first touch
//! of that page: a page fault) and the partial last page at [`TableWriter::finish`]; so entries
//! reach the space while the phase runs, never all at the end. The directory ([`TableDir`]: the
//! pages' addresses and the entry count) is what other workers get to read the table with
//! [`TableDir::read_range`], through their own cores.
//!
//! Invariant: entry `i` of a finished table is at byte `4 * (i % PAGE_WORDS)` of page
//! `pages[i / PAGE_WORDS]`.
//!
//! Not for: random-access updates (tables are append-only) or entries other than `u32`.

use super::super::vm::{VmCore, PAGE};
use super::segments::Segments;

/// Entries per page.
pub const PAGE_WORDS: usize = PAGE as usize / 4;

/// Where a table lives: its pages in order and its length in entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableDir {
    /// Address of each page, in entry order.
    pub pages: Vec<u64>,
    /// Entries in the table.
    pub len: usize,
}

/// `words` as bytes (what [`VmCore::write`] takes).
pub fn as_bytes(words: &[u32]) -> &[u8] {
    // SAFETY: a `u32` slice is `4 * len` initialised bytes with no padding, and `u8` has
    // alignment 1; the borrow keeps `words` alive and unmodified.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 4) }
}

/// `words` as mutable bytes (what [`VmCore::read`] fills).
pub fn as_bytes_mut(words: &mut [u32]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; every bit pattern is a valid `u32`, so any bytes written through
    // the view leave valid words, and the exclusive borrow prevents aliasing.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 4) }
}

impl TableDir {
    /// Appends entries `from..to` of the table to `out`, reading them through `core`.
    ///
    /// # Safety
    /// The table's pages must stay mapped and unwritten during the call (for `linux`: see
    /// [`VmCore::read`]); `from <= to <= self.len`.
    pub unsafe fn read_range<C: VmCore>(
        &self,
        core: &mut C,
        from: usize,
        to: usize,
        out: &mut Vec<u32>,
    ) {
        assert!(from <= to && to <= self.len, "{from}..{to} of {}", self.len);
        let mut i = from;
        while i < to {
            let page = i / PAGE_WORDS;
            let off = i % PAGE_WORDS;
            let n = (PAGE_WORDS - off).min(to - i);
            let at = out.len();
            out.resize(at + n, 0);
            // SAFETY: entries `i..i + n` lie in page `page` of this table (the invariant), which
            // the caller guarantees stays mapped and unwritten.
            unsafe {
                core.read(
                    self.pages[page] + 4 * off as u64,
                    as_bytes_mut(&mut out[at..]),
                )
            };
            i += n;
        }
    }
}

/// Builds one table page by page (see the module doc).
#[derive(Debug)]
pub struct TableWriter {
    dir: TableDir,
    /// Entries not yet written to the space (fewer than a page).
    buf: Vec<u32>,
}

impl Default for TableWriter {
    fn default() -> Self {
        TableWriter {
            dir: TableDir::default(),
            buf: Vec::with_capacity(PAGE_WORDS),
        }
    }
}

impl TableWriter {
    /// Appends `entries`, writing every page that fills up to a fresh page of `segs`.
    #[inline]
    pub fn push<C: VmCore>(&mut self, core: &mut C, segs: &mut Segments, mut entries: &[u32]) {
        while !entries.is_empty() {
            let n = (PAGE_WORDS - self.buf.len()).min(entries.len());
            self.buf.extend_from_slice(&entries[..n]);
            entries = &entries[n..];
            if self.buf.len() == PAGE_WORDS {
                self.flush(core, segs);
            }
        }
    }

    /// Appends the two entries `a, b`.
    #[inline]
    pub fn push2<C: VmCore>(&mut self, core: &mut C, segs: &mut Segments, a: u32, b: u32) {
        if self.buf.len() + 2 > PAGE_WORDS {
            self.push(core, segs, &[a, b]);
        } else {
            self.buf.push(a);
            self.buf.push(b);
            if self.buf.len() == PAGE_WORDS {
                self.flush(core, segs);
            }
        }
    }

    /// Writes the buffered entries to a fresh page.
    fn flush<C: VmCore>(&mut self, core: &mut C, segs: &mut Segments) {
        if self.buf.is_empty() {
            return;
        }
        let page = segs.alloc_page(core);
        // SAFETY: a fresh page of this worker's segment, which no one else knows yet.
        unsafe { core.write(page, as_bytes(&self.buf)) };
        self.dir.pages.push(page);
        self.dir.len += self.buf.len();
        self.buf.clear();
    }

    /// Writes the partial last page and returns the table's directory; the writer is empty
    /// again, ready for the next table.
    pub fn finish<C: VmCore>(&mut self, core: &mut C, segs: &mut Segments) -> TableDir {
        self.flush(core, segs);
        std::mem::take(&mut self.dir)
    }

    /// Entries appended so far.
    pub fn len(&self) -> usize {
        self.dir.len + self.buf.len()
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::vm::{LinuxDriver, VmDriver};
    use super::*;

    #[test]
    fn a_table_reads_back_any_range_across_page_boundaries() {
        let mut core = LinuxDriver.attach();
        let mut segs = Segments::new(2 * PAGE);
        let mut w = TableWriter::default();
        let data: Vec<u32> = (0..3 * PAGE_WORDS as u32 + 17).map(|i| i * 7).collect();
        w.push(&mut core, &mut segs, &data[..5]);
        w.push2(&mut core, &mut segs, data[5], data[6]);
        w.push(&mut core, &mut segs, &data[7..]);
        assert_eq!(w.len(), data.len());
        let dir = w.finish(&mut core, &mut segs);
        assert!(w.is_empty());
        assert_eq!(dir.len, data.len());
        assert_eq!(dir.pages.len(), 4);
        for (from, to) in [
            (0, data.len()),
            (3, 3),
            (1000, 1030),
            (PAGE_WORDS, 2 * PAGE_WORDS),
        ] {
            let mut out = vec![42];
            // SAFETY: our own table, mapped until unmap_all below.
            unsafe { dir.read_range(&mut core, from, to, &mut out) };
            assert_eq!(out[0], 42, "appends");
            assert_eq!(&out[1..], &data[from..to], "{from}..{to}");
        }
        // SAFETY: nothing reads the table afterwards.
        unsafe { segs.unmap_all(&mut core) };
    }
}
