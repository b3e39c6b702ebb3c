//! The kernel side of the differential test: a window of the test process's own address space
//! where ops are applied with the real system calls, and probes that read its state back.
//!
//! Layout (all fixed addresses, found free with `MAP_FIXED_NOREPLACE` near `0x5a00_0000_0000`,
//! far below where the kernel places hint-less mappings):
//!
//! ```text
//!   [guard: 16 pages PROT_NONE] [gap: 1 page] [window: `pages` pages] [gap: 1 page] [guard]
//! ```
//!
//! The guards keep the neighbourhood reserved; the one-page unmapped gaps keep a window region
//! from merging with a guard in `/proc/self/maps`. Inside the window only the ops create
//! mappings, so unmapped holes really are unmapped. Nothing else in the test binary maps memory
//! there: hint-less mmaps (thread stacks, malloc arenas, aspace's frame reservation) are placed
//! top-down from `mmap_base` near `0x7fxx_xxxx_xxxx`, and the ops never reach outside the window
//! (`ops.rs`). A hinted mmap that the kernel places elsewhere is undone at once ([`Outcome::Skipped`]).
//!
//! Probes (the ones the comparison relies on are checked by the kernel-only tests in
//! `differential.rs`):
//! - regions and protections: `/proc/self/maps`, parsed and clipped to the window;
//! - contents: `pread` of `/proc/self/mem`, which reads any mapped page whatever its protection
//!   (the kernel uses `FOLL_FORCE` there; `process_vm_readv` would refuse `-w-` and `--x` pages,
//!   which the CPU can read on x86-64);
//! - writes: `process_vm_writev` to self, which honours protections (`EFAULT` on a page without
//!   `VM_WRITE` or not mapped) and never raises SIGSEGV. Where `/proc/self/maps` says a write
//!   would fault, nothing is written (aspace's `write` translates every page before copying),
//!   but the pages before the faulting one are write-faulted by storing their first byte back
//!   (aspace faults them in for writing), and `process_vm_writev` of one byte at the faulting
//!   address must fail with `EFAULT` (checked).
//!
//! Not for: deciding what aspace should do (the kernel is the reference; this only observes it).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::ops::{Acc, Op, PAGE};
use super::snapshot::{Line, Outcome, Probe, Snapshot};

const GUARD_PAGES: u64 = 16;
const FIRST_CANDIDATE: u64 = 0x5a00_0000_0000;

/// The reserved window in this process.
pub struct KernelWindow {
    base: u64,
    pages: u64,
    mem: File,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn ret(r: libc::c_int) -> Outcome {
    if r == 0 {
        Outcome::Ok(0)
    } else {
        Outcome::Err(errno())
    }
}

impl KernelWindow {
    /// Reserves a window of `pages` pages with its guards.
    ///
    /// # Panics
    /// If no free place is found.
    pub fn reserve(pages: u64) -> KernelWindow {
        let total = (pages + 2 * (GUARD_PAGES + 1)) * PAGE;
        for i in 0..64u64 {
            let base = FIRST_CANDIDATE + i * (1 << 32);
            let lo = base - (GUARD_PAGES + 1) * PAGE;
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the range is not
            // used by anything in this process (checked by the flag), and a result at another
            // address is unmapped again below.
            let p = unsafe {
                libc::mmap(
                    lo as *mut libc::c_void,
                    total as usize,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE
                        | libc::MAP_ANONYMOUS
                        | libc::MAP_NORESERVE
                        | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                continue;
            }
            if p as u64 != lo {
                // An old kernel took the flag as a hint.
                // SAFETY: `p` is the mapping just created, owned by nobody else.
                unsafe { libc::munmap(p, total as usize) };
                continue;
            }
            // SAFETY: the gap pages and the window lie inside the reservation just made.
            let r = unsafe {
                libc::munmap(
                    (base - PAGE) as *mut libc::c_void,
                    ((pages + 2) * PAGE) as usize,
                )
            };
            assert_eq!(r, 0, "carving the window out of its reservation");
            let mem = File::open("/proc/self/mem").expect("open /proc/self/mem");
            return KernelWindow { base, pages, mem };
        }
        panic!("no free place for the differential window near {FIRST_CANDIDATE:#x}");
    }

    /// The window's first address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Pages in the window.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    fn len(&self) -> u64 {
        self.pages * PAGE
    }

    /// Unmaps everything in the window.
    pub fn reset(&mut self) {
        // SAFETY: the window belongs to this test; nothing outside the test's ops lives there.
        let r = unsafe { libc::munmap(self.base as *mut libc::c_void, self.len() as usize) };
        assert_eq!(r, 0, "resetting the window: errno {}", errno());
    }

