//! The aspace side of the differential test: an [`AddressSpace`] whose address range is exactly
//! the kernel window, with one attached core, driven by the same ops and probed into the same
//! [`Snapshot`] shape.
//!
//! Probes use only the public API: `maps()` for the lines (not coalesced: aspace must merge
//! adjacent equal regions itself), `touch` with each access kind for the per-page access results,
//! and `read` of each readable page for the contents. Probing faults pages in (frames are filled),
//! which changes nothing observable.
//!
//! Not for: judging the results (that is `snapshot.rs`).

use aspace_vm::{Access, AddressSpace, Advice, CoreHandle, Fault, MapFlags, Prot, Sharing};

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
    pub fn new(base: u64, pages: u64) -> EngineWindow {
        let space = AddressSpace::builder()
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
                base + off,
                len,
                Prot::from_bits_retain(prot),
                MapFlags::from_bits_retain(flags),
            ) {
                Ok(a) => Outcome::Ok(a.wrapping_sub(base)),
                Err(e) => Outcome::Err(e.errno()),
            },
            Op::Munmap { off, len } => call(self.core.munmap(base + off, len)),
            Op::Mprotect { off, len, prot } => call(self.core.mprotect(
                base + off,
                len,
                Prot::from_bits_retain(prot),
            )),
            Op::Madvise { off, len, advice } => {
                call(self.core.madvise(base + off, len, Advice::from_raw(advice)))
            }
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

    /// The state of the window as aspace shows it.
    pub fn snapshot(&mut self) -> Snapshot {
        let lines = self
            .space
            .maps()
            .into_iter()
            .map(|r| Line {
                start: r.start.wrapping_sub(self.base),
                end: r.end.wrapping_sub(self.base),
                prot: r.prot.bits(),
                shared: r.sharing == Sharing::Shared,
            })
            .collect();
        let mut access_v = Vec::with_capacity(self.pages as usize);
        let mut contents = Vec::with_capacity(self.pages as usize);
        for p in 0..self.pages {
            let addr = self.base + p * PAGE;
            let mut probes = [Probe::Ok; 3];
            for (i, a) in [Access::Read, Access::Write, Access::Exec]
                .into_iter()
                .enumerate()
            {
                probes[i] = match self.core.touch(addr, a) {
                    Ok(()) => Probe::Ok,
                    Err(Fault::Unmapped { .. }) => Probe::Unmapped,
                    Err(Fault::Protection { .. }) => Probe::Protection,
                    Err(Fault::OutOfMemory { .. }) => panic!("aspace ran out of frames probing"),
                };
            }
            access_v.push(probes);
            contents.push(if probes[0] == Probe::Ok {
                let mut page = vec![0u8; PAGE as usize];
                self.core.read(addr, &mut page).ok().map(|()| page)
            } else {
                None
            });
        }
        Snapshot {
            lines,
            access: access_v,
            contents,
        }
    }
}
