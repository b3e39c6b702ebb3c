//! The trivially correct sequential model of an address space that the conformance suite compares
//! every design with.
//!
//! State: a `BTreeMap` from page number to [`Page`] (protection, sharing, the `mmap` call it came
//! from, its contents or `None` for an untouched zero page, and whether a frame must, may or
//! cannot back it). Every system call is written as the Linux source does it (mm/mmap.c
//! `do_mmap` and `__get_unmapped_area`, mm/vma.c `do_vmi_munmap`, mm/mprotect.c
//! `do_mprotect_pkey`, mm/madvise.c `do_madvise`), checks in the same order, so that the errno of
//! an input that is wrong in several ways is Linux's. The orders and corner cases were checked
//! against the kernel this project runs on (6.18; see `model_tests.rs`, which replays hand-written
//! sequences on a reserved window of the test process and compares page by page):
//! - `mmap`: not anonymous `EBADF` first; `len == 0` `EINVAL`; a non-fixed hint is rounded down to
//!   a page and raised to `min_addr`; `len` rounded up, wrapping to 0 `ENOMEM`; `len > max_addr`
//!   `ENOMEM`; fixed: `addr > max_addr - len` `ENOMEM`, then unaligned `EINVAL`, then below
//!   `min_addr` `EPERM` (Linux without `CAP_SYS_RAWIO`); `MAP_FIXED_NOREPLACE` over anything
//!   `EEXIST`; only then the mapping type (`SHARED` or `PRIVATE`; anything else, including
//!   `MAP_SHARED_VALIDATE` for an anonymous mapping, `EINVAL`). Unknown flag bits and unknown
//!   protection bits are ignored (the region keeps `prot & (R|W|X)`).
//! - `munmap`: unaligned, `addr > max_addr`, `len > max_addr - addr`, or `len == 0`: `EINVAL`.
//! - `mprotect`: both `PROT_GROWS*` bits `EINVAL`; unaligned `EINVAL`; `len == 0` succeeds;
//!   overflowing end `ENOMEM`; bits beyond `R|W|X|SEM` `EINVAL`; nothing mapped in the range or
//!   `addr` unmapped `ENOMEM` with nothing changed; otherwise regions are changed in order up to the
//!   first hole and then `ENOMEM` (the prefix stays changed: Linux does it).
//! - `madvise`: unknown advice `EINVAL` first; unaligned `EINVAL`; `len` rounding to 0 or an end
//!   that wraps `EINVAL`; `len == 0` succeeds; nothing mapped `ENOMEM`; otherwise every mapped part
//!   is advised and a hole anywhere gives `ENOMEM` afterwards. `DONTNEED` zeroes private pages;
//!   shared anonymous pages keep their contents (they live in the shmem object).
//! - Accesses (`read`/`write`/`touch`): pages in order; the first page without a region faults
//!   `Unmapped`, without the right `Protection` (x86: write or exec implies readable), at the first
//!   byte of that page the access covers. A failing `write` copies nothing (the engine translates
//!   every page before copying), but may have faulted earlier pages in.
//!
//! Limits, as the issue fixes them ("return Linux's errno and change nothing"): a call whose
//! resulting region count (regions merged as `/proc/self/maps` shows them) would exceed
//! `max_map_count` fails with `ENOMEM` and changes nothing. (Linux checks `map_count` per split and
//! lets `mmap` reach `max_map_count + 1`; the engine's rule is the one the plan states: counted
//! after merges and splits.) The address-space limit is `[min_addr, max_addr)`.
//!
//! Merging (Linux's `vma_merge`, checked against the kernel in `model_tests.rs`): adjacent pages
//! are one region when protection, sharing and merge-only flags (`VM_NORESERVE`) are equal, and,
//! for shared pages, they come from the same `mmap` call (each shared anonymous mapping is its own
//! shmem object), for private pages their anon identities (Linux's `anon_vma`) are compatible:
//! one of them has none, or both the same. A private region gets an identity at its first write
//! fault (also after reads, which map the zero page; also by `MAP_POPULATE` of a writable
//! mapping): an adjacent private neighbour's with equal flags (next first, then previous), else a
//! fresh one. Regions are formed greedily left to right and share their first identity.
//!
//! Frames: the model does not predict which engine pages hold frames exactly (reads may map a
//! fresh frame or, like Linux, a zero page), so each page records [`Backed`]: `Yes` (written: a
//! frame must back it), `Maybe` (read, touched, populated or faulted by a failing write), `No`.
//! The suite checks `#Yes <= frames_in_use <= #Yes + #Maybe`.
//!
//! Not for: placement policy (non-fixed `mmap` only has to return a free range in bounds, and the
//! hint when it is free), concurrency, or speed.

