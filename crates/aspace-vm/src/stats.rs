//! Counters of an address space, as [`crate::AddressSpace::stats`] reports them.
//!
//! Event counters (faults, fills, shootdowns, TLB hits) are kept per core and summed when read, so
//! counting costs no shared cache line; gauges (frames, page tables, regions) are the owning
//! component's own accounting. A snapshot taken while cores run is not atomic across fields.

/// A snapshot of an address space's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Page faults handled (accesses that missed the TLB and the page tables, successful or not).
    pub faults: u64,
    /// Faults that filled a page-table entry with a fresh zeroed frame.
    pub fills: u64,
    /// Shootdowns initiated (one per `munmap`/`mprotect`/`madvise` that removed translations).
    pub shootdowns_sent: u64,
    /// TLB flushes performed by cores in response to shootdowns.
    pub shootdowns_received: u64,
    /// Accesses translated by the soft TLB without walking the page tables.
    pub tlb_hits: u64,
    /// Accesses that missed the soft TLB.
    pub tlb_misses: u64,
    /// Frames currently backing pages (allocated from the pool, not in any free list).
    pub frames_in_use: u64,
    /// Frames the pool holds in total.
    pub frames_total: u64,
    /// Page-table pages currently allocated (all levels, the root included).
    pub page_tables: u64,
    /// Regions currently mapped.
    pub regions: u64,
    /// Cores currently attached.
    pub cores: u64,
    /// Faults by the stage that resolved them, for the `interval` design (zero for others):
    /// `[without any space lock, under the local read mode and the region's interval lock,
    /// under the global read mode]` (SOSP'25 §5.2).
    pub fault_stages: [u64; 3],
}
