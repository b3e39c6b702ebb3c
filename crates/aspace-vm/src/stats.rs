//! Counters of an address space, as [`crate::AddressSpace::stats`] reports them.
//!
//! Event counters (faults, fills, TLB hits, shootdown targets and waits) are kept per core and
//! summed when read, so counting costs no shared cache line; gauges (frames, page tables,
//! regions) are the owning component's own accounting. A snapshot taken while cores run is not atomic across fields.

/// A snapshot of an address space's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Page faults handled (accesses that missed the TLB and the page tables, successful or not).
    pub faults: u64,
    /// Faults that filled a page-table entry with a fresh zeroed frame.
    pub fills: u64,
    /// Shootdowns initiated (one per `munmap`/`mprotect`/`madvise` that removed translations
    /// and, under targeted shootdown, found a core that may have cached one). The same count as
    /// `shootdowns`, under its older name.
    pub shootdowns_sent: u64,
    /// Shootdown rounds: each asks its target cores to flush their TLBs and waits for those
    /// inside an access. Under targeted shootdown an unmap whose pages no core walked sends none.
    pub shootdowns: u64,
    /// Target cores over all rounds: attached cores whose flush was requested (every attached
    /// core under broadcast; under targeted shootdown the cores recorded in the changed page
    /// tables, a bit standing for every core whose index is equal modulo 512).
    pub shootdown_targets: u64,
    /// Target cores the shooters had to wait for over all rounds, because they were inside an
    /// access (`read`/`write`/`touch`) when their flush was requested. Idle targets cost no
    /// wait: they flush at their next access.
    pub shootdown_waits: u64,
    /// TLB flushes performed by cores in response to shootdowns.
    pub shootdowns_received: u64,
    /// Accesses translated by the soft TLB without walking the page tables.
    pub tlb_hits: u64,
    /// Accesses that missed the soft TLB.
    pub tlb_misses: u64,
    /// Frames currently backing pages (allocated from the pool, not in any free list). For a
    /// space built in a shared [`Memory`](crate::Memory), the memory's: every space's and
    /// file's frames.
    pub frames_in_use: u64,
    /// Frames the pool holds in total (a shared memory's: all of it).
    pub frames_total: u64,
    /// Page-table pages currently allocated (all levels, the root included; every core's tree
    /// under a design with per-core page tables).
    pub page_tables: u64,
    /// Bytes of those page tables (`page_tables` times the size of one table: 512 entries and
    /// two lines of bookkeeping, 4,224 bytes).
    pub page_table_bytes: u64,
    /// Under a design with one page-table tree per core, the bytes of each core slot's own tree
    /// (index: the slot; a slot's tree lives from its first attach and is emptied when its core
    /// detaches); empty for the designs whose cores share one tree.
    pub page_table_bytes_per_core: Vec<u64>,
    /// Bytes of the design's metadata: its region map (the nodes and records of its tree or
    /// skiplist, estimated from their counts; for the `BTreeMap` stores the entries alone, a
    /// lower bound) and, under per-core page tables (`radix`), the owner tree of per-page
    /// metadata that owns the frames and records which cores copied each translation
    /// (RadixVM §5.4 compares this with Linux's VMA tree).
    pub metadata_bytes: u64,
    /// Regions currently mapped.
    pub regions: u64,
    /// Cores currently attached.
    pub cores: u64,
    /// Faults by the stage that resolved them, for the designs with lock-free faults (zero for
    /// others): `[without any space lock, under the design's locks]`. `interval`: the second
    /// stage holds the local read mode and the region's interval lock (SOSP'25 §5.2; the
    /// paper's third stage, under the global read mode, serves file-backed memory, which this
    /// engine does not have: `designs/interval.rs`); `hybrid`: the space lock's shared side
    /// (ASPLOS'12 §5.2's retry under `mmap_sem`, `designs/hybrid.rs`).
    pub fault_stages: [u64; 2],
}