    /// Applies `op` with the real system calls.
    pub fn apply(&mut self, op: &Op) -> Outcome {
        // Wrapping: boundary ops name addresses far above the window (ops.rs).
        let at = |off: u64| self.base.wrapping_add(off) as *mut libc::c_void;
        match *op {
            Op::Mmap {
                off,
                len,
                prot,
                flags,
            } => {
                // SAFETY: every op's range is inside the window or is rejected by the kernel
                // before it changes anything (ops.rs); a hinted mapping placed elsewhere is
                // unmapped again below.
                let p =
                    unsafe { libc::mmap(at(off), len as usize, prot as i32, flags as i32, -1, 0) };
                if p == libc::MAP_FAILED {
                    return Outcome::Err(errno());
                }
                let start = p as u64;
                let rounded = len.div_ceil(PAGE) * PAGE;
                if start < self.base || start.saturating_add(rounded) > self.base + self.len() {
                    // SAFETY: the mapping was just created by this call and is used by nobody.
                    let r = unsafe { libc::munmap(p, rounded as usize) };
                    assert_eq!(r, 0, "undoing a hinted mmap placed outside the window");
                    return Outcome::Skipped;
                }
                Outcome::Ok(start - self.base)
            }
            // SAFETY: inside the window or rejected before changing anything (ops.rs).
            Op::Munmap { off, len } => ret(unsafe { libc::munmap(at(off), len as usize) }),
            Op::Mprotect { off, len, prot } => {
                // SAFETY: as above.
                ret(unsafe { libc::mprotect(at(off), len as usize, prot as i32) })
            }
            Op::Madvise { off, len, advice } => {
                // SAFETY: as above.
                ret(unsafe { libc::madvise(at(off), len as usize, advice) })
            }
            Op::Write { off, len, fill } => {
                let lines = self.raw_lines();
                if let Some(fault) = first_fault(&lines, off, len, Acc::Write) {
                    let Outcome::Fault(_, fault_off) = fault else {
                        unreachable!()
                    };
                    // aspace faults the pages before the faulting one in (for writing) and copies
                    // nothing: mirror that by storing each such page's first byte back.
                    let mut at = off;
                    while at < fault_off {
                        let b = self.mem_read(at, 1).expect("a writable page reads");
                        assert_eq!(self.writev(at, &b), Ok(1), "write-faulting W + {at:#x}");
                        at = (at / PAGE + 1) * PAGE;
                    }
                    let r = self.writev(fault_off, &[0]);
                    assert_eq!(
                        r,
                        Err(libc::EFAULT),
                        "/proc/self/maps says W + {fault_off:#x} is not writable, \
                         process_vm_writev disagrees"
                    );
                    return fault;
                }
                let data = super::ops::pattern(fill, len);
                let r = self.writev(off, &data);
                assert_eq!(
                    r,
                    Ok(len as usize),
                    "/proc/self/maps says W + {off:#x}..+{len:#x} is writable, \
                     process_vm_writev disagrees"
                );
                Outcome::Done(Vec::new())
            }
            Op::Read { off, len } => {
                let lines = self.raw_lines();
                if let Some(fault) = first_fault(&lines, off, len, Acc::Read) {
                    return fault;
                }
                let mut buf = vec![0u8; len as usize];
                self.mem
                    .read_exact_at(&mut buf, self.base + off)
                    .expect("reading mapped pages through /proc/self/mem");
                Outcome::Done(buf)
            }
            Op::Touch { off, access } => {
                let lines = self.raw_lines();
                if let Some(fault) = first_fault(&lines, off, 1, access) {
                    return fault;
                }
                if access == Acc::Write {
                    // Write-fault the page like aspace's touch(Write) does (it gives the region
                    // its anon_vma, which decides merging): store its byte back. (Without this
                    // a touched region merged differently; found by seed 1626 of the extended
                    // generator.)
                    let b = self.mem_read(off, 1).expect("a writable page reads");
                    assert_eq!(self.writev(off, &b), Ok(1), "write-faulting W + {off:#x}");
                }
                Outcome::Done(Vec::new())
            }
        }
    }

    /// `process_vm_writev` of `data` to `W + off` in this process: bytes written or errno.
    pub fn writev(&self, off: u64, data: &[u8]) -> Result<usize, i32> {
        let local = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let remote = libc::iovec {
            iov_base: (self.base + off) as *mut libc::c_void,
            iov_len: data.len(),
        };
        // SAFETY: `local` describes `data`, which lives across the call; the kernel checks the
        // remote range itself and never raises a signal for it.
        let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n < 0 {
            Err(errno())
        } else {
            Ok(n as usize)
        }
    }

    /// `process_vm_readv` of `len` bytes at `W + off` in this process: the bytes read or errno.
    pub fn readv(&self, off: u64, len: usize) -> Result<Vec<u8>, i32> {
        let mut buf = vec![0u8; len];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut libc::c_void,
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: (self.base + off) as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `local` describes `buf`, which lives across the call; the kernel checks the
        // remote range itself.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n < 0 {
            Err(errno())
        } else {
            buf.truncate(n as usize);
            Ok(buf)
        }
    }