use aspace_vm::{Access, Advice, Fault, MapFlags, Prot, RegionInfo, Sharing, PAGE_SIZE};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Bytes of one page.
pub const P: u64 = PAGE_SIZE;
/// `PROT_SEM` (accepted by Linux's `mprotect`, ignored).
pub const PROT_SEM: u32 = 0x8;
/// `PROT_GROWSDOWN`.
pub const PROT_GROWSDOWN: u32 = 0x0100_0000;
/// `PROT_GROWSUP`.
pub const PROT_GROWSUP: u32 = 0x0200_0000;
/// `MAP_TYPE`: the mask of the mapping-type bits.
pub const MAP_TYPE: u32 = 0x0f;
/// `MAP_32BIT`: ignored with `MAP_FIXED`; a search below 2 GiB otherwise (not modelled: `EINVAL`).
pub const MAP_32BIT: u32 = 0x40;
/// Flags the engine does not model (`MAP_GROWSDOWN`, `MAP_LOCKED`, `MAP_HUGETLB`): `EINVAL`.
pub const MAP_UNMODELLED: u32 = 0x100 | 0x2000 | 0x4_0000;
/// `MAP_NONBLOCK`: cancels `MAP_POPULATE`.
pub const MAP_NONBLOCK: u32 = 0x1_0000;
/// `MAP_STACK`: sets `VM_NOHUGEPAGE` (a merge flag).
pub const MAP_STACK: u32 = 0x2_0000;
/// `MAP_SYNC`: sets `VM_SYNC` (a merge flag) on anonymous mappings too.
pub const MAP_SYNC: u32 = 0x8_0000;

/// Merge flag: `VM_NORESERVE`.
pub const NORESERVE: u8 = 1 << 0;
/// Merge flag: `VM_NOHUGEPAGE` (from `MAP_STACK`).
pub const STACK: u8 = 1 << 1;
/// Merge flag: `VM_SYNC` (from `MAP_SYNC`).
pub const SYNC: u8 = 1 << 5;
/// Merge flag: `VM_ACCOUNT`, set by `mmap` of a private writable mapping without
/// `MAP_NORESERVE` (`accountable_mapping`) and by `mprotect` adding write to such a region;
/// `mprotect` dropping write clears it only while the region has no `anon_vma`
/// (`mprotect_fixup`, Linux 6.x).
pub const ACCOUNT: u8 = 1 << 4;

/// `VM_ACCOUNT` after `mprotect(prot)` (see [`ACCOUNT`]).
pub fn account_after_mprotect(flags: u8, prot: Prot, sharing: Sharing, has_anon: bool) -> u8 {
    if prot.contains(Prot::WRITE) {
        if sharing == Sharing::Private && flags & NORESERVE == 0 {
            flags | ACCOUNT
        } else {
            flags
        }
    } else if has_anon {
        flags
    } else {
        flags & !ACCOUNT
    }
}

/// Whether a frame backs a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backed {
    /// Never faulted in since it was mapped or dropped.
    No,
    /// Faulted in by an access that need not allocate (read, exec, populate, failed write).
    Maybe,
    /// Written: a frame backs it.
    Yes,
}

/// One mapped page of the model.
#[derive(Clone, Debug)]
pub struct Page {
    /// Its protection (`R|W|X` only).
    pub prot: Prot,
    /// Private or shared.
    pub sharing: Sharing,
    /// Which `mmap` call created it (shared pages merge only within one call).
    pub origin: u64,
    /// For a shared page: the address of offset 0 of its shmem object (the `mmap` start) and
    /// the object's number (`maps()`'s inode: shared mappings are numbered 1, 2, ... in the order
    /// they were created). 0 and 0 for private pages.
    pub shm: (u64, u64),
    /// `vm_flags` that only decide merging: [`NORESERVE`] (from `MAP_NORESERVE`) and
    /// [`ACCOUNT`] (`VM_ACCOUNT`).
    pub flags: u8,
    /// Linux's `anon_vma` of a private page: 0 until the region's first write fault.
    pub anon: u64,
    /// Contents; `None` reads as zeroes.
    pub contents: Option<Arc<[u8; P as usize]>>,
    /// Whether a frame backs it.
    pub backed: Backed,
}

