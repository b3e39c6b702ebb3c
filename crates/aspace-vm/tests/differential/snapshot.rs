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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Line {
    pub start: u64,
    pub end: u64,
    /// `PROT_*` bits (read 1, write 2, exec 4).
    pub prot: u32,
    pub shared: bool,
    /// The offset field (a shared mapping's offset in its shmem object).
    pub offset: u64,
    /// The inode field (a shared mapping's shmem object; numbers differ between the sides, so
    /// they are compared as a partition, see [`same_objects`]).
    pub inode: u64,
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
        if self.shared {
            write!(f, " offset {:#x} object {}", self.offset, self.inode)?;
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
    /// The text of each line, as `/proc/self/maps` prints it and as aspace's `RegionInfo`
    /// displays it (absolute addresses: the aspace side maps at the same addresses).
    pub texts: Vec<String>,
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

/// `lines` with the inode numbers replaced by 1, 2, ... in order of first appearance (0 stays
/// 0): what must agree is which lines belong to one shmem object, not the kernel's global
/// numbers.
pub fn same_objects(lines: &[Line]) -> Vec<Line> {
    let mut seen: Vec<u64> = Vec::new();
    lines
        .iter()
        .map(|l| {
            let mut l = *l;
            if l.inode != 0 {
                let i = seen.iter().position(|&x| x == l.inode).unwrap_or_else(|| {
                    seen.push(l.inode);
                    seen.len() - 1
                });
                l.inode = i as u64 + 1;
            }
            l
        })
        .collect()
}

/// A maps line's text with its inode field replaced by `inode`, its padding checked: the
/// fields up to the inode, one space, then either nothing more (an anonymous private line ends
/// with that space) or spaces up to column 73 and the name.
fn text_shape(text: &str, inode: u64) -> String {
    let fields: Vec<&str> = text.split_whitespace().take(5).collect();
    let mut head: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
    if head.len() == 5 {
        head[4] = format!("#{inode}");
    }
    let raw_head = fields.join(" ");
    let rest = text
        .strip_prefix(raw_head.as_str())
        .unwrap_or("<fields not single-spaced>");
    let tail = if rest == " " {
        "(trailing space)".to_string()
    } else {
        let name_at = raw_head.len() + rest.len() - rest.trim_start().len();
        format!("name at column {name_at}: {:?}", rest.trim_start())
    };
    format!("{} {tail}", head.join(" "))
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
    let (kl, al) = (same_objects(&kernel.lines), same_objects(&aspace.lines));
    if coalesce(&kl) != coalesce(&al) {
        return Some(format!(
            "mapped pages or protections differ:\n    kernel /proc/self/maps:\n{}    aspace maps():\n{}",
            show_lines(&kernel.lines),
            show_lines(&aspace.lines)
        ));
    }
    if exact && kl != al {
        return Some(format!(
            "same pages and protections, but regions are merged differently (Linux keeps \
             neighbours apart for different anon_vmas, VM_NORESERVE or VM_ACCOUNT):\n    \
             kernel /proc/self/maps:\n{}    aspace maps():\n{}",
            show_lines(&kernel.lines),
            show_lines(&aspace.lines)
        ));
    }
    if exact {
        for (i, (kt, at)) in kernel.texts.iter().zip(&aspace.texts).enumerate() {
            let (k, a) = (text_shape(kt, kl[i].inode), text_shape(at, al[i].inode));
            if k != a {
                return Some(format!(
                    "maps line {i} is printed differently:\n    kernel: {kt:?}\n    aspace: \
                     {at:?}\n    (as compared: kernel {k}, aspace {a})"
                ));
            }
        }
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
