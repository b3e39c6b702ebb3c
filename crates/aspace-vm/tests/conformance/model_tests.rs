//! Tests of the conformance model itself: hand-written sequences replayed on the model and on
//! the real kernel (a reserved window of this test process, far from where the kernel places
//! anything, driven with `libc` `mmap`/`munmap`/`mprotect`/`madvise`), comparing every errno,
//! the `/proc/self/maps` lines inside the window, and the contents of every readable page (read
//! with `process_vm_readv`, which reports unreadable pages as `EFAULT` instead of faulting).
//!
//! Only this file's tests touch the window, and they run one after another inside one test
//! function, so no other thread of the test binary maps there.
//!
//! Not for: random sequences against the kernel (that is the differential test's job).

use crate::conformance::model::{Model, P, PROT_GROWSDOWN, PROT_GROWSUP, PROT_SEM};
use aspace_vm::{Access, Advice, Fault, MapFlags, Prot, RegionInfo, Sharing};

/// The window: 64 pages at an address the kernel's top-down allocator never reaches.
const WIN: u64 = 0x3a5f_0000_0000;
const WIN_PAGES: u64 = 64;
/// x86-64 `TASK_SIZE`.
const TASK_SIZE: u64 = (1 << 47) - P;

const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The model and the kernel side by side.
struct Both {
    model: Model,
}

impl Both {
    fn new() -> Both {
        // SAFETY: the window is unmapped (or mapped only by an earlier run of these tests) and
        // nothing of this process lives there; munmap of an unmapped range is harmless.
        unsafe { libc::munmap(WIN as *mut libc::c_void, (WIN_PAGES * P) as usize) };
        Both {
            model: Model::new(0x1000, TASK_SIZE, 65_530),
        }
    }

    fn mmap(&mut self, addr: u64, len: u64, prot: u32, flags: MapFlags) -> Result<u64, i32> {
        let prot = Prot::from_bits_retain(prot);
        assert!(flags.bits() & (MapFlags::FIXED.bits() | MapFlags::FIXED_NOREPLACE.bits()) != 0);
        // SAFETY: fixed mappings only inside the window (asserted by the callers' addresses),
        // which holds nothing of the program.
        let r = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len as usize,
                prot.bits() as i32,
                flags.bits() as i32,
                -1,
                0,
            )
        };
        let kernel = if r == libc::MAP_FAILED {
            Err(errno())
        } else {
            Ok(r as u64)
        };
        let model = self.model.mmap(addr, len, prot, flags, 0);
        assert_eq!(
            kernel, model,
            "mmap({addr:#x}, {len:#x}, {prot:?}, {flags:?})"
        );
        self.check();
        model
    }

    fn munmap(&mut self, addr: u64, len: u64) -> Result<(), i32> {
        // SAFETY: only the window or invalid arguments the kernel rejects.
        let r = unsafe { libc::munmap(addr as *mut libc::c_void, len as usize) };
        let kernel = if r == 0 { Ok(()) } else { Err(errno()) };
        let model = self.model.munmap(addr, len);
        assert_eq!(kernel, model, "munmap({addr:#x}, {len:#x})");
        self.check();
        model
    }

    fn mprotect(&mut self, addr: u64, len: u64, prot: u32) -> Result<(), i32> {
        // SAFETY: only the window.
        let r = unsafe { libc::mprotect(addr as *mut libc::c_void, len as usize, prot as i32) };
        let kernel = if r == 0 { Ok(()) } else { Err(errno()) };
        let model = self.model.mprotect(addr, len, Prot::from_bits_retain(prot));
        assert_eq!(kernel, model, "mprotect({addr:#x}, {len:#x}, {prot:#x})");
        self.check();
        model
    }

    fn madvise(&mut self, addr: u64, len: u64, advice: i32) -> Result<(), i32> {
        // SAFETY: only the window.
        let r = unsafe { libc::madvise(addr as *mut libc::c_void, len as usize, advice) };
        let kernel = if r == 0 { Ok(()) } else { Err(errno()) };
        let model = self.model.madvise(addr, len, Advice::from_raw(advice));
        assert_eq!(kernel, model, "madvise({addr:#x}, {len:#x}, {advice})");
        self.check();
        model
    }

    /// Writes where the model says the write succeeds (the kernel's page protections are
    /// compared with the model's by `check`, so the model's verdict is the kernel's).
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Fault> {
        let r = self.model.write(addr, data);
        if r.is_ok() {
            // SAFETY: the model (checked against /proc/self/maps after every call) says every
            // page of the range is mapped writable inside the window.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
        }
        self.check();
        r
    }

    /// Compares the window: lines of `/proc/self/maps`, and each readable page's contents.
    fn check(&mut self) {
        let end = WIN + WIN_PAGES * P;
        let kernel: Vec<RegionInfo> = std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
                let (_dev, inode) = (f.next()?, f.next()?);
                let (s, e) = range.split_once('-')?;
                let (s, e) = (
                    u64::from_str_radix(s, 16).ok()?,
                    u64::from_str_radix(e, 16).ok()?,
                );
                if e <= WIN || s >= end {
                    return None;
                }
                let b = perms.as_bytes();
                let mut prot = 0;
                for (i, bit) in [(0, 1), (1, 2), (2, 4)] {
                    if b[i] != b'-' {
                        prot |= bit;
                    }
                }
                let sharing = if b[3] == b's' {
                    Sharing::Shared
                } else {
                    Sharing::Private
                };
                Some(RegionInfo {
                    start: s,
                    end: e,
                    prot: Prot::from_bits_retain(prot),
                    sharing,
                    offset: u64::from_str_radix(offset, 16).ok()?,
                    inode: inode.parse().ok()?,
                })
            })
            .collect();
        let model: Vec<RegionInfo> = self
            .model
            .regions()
            .into_iter()
            .filter(|r| r.end > WIN && r.start < end)
            .collect();
        let (kernel, model) = (same_object_numbers(kernel), same_object_numbers(model));
        assert_eq!(kernel, model, "/proc/self/maps lines in the window");
        let mut buf = vec![0u8; P as usize];
        for v in WIN / P..end / P {
            let a = v * P;
            let Some(expected) = self.model.contents(a) else {
                continue;
            };
            if !self.model.page(a).unwrap().prot.allows(Access::Read) {
                continue;
            }
            let local = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: P as usize,
            };
            let remote = libc::iovec {
                iov_base: a as *mut libc::c_void,
                iov_len: P as usize,
            };
            // SAFETY: reads this process's own page into `buf`; the kernel checks the access.
            let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
            assert_eq!(
                n,
                P as isize,
                "process_vm_readv of {a:#x}: errno {}",
                errno()
            );
            assert!(
                buf[..] == expected[..],
                "contents of {a:#x} differ from the model"
            );
        }
    }
}