/// Where a successful `mmap` must place its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Exactly here (`MAP_FIXED`, `MAP_FIXED_NOREPLACE`).
    Exact(u64),
    /// Anywhere free in bounds; at `hint` when `hint` is `Some` and that range is free.
    Anywhere {
        /// The hint after Linux's rounding (`None` for no hint).
        hint: Option<u64>,
    },
}

/// What a valid `mmap` will do, once the caller knows where it went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmapPlan {
    /// Where.
    pub placement: Placement,
    /// Bytes (page multiple).
    pub len: u64,
    /// The region's protection (`R|W|X` bits of the argument).
    pub prot: Prot,
    /// Private or shared.
    pub sharing: Sharing,
    /// `MAP_POPULATE` was given.
    pub populate: bool,
    /// The region's merge-only `vm_flags` (see [`Page::flags`]).
    pub flags: u8,
}

/// The sequential model.
#[derive(Clone, Debug)]
pub struct Model {
    /// Lowest mappable address.
    pub min_addr: u64,
    /// One past the highest mappable address (Linux's `TASK_SIZE`).
    pub max_addr: u64,
    /// Most regions at once.
    pub max_map_count: usize,
    pages: BTreeMap<u64, Page>,
    next_origin: u64,
    next_shm: u64,
}

/// Page-align `len` upward like Linux's `PAGE_ALIGN` (wrapping).
pub fn page_align(len: u64) -> u64 {
    len.wrapping_add(P - 1) & !(P - 1)
}

fn vpn(addr: u64) -> u64 {
    addr / P
}

/// One region of the model: pages `first..end` and the anon identity they share.
struct Run {
    first: u64,
    end: u64,
    anon: u64,
}

/// The regions, formed greedily left to right: a page joins the region before it when adjacent
/// with equal protection, sharing and flags, and for shared pages the same `mmap` call, for
/// private pages a compatible anon identity (either side none, or equal); the region's identity
/// is its first nonzero one. This is Linux's rule (`is_mergeable_anon_vma`; a new piece
/// compatible with both incompatible neighbours merges with the previous one).
fn runs(pages: &BTreeMap<u64, Page>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    let mut prev: Option<(u64, &Page)> = None;
    for (&v, p) in pages {
        let joins = match (prev, out.last()) {
            (Some((pv, pp)), Some(run)) => {
                pv + 1 == v
                    && pp.prot == p.prot
                    && pp.sharing == p.sharing
                    && pp.flags == p.flags
                    && match p.sharing {
                        Sharing::Shared => pp.origin == p.origin,
                        Sharing::Private => run.anon == 0 || p.anon == 0 || run.anon == p.anon,
                    }
            }
            _ => false,
        };
        if joins {
            let run = out.last_mut().expect("joined a run");
            run.end = v + 1;
            if run.anon == 0 {
                run.anon = p.anon;
            }
        } else {
            out.push(Run {
                first: v,
                end: v + 1,
                anon: p.anon,
            });
        }
        prev = Some((v, p));
    }
    out
}

fn count_regions(pages: &BTreeMap<u64, Page>) -> usize {
    runs(pages).len()
}

/// Gives every page of a region its region's anon identity (merged VMAs share one `anon_vma`).
fn normalize(pages: &mut BTreeMap<u64, Page>) {
    for run in runs(pages) {
        if run.anon != 0 {
            for (_, p) in pages.range_mut(run.first..run.end) {
                p.anon = run.anon;
            }
        }
    }
}

impl Model {
    /// An empty space over `[min_addr, max_addr)` with at most `max_map_count` regions.
    pub fn new(min_addr: u64, max_addr: u64, max_map_count: usize) -> Model {
        Model {
            min_addr,
            max_addr,
            max_map_count,
            pages: BTreeMap::new(),
            next_origin: 1,
            next_shm: 1,
        }
    }

    /// The mapped pages, by page number.
    pub fn pages(&self) -> &BTreeMap<u64, Page> {
        &self.pages
    }

    /// The page containing `addr`, if mapped.
    pub fn page(&self, addr: u64) -> Option<&Page> {
        self.pages.get(&vpn(addr))
    }

