//! A core's private state ([`Core`]): what one attached thread owns and lends to the design's
//! operations and to its access windows: its shootdown slot id, soft TLB, free-frame cache, RCU
//! reader, page-table cache, page-table users bit, anon identity block and scratch buffers.
//!
//! One thread uses a core at a time (the public `CoreHandle` owning it is `Send`, not `Sync`),
//! so nothing here is synchronized except through the shared structures it points into.
//!
//! Not for: the access window (`access.rs`) or the public handle (`handle.rs`).

use crate::error::{Limit, VmError};
use crate::frames::{Frame, FrameCache};
use crate::page_table::{PtCache, UserBit};
use crate::region::plan::EditBuffers;
use crate::region::AnonId;
use crate::shared::Shared;
use crate::shootdown::{CoreId, CoreSet, ShootdownPolicy};
use crate::tlb::Tlb;
use std::ops::Range;

/// A core's private state (module doc).
pub(crate) struct Core {
    /// The shootdown slot (and index of the per-core arrays).
    pub(crate) id: CoreId,
    /// The last flush request this core acted on.
    pub(crate) seen: u64,
    /// The soft TLB.
    pub(crate) tlb: Tlb,
    /// The free-frame cache.
    pub(crate) cache: FrameCache,
    /// The page-table cache: the tables this core installs and frees (`page_table/cache.rs`).
    pub(crate) tables: PtCache,
    /// The RCU reader that protects page-table walks.
    pub(crate) reader: aspace_rcu::Reader,
    /// Under targeted shootdown, the bit this core's walks record in the leaf tables they read
    /// (`page_table/users.rs`); `None` under broadcast (nothing is recorded).
    pub(crate) user: Option<UserBit>,
    /// Frames removed by a clear whose shootdown returned (no core can reach them), not yet
    /// zeroed: the handle gives them to the frame cache once the call's locks are released
    /// ([`Core::release_freed`]), so their zeroing runs outside every lock (issue 22).
    pub(crate) freed: Vec<Frame>,
    /// Scratch: the cores a targeted shootdown reaches.
    pub(crate) targets: CoreSet,
    /// Scratch: translated frame addresses of a multi-page access.
    pub(crate) pages: Vec<usize>,
    /// Scratch: the buffers of region edits.
    pub(crate) edits: EditBuffers,
    /// `coarse`: this core's membership of the space lock's group (joined at attach; the
    /// second core's join upgrades the lock). Lent out for one operation at a time
    /// (`designs/coarse.rs`); `None` for the other designs.
    pub(crate) member: Option<aspace_sync::Member>,
    /// The rest of this core's block of anon identities.
    anon: Range<u64>,
    /// A session (`session.rs`) holds this core's access window open. Cleared when the
    /// session closes; found set by the handle only after a session was leaked
    /// (`mem::forget`), whose window the handle then closes (`handle.rs`).
    pub(crate) in_session: bool,
    /// `coarse`: whether the current write section runs in the light mode, so that this core
    /// is the only core of the space and no other can attach before the section ends
    /// (`designs/coarse.rs`, "One core"); its shootdowns then only flush this core's own TLB
    /// (`syscalls::shoot_down_locked`). Every `coarse` write section sets it before its body
    /// runs; nothing else sets it, and only write sections shoot down.
    pub(crate) sole_core: bool,
}

impl Core {
    /// Registers a new core with the space `sh`.
    ///
    /// # Errors
    /// [`VmError::TooManyCores`] when every shootdown slot is taken; [`VmError::OutOfMemory`]
    /// when the core's own page-table root (per-core page tables) cannot be allocated.
    pub(crate) fn attach(sh: &Shared) -> Result<Core, VmError> {
        let id = sh.shootdown.register()?;
        let Some(tables) = sh.tables.attach(id) else {
            sh.shootdown.unregister(id);
            return Err(VmError::OutOfMemory(Limit::Memory));
        };
        Ok(Core {
            id,
            seen: sh.shootdown.start(id),
            tlb: Tlb::new(sh.config.tlb_entries),
            cache: FrameCache::new(),
            tables,
            reader: sh.domain.register(),
            user: (sh.shootdown_policy == ShootdownPolicy::Targeted && sh.tables.records_users())
                .then(|| UserBit::of(id.index(), sh.config.max_cores)),
            freed: Vec::new(),
            targets: CoreSet::new(),
            pages: Vec::new(),
            edits: EditBuffers::default(),
            // Last: the join of a second core waits one grace period (the upgrade) and should
            // not run for a core whose attach then fails.
            member: sh
                .space_lock_group
                .as_ref()
                .map(aspace_sync::LockGroup::join),
            anon: 0..0,
            in_session: false,
            sole_core: false,
        })
    }

    /// Unregisters the core: its cached frames and page tables go back to the pools (retired
    /// tables through RCU; under per-core page tables its own tree is discarded first), its
    /// counters into the space's totals, its shootdown slot is freed. The core must not be used
    /// afterwards.
    pub(crate) fn detach(&mut self, sh: &Shared) {
        // Frames a call that unwound left unreleased.
        self.release_freed(sh);
        self.cache.drain(sh.pool());
        sh.tables.detach(self.id, &mut self.tables, &sh.domain);
        self.tables.drain(&sh.domain);
        let counters = sh.counters.of(self.id);
        counters.publish_tlb(self.tlb.hits(), self.tlb.misses());
        sh.counters.retire(self.id);
        sh.shootdown.unregister(self.id);
    }

    /// Zeroes the frames the last call removed (`freed`) and gives them to this core's cache.
    /// Called by the handle after each call that may free frames, with no lock held.
    #[inline]
    pub(crate) fn release_freed(&mut self, sh: &Shared) {
        if !self.freed.is_empty() {
            self.cache.free_all(sh.pool(), &mut self.freed);
        }
    }

    /// Discards this core's own page-table tree (per-core page tables: on memory pressure, or
    /// to test the refill; `page_table/per_core.rs`) and returns how many tables it unlinked;
    /// nothing under the shared tree. Its tables go to RCU; its faults refill the tree.
    ///
    /// Then makes its next access window flush the TLB and report `flushed()`: the discarded
    /// entries no longer name this core as a holder of their translations (an editor that
    /// finds nothing in its tree does not shoot it down), so neither its TLB nor a multi-page
    /// access's translations gathered before (`handle.rs`) may outlive the discard. It does so
    /// by making `seen` differ from its slot's request count, which costs no shared write; the
    /// flush is counted in `shootdowns_received`.
    pub(crate) fn discard_tables(&mut self, sh: &Shared) -> usize {
        let n = sh.tables.discard(self.id, &mut self.tables, &sh.domain);
        if n > 0 {
            self.seen = sh.shootdown.current_request(self.id).wrapping_sub(1);
        }
        n
    }

    /// A fresh anon identity from this core's block (a new block from `sh` when spent).
    #[inline]
    pub(crate) fn fresh_anon(&mut self, sh: &Shared) -> AnonId {
        if self.anon.is_empty() {
            self.anon = sh.anon_ids.block();
        }
        let id = self.anon.start;
        self.anon.start += 1;
        AnonId::decode(id).expect("identity blocks start at 1")
    }
}