    /// `pread` of `/proc/self/mem`: the bytes at `W + off`, whatever the protection.
    pub fn mem_read(&self, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.mem.read_exact_at(&mut buf, self.base + off)?;
        Ok(buf)
    }

    /// The `/proc/self/maps` lines inside the window, clipped to it, not coalesced.
    pub fn raw_lines(&self) -> Vec<Line> {
        self.lines_and_texts().0
    }

    /// The lines inside the window and their text.
    fn lines_and_texts(&self) -> (Vec<Line>, Vec<String>) {
        let text = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
        let (lo, hi) = (self.base, self.base + self.len());
        let lines = parse_maps(&text, lo, hi);
        let texts = text
            .lines()
            .filter(|l| !parse_maps(l, lo, hi).is_empty())
            .map(str::to_string)
            .collect();
        (lines, texts)
    }

    /// Write-faults every page (storing its first byte back where writable), like aspace's
    /// `touch(Write)`: per page, what the write did. Checked against `process_vm_writev`, which
    /// honours protections.
    pub fn probe_writes(&self) -> Vec<Probe> {
        let lines = self.raw_lines();
        (0..self.pages)
            .map(|p| {
                let off = p * PAGE;
                match first_fault(&lines, off, 1, Acc::Write) {
                    Some(Outcome::Fault(kind, _)) => {
                        assert_eq!(self.writev(off, &[0]), Err(libc::EFAULT), "W + {off:#x}");
                        kind
                    }
                    _ => {
                        let b = self.mem_read(off, 1).expect("a writable page reads");
                        assert_eq!(self.writev(off, &b), Ok(1), "write-faulting W + {off:#x}");
                        Probe::Ok
                    }
                }
            })
            .collect()
    }

    /// The state of the window.
    pub fn snapshot(&self) -> Snapshot {
        let (lines, texts) = self.lines_and_texts();
        let access = Snapshot::access_from_lines(&lines, self.pages);
        let mut contents = vec![None; self.pages as usize];
        let mut p = 0;
        while p < self.pages as usize {
            if access[p][0] != Probe::Ok {
                p += 1;
                continue;
            }
            let run = access[p..].iter().take_while(|a| a[0] == Probe::Ok).count();
            let bytes = self
                .mem_read(p as u64 * PAGE, run * PAGE as usize)
                .expect("reading readable pages through /proc/self/mem");
            for (i, page) in bytes.chunks(PAGE as usize).enumerate() {
                contents[p + i] = Some(page.to_vec());
            }
            p += run;
        }
        Snapshot {
            lines,
            texts,
            access,
            contents,
        }
    }
}

impl Drop for KernelWindow {
    fn drop(&mut self) {
        let lo = self.base - (GUARD_PAGES + 1) * PAGE;
        let total = (self.pages + 2 * (GUARD_PAGES + 1)) * PAGE;
        // SAFETY: the guards, gaps and window are this test's; nothing else lives there.
        unsafe { libc::munmap(lo as *mut libc::c_void, total as usize) };
    }
}

/// Parses `/proc/self/maps` text: the lines intersecting `[lo, hi)`, clipped, as offsets from `lo`.
pub fn parse_maps(text: &str, lo: u64, hi: u64) -> Vec<Line> {
    let mut out = Vec::new();
    for l in text.lines() {
        let mut fields = l.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        if b <= lo || a >= hi {
            continue;
        }
        let p = perms.as_bytes();
        let prot =
            (p[0] == b'r') as u32 | ((p[1] == b'w') as u32) << 1 | ((p[2] == b'x') as u32) << 2;
        let offset = fields.next().and_then(|o| u64::from_str_radix(o, 16).ok());
        let inode = fields.nth(1).and_then(|i| i.parse().ok());
        out.push(Line {
            start: a.max(lo) - lo,
            end: b.min(hi) - lo,
            prot,
            shared: p[3] == b's',
            offset: offset.unwrap_or(0),
            inode: inode.unwrap_or(0),
        });
    }
    out
}

/// The fault an access of `len` bytes at `off` of kind `acc` raises given `lines`, or `None`:
/// the first page without the right, at `max(off, page start)`.
pub fn first_fault(lines: &[Line], off: u64, len: u64, acc: Acc) -> Option<Outcome> {
    let mut page = off / PAGE * PAGE;
    while page < off + len {
        let at = page.max(off);
        match lines.iter().find(|l| l.start <= page && page < l.end) {
            None => return Some(Outcome::Fault(Probe::Unmapped, at)),
            Some(l) => {
                let ok = match acc {
                    Acc::Read => l.prot & 7 != 0,
                    Acc::Write => l.prot & 2 != 0,
                    Acc::Exec => l.prot & 4 != 0,
                };
                if !ok {
                    return Some(Outcome::Fault(Probe::Protection, at));
                }
            }
        }
        page += PAGE;
    }
    None
}