    /// The regions as `/proc/self/maps` lists them: merged, sorted.
    pub fn regions(&self) -> Vec<RegionInfo> {
        runs(&self.pages)
            .into_iter()
            .map(|r| {
                let p = &self.pages[&r.first];
                RegionInfo {
                    start: r.first * P,
                    end: r.end * P,
                    prot: p.prot,
                    sharing: p.sharing,
                    offset: if p.sharing == Sharing::Shared {
                        r.first * P - p.shm.0
                    } else {
                        0
                    },
                    inode: p.shm.1,
                }
            })
            .collect()
    }

    /// The first write fault of a private page whose region has no anon identity yet gives the
    /// region one (Linux's `anon_vma_prepare`): an adjacent private neighbour's with the same
    /// flags, the next one first, then the previous one (`find_mergeable_anon_vma`; protection
    /// may differ), else a fresh one.
    fn write_fault(&mut self, v: u64) {
        let p = &self.pages[&v];
        if p.sharing != Sharing::Private || p.anon != 0 {
            return;
        }
        let all = runs(&self.pages);
        let i = all
            .iter()
            .position(|r| r.first <= v && v < r.end)
            .expect("in a run");
        let run = &all[i];
        let flags = p.flags;
        let usable = |r: Option<&Run>, adjacent: bool| -> Option<u64> {
            let r = r?;
            let q = &self.pages[&r.first];
            (adjacent && q.sharing == Sharing::Private && q.flags == flags && r.anon != 0)
                .then_some(r.anon)
        };
        let next = usable(
            all.get(i + 1),
            all.get(i + 1).is_some_and(|n| n.first == run.end),
        );
        let prev = usable(
            i.checked_sub(1).map(|j| &all[j]),
            i.checked_sub(1).is_some_and(|j| all[j].end == run.first),
        );
        let anon = next.or(prev).unwrap_or_else(|| {
            self.next_origin += 1;
            self.next_origin
        });
        let (first, end) = (run.first, run.end);
        for (_, q) in self.pages.range_mut(first..end) {
            q.anon = anon;
        }
        normalize(&mut self.pages);
    }

    /// Pages with [`Backed::Yes`] and with `Yes` or `Maybe`: bounds on the frames in use.
    pub fn frame_bounds(&self) -> (u64, u64) {
        let yes = self.pages.values().filter(|p| p.backed == Backed::Yes);
        let maybe = self.pages.values().filter(|p| p.backed >= Backed::Maybe);
        (yes.count() as u64, maybe.count() as u64)
    }

    /// Whether no page of `[start, start + len)` is mapped.
    pub fn is_free(&self, start: u64, len: u64) -> bool {
        self.pages
            .range(vpn(start)..vpn(start) + vpn(len))
            .next()
            .is_none()
    }

    /// Whether `[start, start + len)` is a range a non-fixed `mmap` may return: aligned, inside
    /// `[min_addr, max_addr)`, free.
    pub fn is_valid_placement(&self, start: u64, len: u64) -> bool {
        start % P == 0
            && start >= self.min_addr
            && start <= self.max_addr
            && len <= self.max_addr - start
            && self.is_free(start, len)
    }

    /// Whether any free range of `len` bytes exists in bounds.
    pub fn has_gap(&self, len: u64) -> bool {
        let mut cursor = self.min_addr;
        for &v in self
            .pages
            .range(vpn(self.min_addr)..vpn(self.max_addr))
            .map(|(v, _)| v)
        {
            if v * P >= cursor && v * P - cursor >= len {
                return true;
            }
            cursor = cursor.max((v + 1) * P);
        }
        self.max_addr >= cursor && self.max_addr - cursor >= len
    }