impl Drop for Both {
    fn drop(&mut self) {
        // SAFETY: the window holds only these tests' mappings.
        unsafe { libc::munmap(WIN as *mut libc::c_void, (WIN_PAGES * P) as usize) };
    }
}

fn fixed() -> MapFlags {
    PA | MapFlags::FIXED
}

const RW: u32 = 3;
const R: u32 = 1;

fn replace_split_and_zero(k: &mut Both) {
    let a = WIN;
    assert_eq!(k.mmap(a, 4 * P, RW, fixed()), Ok(a));
    k.write(a, &[7; 4 * P as usize]).unwrap();
    assert_eq!(k.mmap(a + P, P, R, fixed()), Ok(a + P));
    assert_eq!(k.model.regions().len(), 3);
    assert_eq!(
        k.mmap(a, P, RW, PA | MapFlags::FIXED_NOREPLACE),
        Err(libc::EEXIST)
    );
    assert_eq!(k.munmap(a + 2 * P, P), Ok(()));
    assert_eq!(k.munmap(a + 2 * P, P), Ok(()), "unmapping nothing");
    assert_eq!(k.write(a + P, &[1]), Err(Fault::Protection { addr: a + P }));
    assert_eq!(
        k.write(a + 2 * P - 1, &[1, 1]),
        Err(Fault::Protection {
            addr: a + 2 * P - 1
        })
    );
    assert_eq!(
        k.write(a + P - 1, &[1, 1]),
        Err(Fault::Protection { addr: a + P })
    );
    assert_eq!(k.munmap(a, 8 * P), Ok(()));
}

