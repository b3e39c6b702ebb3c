//! The aspace side of the differential test: an [`AddressSpace`] whose address range is exactly
//! the kernel window, with one attached core, driven by the same ops and probed into the same
//! [`Snapshot`] shape.
//!
//! Probes use only the public API: `maps()` for the lines, `touch(Read)` and `touch(Exec)` for
//! the per-page access results, and `read` of each readable page for the contents. Read and exec
//! faults change nothing observable (the kernel side faults the same pages in for reading through
//! `/proc/self/mem`). Write faults do: they give a region its anon identity, which decides merging
//! like Linux's `anon_vma`, so writes are probed only by `probe_writes` at the end of a case, on
//! both sides alike.
//!
//! Not for: judging the results (that is `snapshot.rs`).

use aspace_vm::{
    Access, AddressSpace, Advice, Arenas, CoreHandle, Design, Fault, MapFlags, Prot, Sharing,
};

use super::ops::{pattern, Acc, Op, PAGE};
use super::snapshot::{Line, Outcome, Probe, Snapshot};

/// An address space covering `[base, base + pages * PAGE)` and its one core.
pub struct EngineWindow {
    space: AddressSpace,
    core: CoreHandle,
    base: u64,
    pages: u64,
}

fn fault(f: Fault, base: u64) -> Outcome {
    match f {
        Fault::Unmapped { addr } => Outcome::Fault(Probe::Unmapped, addr.wrapping_sub(base)),
        Fault::Protection { addr } => Outcome::Fault(Probe::Protection, addr.wrapping_sub(base)),
        // The kernel never runs out here; report it as the errno a syscall would see.
        Fault::OutOfMemory { .. } => Outcome::Err(libc::ENOMEM),
        Fault::ForkedChild { .. } => unreachable!("the differential test does not fork"),
    }
}

fn access(a: Acc) -> Access {
    match a {
        Acc::Read => Access::Read,
        Acc::Write => Access::Write,
        Acc::Exec => Access::Exec,
    }
}

impl EngineWindow {
    /// A fresh space over the window. Frames for four times the window, so probing and
    /// `MAP_POPULATE` never run out.
    /// Arenas are off: Linux places hint-less mappings top-down, which arenas do not.
    pub fn new(base: u64, pages: u64, design: Design) -> EngineWindow {
        let space = AddressSpace::builder()
            .design(design)
            .arenas(Arenas::Off)
            .address_range(base, base + pages * PAGE)
            .memory(4 * pages * PAGE)
            .max_cores(2)
            .tlb_entries(16)
            .frame_batch(8)
            .build()
            .expect("building the aspace side");
        let core = space.attach().expect("attaching the aspace core");
        EngineWindow {
            space,
            core,
            base,
            pages,
        }
    }

    /// Applies `op` through the core.
    pub fn apply(&mut self, op: &Op) -> Outcome {
        let base = self.base;
        let call = |r: Result<(), aspace_vm::VmError>| match r {
            Ok(()) => Outcome::Ok(0),
            Err(e) => Outcome::Err(e.errno()),
        };
        match *op {
            Op::Mmap {
                off,
                len,
                prot,
                flags,
            } => match self.core.mmap(
                base.wrapping_add(off),
                len,
                Prot::from_bits_retain(prot),
                MapFlags::from_bits_retain(flags),
            ) {
                Ok(a) => Outcome::Ok(a.wrapping_sub(base)),
                Err(e) => Outcome::Err(e.errno()),
            },
            Op::Munmap { off, len } => call(self.core.munmap(base.wrapping_add(off), len)),
            Op::Mprotect { off, len, prot } => call(self.core.mprotect(
                base.wrapping_add(off),
                len,
                Prot::from_bits_retain(prot),
            )),
            Op::Madvise { off, len, advice } => call(self.core.madvise(
                base.wrapping_add(off),
                len,
                Advice::from_raw(advice),
            )),
            Op::Write { off, len, fill } => {
                match self.core.write(base + off, &pattern(fill, len)) {
                    Ok(()) => Outcome::Done(Vec::new()),
                    Err(f) => fault(f, base),
                }
            }
            Op::Read { off, len } => {
                let mut buf = vec![0u8; len as usize];
                match self.core.read(base + off, &mut buf) {
                    Ok(()) => Outcome::Done(buf),
                    Err(f) => fault(f, base),
                }
            }
            Op::Touch { off, access: a } => match self.core.touch(base + off, access(a)) {
                Ok(()) => Outcome::Done(Vec::new()),
                Err(f) => fault(f, base),
            },
        }
    }

    /// `touch(Write)` of every page: per page, what the write did.
    pub fn probe_writes(&mut self) -> Vec<Probe> {
        (0..self.pages)
            .map(
                |p| match self.core.touch(self.base + p * PAGE, Access::Write) {
                    Ok(()) => Probe::Ok,
                    Err(Fault::Unmapped { .. }) => Probe::Unmapped,
                    Err(Fault::Protection { .. }) => Probe::Protection,
                    Err(Fault::OutOfMemory { .. }) => panic!("aspace ran out of frames probing"),
                    Err(Fault::ForkedChild { .. }) => unreachable!("no fork here"),
                },
            )
            .collect()
    }

    /// The state of the window as aspace shows it.
    pub fn snapshot(&mut self) -> Snapshot {
        let (lo, hi) = (self.base, self.base + self.pages * PAGE);
        let maps: Vec<_> = self
            .space
            .maps()
            .into_iter()
            .filter(|r| r.end > lo && r.start < hi)
            .collect();
        let texts = maps.iter().map(|r| r.to_string()).collect();
        let lines: Vec<Line> = maps
            .iter()
            .map(|r| Line {
                start: r.start.max(lo) - lo,
                end: r.end.min(hi) - lo,
                prot: r.prot.bits(),
                shared: r.sharing == Sharing::Shared,
                offset: r.offset,
                inode: r.inode,
            })
            .collect();
        // Reads and fetches are probed for real; writes are not (a write fault changes merge state
        // (the region's anon identity) which the kernel side would have to mirror): the write
        // column follows from the lines, and `probe_writes` probes writes at the end of a case.
        let from_lines = Snapshot::access_from_lines(&lines, self.pages);
        let mut access_v = Vec::with_capacity(self.pages as usize);
        let mut contents = Vec::with_capacity(self.pages as usize);
        for p in 0..self.pages {
            let addr = self.base + p * PAGE;
            let probe = |r: Result<(), Fault>| match r {
                Ok(()) => Probe::Ok,
                Err(Fault::Unmapped { .. }) => Probe::Unmapped,
                Err(Fault::Protection { .. }) => Probe::Protection,
                Err(Fault::OutOfMemory { .. }) => panic!("aspace ran out of frames probing"),
                Err(Fault::ForkedChild { .. }) => unreachable!("no fork here"),
            };
            let read = probe(self.core.touch(addr, Access::Read));
            let exec = probe(self.core.touch(addr, Access::Exec));
            access_v.push([read, from_lines[p as usize][1], exec]);
            contents.push(if read == Probe::Ok {
                let mut page = vec![0u8; PAGE as usize];
                self.core.read(addr, &mut page).ok().map(|()| page)
            } else {
                None
            });
        }
        Snapshot {
            lines,
            texts,
            access: access_v,
            contents,
        }
    }
}
