//! The access window ([`AccessWindow`]): the span in which a core may translate addresses and
//! touch frames, as a guard that begins the window when opened and ends it when dropped.
//!
//! Inside a window the core translates through its soft TLB, else a lock-free page-table walk
//! under its RCU read guard, and copies bytes from or to the frames it found (`frame_io.rs`).
//! What makes those translations safe to use is the shootdown protocol (`shootdown.rs`): a
//! shooter that removed a translation waits until every core that was inside a window when it
//! requested the flush has left it, and a core opening a window afterwards flushes its TLB
//! first. Hence the rule this type enforces: **a core never blocks inside a window** (a shooter
//! holding a design's write lock may be waiting for it). The window borrows the core mutably,
//! so the design's operations (which take locks and need `&mut Core`) cannot be called while
//! one is open: that is a compile error, not a precondition. The fault handler runs after the
//! window is dropped.
//!
//! Not for: the retry loop around faults (`handle.rs`) or what a fault does (`designs/`).

use crate::core_state::Core;
use crate::shared::Shared;
use crate::types::Access;

/// An open access window of one core (module doc). Dropping it ends the window.
pub(crate) struct AccessWindow<'a> {
    sh: &'a Shared,
    core: &'a mut Core,
    flushed: bool,
}

impl<'a> AccessWindow<'a> {
    /// Begins an access window: flushes the core's TLB if a shootdown was requested since its
    /// last window.
    #[inline]
    pub(crate) fn open(sh: &'a Shared, core: &'a mut Core) -> AccessWindow<'a> {
        let flushed = sh
            .shootdown
            .begin_access(core.id, &mut core.seen, &mut core.tlb);
        AccessWindow { sh, core, flushed }
    }

    /// Whether opening this window flushed the TLB: translations gathered in earlier windows
    /// may be stale and must be gathered again.
    #[inline]
    pub(crate) fn flushed(&self) -> bool {
        self.flushed
    }

    /// The address of the frame behind `va` if a present translation allows `access` (TLB,
    /// else a page-table walk whose result is cached in the TLB); `None` means a fault.
    #[inline(always)]
    pub(crate) fn translate(&mut self, va: u64, access: Access) -> Option<usize> {
        match self.core.tlb.lookup(va, access) {
            Some(p) => Some(p as usize),
            None => self.walk(va, access),
        }
    }

    /// The page-table walk of [`AccessWindow::translate`] ([`walk`]).
    #[inline]
    fn walk(&mut self, va: u64, access: Access) -> Option<usize> {
        walk(self.sh, self.core, va, access)
    }
}

/// The page-table walk of an access: of the tree this core walks (the shared one, or its own:
/// `page_table/organisation.rs`), under the core's RCU read guard; a present entry that allows
/// `access` is cached in the TLB and its frame's address returned, else `None` (a fault).
/// Under targeted shootdown of the shared tree it records this core in the leaf before reading
/// the entry it caches (`page_table/users.rs`).
///
/// The core must be inside an access window (an [`AccessWindow`] or a session's,
/// `session.rs`): the TLB invariant (`tlb.rs`) is that entries are inserted only there.
#[inline]
pub(crate) fn walk(sh: &Shared, core: &mut Core, va: u64, access: Access) -> Option<usize> {
    let pte = {
        let _guard = core.reader.read();
        sh.tables.walk(core.id, va, core.user)?
    };
    if !pte.prot().allows(access) {
        return None;
    }
    let frame = sh.pool().ptr(pte.frame());
    core.tlb.insert(va, frame, pte.prot());
    Some(frame as usize)
}

impl Drop for AccessWindow<'_> {
    #[inline]
    fn drop(&mut self) {
        self.sh.shootdown.end_access(self.core.id);
    }
}