fn mprotect_and_madvise_over_holes(k: &mut Both) {
    let a = WIN + 8 * P;
    assert_eq!(k.mmap(a, 2 * P, RW, fixed()), Ok(a));
    assert_eq!(k.mmap(a + 3 * P, 2 * P, RW, fixed()), Ok(a + 3 * P));
    k.write(a, &[1; 2 * P as usize]).unwrap();
    k.write(a + 3 * P, &[2; 2 * P as usize]).unwrap();
    assert_eq!(k.mprotect(a, 5 * P, R), Err(libc::ENOMEM), "prefix changed");
    assert_eq!(
        k.mprotect(a + 2 * P, 2 * P, R),
        Err(libc::ENOMEM),
        "starts in the hole"
    );
    assert_eq!(
        k.mprotect(a - 2 * P, 2 * P, R),
        Err(libc::ENOMEM),
        "nothing mapped"
    );
    assert_eq!(
        k.mprotect(a + 3 * P, 3 * P, R),
        Err(libc::ENOMEM),
        "trailing hole"
    );
    assert_eq!(
        k.madvise(a + P, 3 * P, 4),
        Err(libc::ENOMEM),
        "DONTNEED over a hole"
    );
    assert_eq!(k.madvise(a + 2 * P, P, 4), Err(libc::ENOMEM));
    assert_eq!(k.madvise(a + 2 * P, P, 0), Err(libc::ENOMEM), "any advice");
    assert_eq!(k.madvise(a, P, 3), Ok(()));
    assert_eq!(k.mprotect(a, 2 * P, RW), Ok(()));
    assert_eq!(k.madvise(a, P, 4), Ok(()));
    assert_eq!(k.munmap(a, 8 * P), Ok(()));
}

fn errnos_of_bad_input(k: &mut Both) {
    let a = WIN + 16 * P;
    assert_eq!(k.mmap(a, 2 * P, RW, fixed()), Ok(a));
    let none = Prot::NONE.bits();
    assert_eq!(k.mmap(a + 1, P, RW, fixed()), Err(libc::EINVAL));
    assert_eq!(k.mmap(a, 0, RW, fixed()), Err(libc::EINVAL));
    assert_eq!(
        k.mmap(a, P, RW, MapFlags::PRIVATE | MapFlags::FIXED),
        Err(libc::EBADF)
    );
    assert_eq!(
        k.mmap(a, P, RW, MapFlags::ANONYMOUS | MapFlags::FIXED),
        Err(libc::EINVAL)
    );
    assert_eq!(
        k.mmap(a, P, RW, MapFlags::ANONYMOUS | MapFlags::FIXED_NOREPLACE),
        Err(libc::EEXIST)
    );
    let sv = MapFlags::SHARED_VALIDATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    assert_eq!(k.mmap(a + 4 * P, P, RW, sv), Err(libc::EINVAL));
    assert_eq!(k.mmap(a, u64::MAX - 10, RW, fixed()), Err(libc::ENOMEM));
    assert_eq!(
        k.mmap(TASK_SIZE - P + 1, 2 * P, RW, fixed()),
        Err(libc::ENOMEM)
    );
    assert_eq!(k.munmap(a, 0), Err(libc::EINVAL));
    assert_eq!(k.munmap(a + 1, P), Err(libc::EINVAL));
    assert_eq!(k.munmap(TASK_SIZE - P, 2 * P), Err(libc::EINVAL));
    assert_eq!(k.mprotect(a + 1, 0, R), Err(libc::EINVAL));
    assert_eq!(k.mprotect(a, 0, 0x10), Ok(()));
    assert_eq!(k.mprotect(a, u64::MAX - P, 0x10), Err(libc::ENOMEM));
    assert_eq!(k.mprotect(a, P, 0x10), Err(libc::EINVAL));
    assert_eq!(k.mprotect(a, P, R | PROT_SEM), Ok(()));
    assert_eq!(k.mprotect(a, P, R | PROT_GROWSDOWN), Err(libc::EINVAL));
    assert_eq!(
        k.mprotect(a + 8 * P, P, R | PROT_GROWSDOWN),
        Err(libc::ENOMEM)
    );
    assert_eq!(k.mprotect(a, P, R | PROT_GROWSUP), Err(libc::EINVAL));
    assert_eq!(
        k.mprotect(a + 8 * P, P, R | PROT_GROWSUP),
        Err(libc::ENOMEM)
    );
    assert_eq!(
        k.mprotect(a, P, R | PROT_GROWSUP | PROT_GROWSDOWN),
        Err(libc::EINVAL)
    );
    assert_eq!(k.madvise(a, 0, 12345), Err(libc::EINVAL));
    assert_eq!(k.madvise(a + 1, 0, 4), Err(libc::EINVAL));
    assert_eq!(k.madvise(a, 0, 4), Ok(()));
    assert_eq!(k.madvise(a, u64::MAX - 1, 4), Err(libc::EINVAL));
    assert_eq!(k.madvise(a, u64::MAX - P, 4), Err(libc::EINVAL));
    // Unknown bits mmap ignores.
    assert_eq!(
        k.mmap(
            a + 4 * P,
            P,
            RW | 0x10 | PROT_SEM,
            fixed() | MapFlags::from_bits_retain(0x20_0000)
        ),
        Ok(a + 4 * P)
    );
    assert_eq!(k.mprotect(a, 2 * P, none), Ok(()));
    assert_eq!(k.munmap(a, 8 * P), Ok(()));
}