    /// Validates an `mmap` call like `do_mmap`; the caller then places it (see [`Placement`])
    /// and calls [`Model::mmap_commit`].
    ///
    /// # Errors
    /// The errno Linux returns. `ENOMEM` for the region-count limit is decided by `mmap_commit`
    /// (it depends on where the range lands).
    pub fn mmap_plan(
        &self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<MmapPlan, i32> {
        if !flags.contains(MapFlags::ANONYMOUS) {
            return Err(libc::EBADF);
        }
        let fixed = flags.bits() & (MapFlags::FIXED.bits() | MapFlags::FIXED_NOREPLACE.bits()) != 0;
        if flags.bits() & MAP_UNMODELLED != 0 || (!fixed && flags.bits() & MAP_32BIT != 0) {
            return Err(libc::EINVAL);
        }
        if len == 0 {
            return Err(libc::EINVAL);
        }
        let hint = if fixed {
            addr
        } else {
            let h = addr & !(P - 1);
            if h != 0 && h < self.min_addr {
                page_align(self.min_addr)
            } else {
                h
            }
        };
        let len = page_align(len);
        if len == 0 {
            return Err(libc::ENOMEM);
        }
        if len > self.max_addr {
            return Err(libc::ENOMEM);
        }
        let placement = if fixed {
            if addr > u64::MAX - (P - 1) {
                // get_unmapped_area's result is read as an error code: errno `-addr`.
                return Err(addr.wrapping_neg() as i32);
            }
            if addr > self.max_addr - len {
                return Err(libc::ENOMEM);
            }
            if addr % P != 0 {
                return Err(libc::EINVAL);
            }
            if addr < self.min_addr {
                return Err(libc::EPERM);
            }
            if flags.contains(MapFlags::FIXED_NOREPLACE) && !self.is_free(addr, len) {
                return Err(libc::EEXIST);
            }
            Placement::Exact(addr)
        } else {
            if len > self.max_addr - self.min_addr {
                return Err(libc::ENOMEM);
            }
            let hint = (hint != 0 && hint <= self.max_addr - len).then_some(hint);
            Placement::Anywhere { hint }
        };
        // Placement (`get_unmapped_area`) fails before do_mmap looks at the map type.
        if let Placement::Anywhere { .. } = placement {
            if !self.has_gap(len) {
                return Err(libc::ENOMEM);
            }
        }
        let sharing = match flags.bits() & MAP_TYPE {
            0x01 => Sharing::Shared,
            0x02 => Sharing::Private,
            _ => return Err(libc::EINVAL),
        };
        Ok(MmapPlan {
            placement,
            len,
            prot: Prot::from_bits_retain(prot.bits() & Prot::KNOWN.bits()),
            sharing,
            populate: flags.contains(MapFlags::POPULATE) && flags.bits() & MAP_NONBLOCK == 0,
            flags: {
                let noreserve = flags.contains(MapFlags::NORESERVE);
                let account =
                    sharing == Sharing::Private && prot.contains(Prot::WRITE) && !noreserve;
                (if noreserve { NORESERVE } else { 0 })
                    | (if account { ACCOUNT } else { 0 })
                    | (if flags.bits() & MAP_STACK != 0 {
                        STACK
                    } else {
                        0
                    })
                    | (if flags.bits() & MAP_SYNC != 0 {
                        SYNC
                    } else {
                        0
                    })
            },
        })
    }

    /// Whether a non-fixed `mmap` placed anywhere could fail the region-count limit (so an
    /// engine's `ENOMEM` is legitimate for it).
    pub fn anywhere_may_hit_map_count(&self) -> bool {
        count_regions(&self.pages) + 1 > self.max_map_count
    }

    /// Maps `plan` at `start` (replacing what is there), unless the region count would exceed the
    /// limit.
    ///
    /// # Errors
    /// `ENOMEM` (nothing changed) when the result would have too many regions.
    pub fn mmap_commit(&mut self, plan: &MmapPlan, start: u64) -> Result<u64, i32> {
        let mut next = self.pages.clone();
        let first = vpn(start);
        let n = vpn(plan.len);
        let origin = self.next_origin;
        let shm = match plan.sharing {
            Sharing::Shared => (start, self.next_shm),
            Sharing::Private => (0, 0),
        };
        for v in first..first + n {
            next.insert(
                v,
                Page {
                    prot: plan.prot,
                    sharing: plan.sharing,
                    origin,
                    shm,
                    flags: plan.flags,
                    anon: 0,
                    contents: None,
                    backed: if plan.populate && plan.prot.allows(Access::Read) {
                        Backed::Maybe
                    } else {
                        Backed::No
                    },
                },
            );
        }
        normalize(&mut next);
        if count_regions(&next) > self.max_map_count {
            return Err(libc::ENOMEM);
        }
        self.next_origin += 1;
        if plan.sharing == Sharing::Shared {
            self.next_shm += 1;
        }
        self.pages = next;
        if plan.populate && plan.prot.contains(Prot::WRITE) && plan.sharing == Sharing::Private {
            // Populating a private writable mapping write-faults it (FOLL_WRITE).
            self.write_fault(first);
        }
        Ok(start)
    }

    /// A whole `mmap` whose placement is exact (fixed), or at `chosen` for a non-fixed one.
    ///
    /// # Errors
    /// The errno Linux returns.
    pub fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
        chosen: u64,
    ) -> Result<u64, i32> {
        let plan = self.mmap_plan(addr, len, prot, flags)?;
        let start = match plan.placement {
            Placement::Exact(a) => a,
            Placement::Anywhere { .. } => chosen,
        };
        self.mmap_commit(&plan, start)
    }

