//! The observable state of the window and of one op's result, and how two of them are compared.
//!
//! Both sides (the kernel window and the aspace engine) produce the same two things: an
//! [`Outcome`] per op (the return value or errno of a call, the fault of an access, the bytes of a
//! read) and, after every op, a [`Snapshot`] of the whole window:
//! - `lines`: the regions as `/proc/self/maps` lists them (offsets from the window base,
//!   permissions `rwx`, private or shared), uncoalesced. They are compared at two levels:
//!   first with adjacent private lines of equal permissions coalesced on both sides (the pages'
//!   mapped/protection state: any difference there is a semantic bug), then exactly (merging).
//!   Linux keeps equal-looking neighbours apart for reasons `/proc/self/maps` does not show
//!   (different `anon_vma`s once both were written, `VM_NORESERVE`, `VM_ACCOUNT` left by an
//!   earlier writable protection); aspace models these merge rules (`region.rs`), so with
//!   `exact` the lines must be identical, line for line.
//! - `access`: per page, the result of a read, a write and an exec access (ok, unmapped, or
//!   protection fault);
//! - `contents`: per page, the bytes when the page is readable.
//!
//! [`diff_snapshots`] returns the first difference in words, or `None`.

use std::fmt;

use super::ops::PAGE;

/// One `/proc/self/maps` line inside the window, as offsets from the window base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    pub start: u64,
    pub end: u64,
    /// `PROT_*` bits (read 1, write 2, exec 4).
    pub prot: u32,
    pub shared: bool,
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = |bit: u32, c: char| if self.prot & bit != 0 { c } else { '-' };
        write!(
            f,
            "W+{:#x}-W+{:#x} {}{}{}{}",
            self.start,
            self.end,
            b(1, 'r'),
            b(2, 'w'),
            b(4, 'x'),
            if self.shared { 's' } else { 'p' }
        )?;
        if self.prot & !7 != 0 {
            write!(f, " (extra prot bits {:#x})", self.prot & !7)?;
        }
        Ok(())
    }
}

/// Merges adjacent private lines with equal permissions (see the module doc for why).
pub fn coalesce(lines: &[Line]) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::with_capacity(lines.len());
    for &l in lines {
        match out.last_mut() {
            Some(last)
                if last.end == l.start && last.prot == l.prot && !last.shared && !l.shared =>
            {
                last.end = l.end
            }
            _ => out.push(l),
        }
    }
    out
}

/// What one access does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    Ok,
    /// `SEGV_MAPERR`.
    Unmapped,
    /// `SEGV_ACCERR`.
    Protection,
}

/// The result of one op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A call succeeded; for `mmap`, the offset of the mapping from the window base.
    Ok(u64),
    /// A call failed with this errno.
    Err(i32),
    /// An access (read, write, touch) succeeded; for a read, the bytes.
    Done(Vec<u8>),
    /// An access faulted: the kind and the offset of the first byte that could not be accessed.
    Fault(Probe, u64),
    /// The kernel placed a hinted mapping outside the window (the hint was taken): not comparable;
    /// the kernel side undid it and the op is not applied to aspace.
    Skipped,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(v) => write!(f, "Ok(W + {v:#x})"),
            Outcome::Err(e) => write!(f, "Err({})", errno_name(*e)),
            Outcome::Done(b) if b.is_empty() => write!(f, "Done"),
            Outcome::Done(b) => write!(f, "Done({} bytes, hash {:#x})", b.len(), fnv(b)),
            Outcome::Fault(p, off) => write!(f, "Fault({p:?} at W + {off:#x})"),
            Outcome::Skipped => write!(f, "Skipped"),
        }
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The errno's symbolic name.
pub fn errno_name(e: i32) -> String {
    match e {
        libc::EINVAL => "EINVAL".into(),
        libc::ENOMEM => "ENOMEM".into(),
        libc::EEXIST => "EEXIST".into(),
        libc::EBADF => "EBADF".into(),
        libc::EOPNOTSUPP => "EOPNOTSUPP".into(),
        libc::EPERM => "EPERM".into(),
        libc::EFAULT => "EFAULT".into(),
        libc::EAGAIN => "EAGAIN".into(),
        e => format!("errno {e}"),
    }
}

/// The state of the whole window after an op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub lines: Vec<Line>,
    /// Per page: read, write, exec.
    pub access: Vec<[Probe; 3]>,
    /// Per page: the bytes if readable.
    pub contents: Vec<Option<Vec<u8>>>,
}

impl Snapshot {
    /// The access results that `lines` imply with x86-64's rules (any of read, write or exec makes
    /// a page readable; writes need write, fetches need exec).
    pub fn access_from_lines(lines: &[Line], pages: u64) -> Vec<[Probe; 3]> {
        let mut access = vec![[Probe::Unmapped; 3]; pages as usize];
        for l in lines {
            for p in l.start / PAGE..l.end / PAGE {
                let allow = |ok: bool| if ok { Probe::Ok } else { Probe::Protection };
                access[p as usize] = [
                    allow(l.prot & 7 != 0),
                    allow(l.prot & 2 != 0),
                    allow(l.prot & 4 != 0),
                ];
            }
        }
        access
    }
}

fn show_lines(lines: &[Line]) -> String {
    if lines.is_empty() {
        return "      (none)\n".into();
    }
    lines.iter().map(|l| format!("      {l}\n")).collect()
}

/// The first difference between the kernel's snapshot and aspace's, in words. With `exact`,
/// maps lines must also be merged exactly as Linux merges them.
pub fn diff_snapshots(kernel: &Snapshot, aspace: &Snapshot, exact: bool) -> Option<String> {
    if coalesce(&kernel.lines) != coalesce(&aspace.lines) {
        return Some(format!(
            "mapped pages or protections differ:\n    kernel /proc/self/maps:\n{}    aspace maps():\n{}",
            show_lines(&kernel.lines),
            show_lines(&aspace.lines)
        ));
    }
    if exact && kernel.lines != aspace.lines {
        return Some(format!(
            "same pages and protections, but regions are merged differently (Linux keeps \
             neighbours apart for different anon_vmas, VM_NORESERVE or VM_ACCOUNT):\n    \
             kernel /proc/self/maps:\n{}    aspace maps():\n{}",
            show_lines(&kernel.lines),
            show_lines(&aspace.lines)
        ));
    }
    for (p, (k, a)) in kernel.access.iter().zip(&aspace.access).enumerate() {
        if k != a {
            return Some(format!(
                "access at page W + {:#x} differs: kernel [read, write, exec] = {k:?}, aspace = {a:?}",
                p as u64 * PAGE
            ));
        }
    }
    for (p, (k, a)) in kernel.contents.iter().zip(&aspace.contents).enumerate() {
        match (k, a) {
            (Some(k), Some(a)) if k != a => {
                let i = k.iter().zip(a).position(|(x, y)| x != y).unwrap_or(0);
                return Some(format!(
                    "contents of page W + {:#x} differ at byte {i:#x}: kernel {:#04x}, aspace {:#04x} \
                     (kernel page {}, aspace page {})",
                    p as u64 * PAGE,
                    k[i],
                    a[i],
                    if k.iter().all(|&b| b == 0) { "all zero" } else { "non-zero" },
                    if a.iter().all(|&b| b == 0) { "all zero" } else { "non-zero" },
                ));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Some(format!(
                    "page W + {:#x} is readable on one side only (kernel {}, aspace {})",
                    p as u64 * PAGE,
                    k.is_some(),
                    a.is_some()
                ))
            }
            _ => {}
        }
    }
    None
}