fn merging_follows_anon_identity_and_flags(k: &mut Both) {
    let a = WIN + 24 * P;
    // Two separately written regions: filling the hole between them gives two lines.
    assert_eq!(k.mmap(a, P, RW, fixed()), Ok(a));
    assert_eq!(k.mmap(a + 2 * P, P, RW, fixed()), Ok(a + 2 * P));
    k.write(a, &[1]).unwrap();
    k.write(a + 2 * P, &[1]).unwrap();
    assert_eq!(k.mmap(a + P, P, RW, fixed()), Ok(a + P));
    assert_eq!(k.model.regions().len(), 2);
    assert_eq!(k.munmap(a, 4 * P), Ok(()));
    // Written next to a written neighbour of another protection: shares its identity, merges
    // once the protections match.
    assert_eq!(k.mmap(a, P, R, fixed()), Ok(a));
    assert_eq!(k.mmap(a + P, P, RW, fixed()), Ok(a + P));
    k.write(a + P, &[1]).unwrap();
    assert_eq!(k.mprotect(a, P, RW), Ok(()));
    k.write(a, &[1]).unwrap();
    assert_eq!(k.mprotect(a + P, P, R), Ok(()));
    assert_eq!(k.mprotect(a + P, P, RW), Ok(()));
    assert_eq!(k.model.regions().len(), 1);
    // Populating a writable private mapping gives it an identity; a read-only one does not.
    assert_eq!(
        k.mmap(a + 3 * P, P, RW, fixed() | MapFlags::POPULATE),
        Ok(a + 3 * P)
    );
    assert_eq!(k.mmap(a + 2 * P, P, RW, fixed()), Ok(a + 2 * P));
    assert_eq!(k.model.regions().len(), 2);
    assert_eq!(k.munmap(a, 8 * P), Ok(()));
    assert_eq!(k.mmap(a, P, RW, fixed()), Ok(a));
    k.write(a, &[1]).unwrap();
    assert_eq!(
        k.mmap(a + 2 * P, P, R, fixed() | MapFlags::POPULATE),
        Ok(a + 2 * P)
    );
    assert_eq!(k.mmap(a + P, P, R, fixed()), Ok(a + P));
    assert_eq!(k.mprotect(a + P, 2 * P, RW), Ok(()));
    assert_eq!(k.model.regions().len(), 1);
    // MAP_NORESERVE regions do not merge with others.
    assert_eq!(
        k.mmap(a + 3 * P, P, RW, fixed() | MapFlags::NORESERVE),
        Ok(a + 3 * P)
    );
    assert_eq!(k.model.regions().len(), 2);
    // Read, then write: the write fault still gives the region an identity.
    assert_eq!(k.munmap(a, 8 * P), Ok(()));
    assert_eq!(k.mmap(a, P, RW, fixed()), Ok(a));
    assert_eq!(k.mmap(a + 2 * P, P, RW, fixed()), Ok(a + 2 * P));
    let mut x = [0u8; 1];
    // SAFETY: both pages are mapped readable (checked against the kernel above).
    unsafe {
        std::ptr::copy_nonoverlapping(a as *const u8, x.as_mut_ptr(), 1);
        std::ptr::copy_nonoverlapping((a + 2 * P) as *const u8, x.as_mut_ptr(), 1);
    }
    k.model.read(a, 1).unwrap();
    k.model.read(a + 2 * P, 1).unwrap();
    k.write(a, &[1]).unwrap();
    k.write(a + 2 * P, &[1]).unwrap();
    assert_eq!(k.mmap(a + P, P, RW, fixed()), Ok(a + P));
    assert_eq!(k.model.regions().len(), 2);
    assert_eq!(k.munmap(a, 8 * P), Ok(()));
}