    /// `munmap` like `do_vmi_munmap`.
    ///
    /// # Errors
    /// The errno Linux returns; `ENOMEM` (nothing changed) for the region-count limit.
    pub fn munmap(&mut self, addr: u64, len: u64) -> Result<(), i32> {
        if addr % P != 0 || addr > self.max_addr || len > self.max_addr - addr {
            return Err(libc::EINVAL);
        }
        let end = addr + page_align(len);
        if end == addr {
            return Err(libc::EINVAL);
        }
        let mut next = self.pages.clone();
        let doomed: Vec<u64> = next.range(vpn(addr)..vpn(end)).map(|(&v, _)| v).collect();
        if doomed.is_empty() {
            return Ok(());
        }
        for v in doomed {
            next.remove(&v);
        }
        normalize(&mut next);
        if count_regions(&next) > self.max_map_count {
            return Err(libc::ENOMEM);
        }
        self.pages = next;
        Ok(())
    }

    /// `mprotect` like `do_mprotect_pkey`.
    ///
    /// # Errors
    /// The errno Linux returns (after applying the prefix before a hole).
    pub fn mprotect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), i32> {
        let bits = prot.bits();
        let grows = bits & (PROT_GROWSDOWN | PROT_GROWSUP);
        if grows == PROT_GROWSDOWN | PROT_GROWSUP {
            return Err(libc::EINVAL);
        }
        let bits = bits & !grows;
        if addr % P != 0 {
            return Err(libc::EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let end = addr.wrapping_add(page_align(len));
        if end <= addr {
            return Err(libc::ENOMEM);
        }
        if bits & !(Prot::KNOWN.bits() | PROT_SEM) != 0 {
            return Err(libc::EINVAL);
        }
        let first = self
            .pages
            .range(vpn(addr)..vpn(end))
            .next()
            .map(|(&v, _)| v);
        let Some(first) = first else {
            return Err(libc::ENOMEM);
        };
        if grows & PROT_GROWSDOWN != 0 {
            return Err(libc::EINVAL); // no region here grows down
        }
        if first != vpn(addr) {
            return Err(libc::ENOMEM);
        }
        if grows & PROT_GROWSUP != 0 {
            return Err(libc::EINVAL);
        }
        let new_prot = Prot::from_bits_retain(bits & Prot::KNOWN.bits());
        let mut next = self.pages.clone();
        let mut hole = false;
        for v in vpn(addr)..vpn(end) {
            match next.get_mut(&v) {
                Some(p) => {
                    p.prot = new_prot;
                    p.flags = account_after_mprotect(p.flags, new_prot, p.sharing, p.anon != 0);
                }
                None => {
                    hole = true;
                    break;
                }
            }
        }
        normalize(&mut next);
        if count_regions(&next) > self.max_map_count {
            return Err(libc::ENOMEM);
        }
        self.pages = next;
        if hole {
            Err(libc::ENOMEM)
        } else {
            Ok(())
        }
    }

    /// `madvise` like `do_madvise` (advice `NORMAL`, `RANDOM`, `SEQUENTIAL`, `WILLNEED`,
    /// `DONTNEED` are valid; others `EINVAL`).
    ///
    /// # Errors
    /// The errno Linux returns (after advising every mapped part when there is a hole).
    pub fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<(), i32> {
        if !(0..=4).contains(&advice.raw()) {
            return Err(libc::EINVAL);
        }
        if addr % P != 0 {
            return Err(libc::EINVAL);
        }
        let len_al = page_align(len);
        if len != 0 && len_al == 0 {
            return Err(libc::EINVAL);
        }
        let Some(end) = addr.checked_add(len_al) else {
            return Err(libc::EINVAL);
        };
        if end == addr {
            return Ok(());
        }
        let mapped: Vec<u64> = self
            .pages
            .range(vpn(addr)..vpn(end))
            .map(|(&v, _)| v)
            .collect();
        if mapped.is_empty() {
            return Err(libc::ENOMEM);
        }
        if advice == Advice::DONTNEED {
            for v in &mapped {
                let p = self.pages.get_mut(v).expect("mapped");
                match p.sharing {
                    Sharing::Private => {
                        p.contents = None;
                        p.backed = Backed::No;
                    }
                    Sharing::Shared => {
                        if p.backed == Backed::Yes {
                            p.backed = Backed::Maybe;
                        }
                    }
                }
            }
        }
        if mapped.len() as u64 != vpn(end) - vpn(addr) {
            return Err(libc::ENOMEM);
        }
        Ok(())
    }

    /// The fault an access of kind `access` to `addr` raises, if any.
    pub fn fault(&self, addr: u64, access: Access) -> Option<Fault> {
        match self.page(addr) {
            None => Some(Fault::Unmapped { addr }),
            Some(p) if !p.prot.allows(access) => Some(Fault::Protection { addr }),
            Some(_) => None,
        }
    }

    /// The pages `[addr, addr + len)` covers, each with the first byte the access touches in it.
    fn spans(addr: u64, len: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        let mut a = addr;
        let end = addr + len;
        while a < end {
            let page_end = (a / P + 1) * P;
            let e = page_end.min(end);
            out.push((a, a - a / P * P, e - a));
            a = e;
        }
        out
    }

    /// Marks the page faulted in (at least `backed`).
    fn fault_in(&mut self, addr: u64, backed: Backed) {
        let p = self.pages.get_mut(&vpn(addr)).expect("mapped");
        p.backed = p.backed.max(backed);
    }

    /// `read(addr, len)`: the bytes, or the first page's fault. Pages before the fault may have
    /// been faulted in.
    ///
    /// # Errors
    /// The fault of the first page that cannot be read.
    pub fn read(&mut self, addr: u64, len: u64) -> Result<Vec<u8>, Fault> {
        let mut out = Vec::with_capacity(len as usize);
        for (a, off, n) in Self::spans(addr, len) {
            if let Some(f) = self.fault(a, Access::Read) {
                return Err(f);
            }
            self.fault_in(a, Backed::Maybe);
            let p = self.page(a).expect("mapped");
            match &p.contents {
                Some(c) => out.extend_from_slice(&c[off as usize..(off + n) as usize]),
                None => out.resize(out.len() + n as usize, 0),
            }
        }
        Ok(out)
    }

    /// `write(addr, data)`: all or nothing; pages before a faulting one may have been faulted
    /// in.
    ///
    /// # Errors
    /// The fault of the first page that cannot be written.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Fault> {
        let spans = Self::spans(addr, data.len() as u64);
        for &(a, _, _) in &spans {
            if let Some(f) = self.fault(a, Access::Write) {
                return Err(f);
            }
            self.fault_in(a, Backed::Maybe);
            self.write_fault(vpn(a));
        }
        let mut done = 0usize;
        for (a, off, n) in spans {
            let p = self.pages.get_mut(&vpn(a)).expect("mapped");
            p.backed = Backed::Yes;
            let c = p
                .contents
                .get_or_insert_with(|| Arc::new([0u8; P as usize]));
            Arc::make_mut(c)[off as usize..(off + n) as usize]
                .copy_from_slice(&data[done..done + n as usize]);
            done += n as usize;
        }
        Ok(())
    }

    /// `touch(addr, access)`.
    ///
    /// # Errors
    /// The fault the access raises.
    pub fn touch(&mut self, addr: u64, access: Access) -> Result<(), Fault> {
        if let Some(f) = self.fault(addr, access) {
            return Err(f);
        }
        let backed = if access == Access::Write {
            self.write_fault(vpn(addr));
            Backed::Yes
        } else {
            Backed::Maybe
        };
        self.fault_in(addr, backed);
        Ok(())
    }

    /// The contents of the mapped page at `page_start` (zeroes when untouched).
    pub fn contents(&self, page_start: u64) -> Option<[u8; P as usize]> {
        self.page(page_start)
            .map(|p| p.contents.as_deref().copied().unwrap_or([0; P as usize]))
    }
}