fn shared_mappings(k: &mut Both) {
    let a = WIN + 40 * P;
    let shared = MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED;
    assert_eq!(k.mmap(a, 2 * P, RW, shared), Ok(a));
    assert_eq!(k.mmap(a + 2 * P, 2 * P, RW, shared), Ok(a + 2 * P));
    assert_eq!(k.model.regions().len(), 2, "two shmem objects never merge");
    k.write(a, &[9; 16]).unwrap();
    assert_eq!(k.madvise(a, 4 * P, 4), Ok(()));
    assert_eq!(
        k.model.contents(a).unwrap()[0],
        9,
        "DONTNEED keeps shared contents"
    );
    assert_eq!(k.mprotect(a + P, P, R), Ok(()));
    assert_eq!(k.mprotect(a + P, P, RW), Ok(()));
    assert_eq!(
        k.model.regions().len(),
        2,
        "pieces of one shared mapping merge back"
    );
    assert_eq!(k.munmap(a, 8 * P), Ok(()));
}

/// All kernel sequences, one after another (they share the window).
pub fn model_matches_the_kernel_on_hand_written_sequences() {
    let mut k = Both::new();
    replace_split_and_zero(&mut k);
    mprotect_and_madvise_over_holes(&mut k);
    errnos_of_bad_input(&mut k);
    merging_follows_anon_identity_and_flags(&mut k);
    shared_mappings(&mut k);
}

/// Pure model checks that need no kernel.
pub fn model_places_and_limits() {
    let mut m = Model::new(16 * P, 32 * P, 3);
    assert!(m.has_gap(16 * P));
    assert!(!m.has_gap(17 * P));
    assert_eq!(
        m.mmap(16 * P, 2 * P, Prot::READ, PA | MapFlags::FIXED, 0),
        Ok(16 * P)
    );
    assert!(m.has_gap(14 * P) && !m.has_gap(15 * P));
    assert!(m.is_valid_placement(18 * P, 14 * P) && !m.is_valid_placement(17 * P, P));
    assert_eq!(
        m.mmap(8 * P, P, Prot::READ, PA | MapFlags::FIXED, 0),
        Err(libc::EPERM)
    );
    assert_eq!(
        m.mmap(32 * P, P, Prot::READ, PA | MapFlags::FIXED, 0),
        Err(libc::ENOMEM)
    );
    assert_eq!(
        m.mmap(20 * P, P, Prot::READ_WRITE, PA | MapFlags::FIXED, 0),
        Ok(20 * P)
    );
    assert_eq!(
        m.mmap(24 * P, P, Prot::NONE, PA | MapFlags::FIXED, 0),
        Ok(24 * P)
    );
    assert_eq!(
        m.mmap(28 * P, P, Prot::NONE, PA | MapFlags::FIXED, 0),
        Err(libc::ENOMEM),
        "4th region"
    );
    assert_eq!(m.munmap(16 * P, P), Ok(()), "trim keeps the count");
    m.write(20 * P + 5, &[1, 2]).unwrap();
    assert_eq!(m.read(20 * P + 4, 4), Ok(vec![0, 1, 2, 0]));
    assert_eq!(m.mprotect(20 * P, P, Prot::READ), Ok(()));
    assert_eq!(m.regions().len(), 3);
    assert_eq!(m.frame_bounds(), (1, 1));
    assert_eq!(
        m.touch(24 * P, Access::Read),
        Err(Fault::Protection { addr: 24 * P })
    );
    assert_eq!(
        m.touch(25 * P, Access::Read),
        Err(Fault::Unmapped { addr: 25 * P })
    );
}

/// `lines` with the shmem inode numbers replaced by 1, 2, ... in order of first appearance: the
/// kernel's inode numbers are global, the model's count its own mappings, and what must agree is
/// which lines belong to one object.
fn same_object_numbers(lines: Vec<RegionInfo>) -> Vec<RegionInfo> {
    let mut seen: Vec<u64> = Vec::new();
    lines
        .into_iter()
        .map(|r| {
            if r.inode == 0 {
                return r;
            }
            let i = match seen.iter().position(|&x| x == r.inode) {
                Some(i) => i,
                None => {
                    seen.push(r.inode);
                    seen.len() - 1
                }
            };
            RegionInfo {
                inode: i as u64 + 1,
                ..r
            }
        })
        .collect()
}
