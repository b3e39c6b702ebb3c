//! Per-arena allocation hints (SOSP'25 §5.3): versioned lower bounds of an arena's first free
//! page, and the first-fit search that starts from one.
//!
//! Each arena keeps a *lower bound of its first free address* (every page in
//! `[arena start, hint)` is covered), packed with a version in the low bits of the page-aligned
//! address. A successful first-fit alloc that searched from the hint moves it to the end of the
//! covered prefix it saw (`advance`: a CAS that fails if a free intervened: versions differ); a
//! swap that may free space moves it back to the start of the swapped range (`retreat`: `min`,
//! version + 1). Alloc starts its search at the hint ([`HintedSearch`]), which keeps the
//! contract's "lowest gap" exact sequentially and makes contiguous allocation O(log n) instead of
//! a walk over the arena.
//!
//! Why the version: an alloc reads the hint `h`, walks past a covered page `p >= h`, and claims a
//! gap above it; a concurrent free of `p` moves the hint back to `min(h, p) = h`, the same
//! address. Without the version bump the alloc's advance CAS would succeed and leave the hint
//! above the free page `p`, which first fit would then skip (loom model
//! `a_free_behind_an_alloc_keeps_the_hint_below_it` in `loom_tests.rs`).
//!
//! Version wrap: the version has 12 bits (the page offset; the key space is the whole 64-bit
//! range, so no wider field fits one atomic word). An alloc that stalls between reading the hint
//! and advancing it while exactly a multiple of 4096 frees hit its arena (and the address returns
//! to the one it read) passes the version CAS and may move the hint over a gap freed meanwhile.
//! That is made harmless rather than impossible: a hint is only a search start, and a search
//! from the hint that finds the arena full is repeated from the arena start before the arena is
//! declared full ([`HintedSearch::run`]), so such a gap is still found. Until then first fit
//! may return a higher gap than the lowest (the arena's later frees move the hint back below
//! it). Regression: `a_wrapped_hint_version_cannot_hide_a_free_gap` (tests use 2 version bits).
//!
//! Ordering: the version says *whether* a free came between a search's read and its advance;
//! the search must also *see* every free its read counts. `retreat` comes after the free's
//! commit and is Release, `read` is Acquire (advances are RMWs and carry the release sequence),
//! so a walk that starts from a retreated hint sees the freed range free (loom model
//! `an_alloc_that_reads_a_retreated_hint_sees_the_free`; with Relaxed, it walked the old list
//! and claimed above the free page with one CAS the free had not touched).
//!
//! # The padded hint
//! A padded alloc (`pad > 0`, `SkipListMap::alloc_in_arena_padded`) claims
//! `[g + pad, g + pad + len)` in the first gap `[g, ge)` with `ge - g >= len + 2 * pad`, and
//! leaves the pad pages free. The free hint cannot move past them (they are free pages, which
//! unpadded first fit must find), so padded searches would walk every pad gap of the arena from
//! its first free page: O(n) per alloc. Each arena therefore keeps a second hint
//! ([`ArenaHints::padded`]) with a weaker invariant, the same version and the same `advance` /
//! `retreat`:
//!
//! > every gap of the arena (clipped to its bounds) that *ends* at or below the padded hint is
//! > shorter than [`PADDED_GAP_MIN`](super::alloc::PADDED_GAP_MIN) (three pages: `len + 2 * pad` for the smallest `len` and
//! > `pad`, so no padded claim fits in such a gap).
//!
//! A padded search starts at the predecessor of the hint and evaluates the gap there with its
//! real start (not clipped at the hint), so it skips only gaps that end below the hint, and is
//! exact first fit sequentially. On success it advances the hint to the start of the first gap
//! of `>= PADDED_GAP_MIN` it saw before its claim; if there was none, to `g` when `pad >=
//! PADDED_GAP_MIN` (the pad gap in front of the claim is itself such a gap) and else to the end
//! of its claim (the pad gap in front is shorter, and lies below). Claims and mappings only
//! shrink or split gaps. Only frees make a gap longer, and a free of `[s, e)` only lengthens
//! gaps that contain a page of it, which end above `s`; it moves both hints back to `s` with a
//! version bump. So the argument for the free hint carries over word for word: an advance that
//! raced a free fails its version CAS, a wrapped version is caught by the search from the arena
//! start, and the ordering is the same. Searches with a larger `len + 2 * pad` than three pages
//! still walk the shorter-than-needed gaps of three pages or more; an arena of regions padded
//! by one page (gaps of one or two pages) is searched in O(log n). Unpadded allocs use the free
//! hint only and padded ones the padded hint only; each kind shrinks the other's gaps, which
//! keeps both invariants.
//!
//! The threshold of each hint is [`hint_gap_min`](super::alloc::hint_gap_min): a search advances its hint to the first gap
//! of at least that many bytes it saw (one byte for the free hint: any free page).
//!
//! Not for: arena layout and separators (`arena.rs`), the claim itself (`alloc.rs`).

use super::alloc::AllocOutcome;
use super::arena::ArenaLayout;
use super::node::Node;
use super::raw::RawSkipList;
use crate::contract::Interval;
#[cfg(not(test))]
use crate::contract::PAGE_SIZE;
use crate::sync::{AtomicU64, Ordering};

/// The version bits of a hint word (the page offset bits of its address). Tests shrink it to 2
/// bits so that a wrap can be forced in a few operations.
#[cfg(not(test))]
pub(crate) const VERSION_MASK: u64 = PAGE_SIZE - 1;
#[cfg(test)]
pub(crate) const VERSION_MASK: u64 = 3;

/// An arena's two hints (written by the same allocating threads, so one cache line).
pub(crate) struct ArenaHints {
    /// Lower bound of the arena's first free page: unpadded searches start here.
    pub(crate) free: Hint,
    /// No gap of `>= PADDED_GAP_MIN` ends at or below it: padded searches start here.
    pub(crate) padded: Hint,
}

impl ArenaHints {
    pub(crate) fn new(start: u64) -> Self {
        Self {
            free: Hint::new(start),
            padded: Hint::new(start),
        }
    }

    /// The hint a search with this `pad` starts from.
    pub(crate) fn for_pad(&self, pad: u64) -> &Hint {
        if pad == 0 {
            &self.free
        } else {
            &self.padded
        }
    }

    /// After a free at `to`: moves both hints back (see [`Hint::retreat`]).
    pub(crate) fn retreat(&self, to: u64) {
        self.free.retreat(to);
        self.padded.retreat(to);
    }
}

/// One hint: `address | version`.
pub(crate) struct Hint(AtomicU64);

impl Hint {
    pub(crate) fn new(start: u64) -> Self {
        Self(AtomicU64::new(start))
    }

    /// The packed word and the address in it.
    pub(crate) fn read(&self) -> (u64, u64) {
        // Acquire: pairs with the Release of `retreat` (whose release sequence the advances,
        // being RMWs, continue): a search that starts from a hint some free moved back walks a
        // list in which that free is done (its commit precedes its retreat). Relaxed would let
        // the walk see the freed range still covered while the version it read already counts
        // the free, so its advance would succeed and jump over the freed pages (loom model
        // `an_alloc_that_reads_a_retreated_hint_sees_the_free`).
        let w = self.0.load(Ordering::Acquire);
        (w, w & !VERSION_MASK)
    }

    /// Moves the hint forward to `to` if it is still `seen` (no free in between).
    pub(crate) fn advance(&self, seen: u64, to: u64) {
        let new = to | (seen & VERSION_MASK);
        // Relaxed: the version CAS is the argument (a free since `seen` bumped it); the walk
        // that computed `to` is already ordered after the frees `seen` counts (`read`). Being an
        // RMW, it keeps the last retreat's release sequence going for later readers.
        let _ = self
            .0
            .compare_exchange(seen, new, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Moves the hint back to at most `to` and bumps the version. Called after the free's
    /// commit.
    pub(crate) fn retreat(&self, to: u64) {
        // Release: publishes the free (the swap's commit, before this) to searches that read
        // this word or a later advance of it; pairs with the Acquire in `read`.
        let _ = self
            .0
            .fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
                let addr = (w & !VERSION_MASK).min(to);
                Some(addr | ((w + 1) & VERSION_MASK))
            });
    }
}

/// After a swap of `[s, e)` that may have freed space: moves back the hint of every arena that
/// overlaps it to the start of its part of the range.
/// `hints` are the arenas' hints in arena order.
pub(crate) fn retreat_overlapping<'h>(
    layout: &ArenaLayout,
    hints: impl IntoIterator<Item = &'h ArenaHints>,
    s: u64,
    e: u64,
) {
    for (k, hint) in hints.into_iter().enumerate() {
        let a = layout.arena(k);
        if a.start < e && s < a.end {
            hint.retreat(s.max(a.start));
        }
    }
}

/// What a [`HintedSearch`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hinted {
    /// The node was inserted at this address (and the hint advanced if it was searched from).
    Inserted(u64),
    /// No gap of `len` in the whole range (searched from its start).
    NoSpace,
    /// The first fit starts here but covers a separator (see `alloc.rs`).
    Straddle(u64),
}

/// One alloc's first-fit search of `within`, from its arena's hint if it has one.
pub(crate) struct HintedSearch<'h> {
    hint: Option<&'h Hint>,
    /// Cleared when a search from the hint found no room: the retry starts at the range start,
    /// so a hint left too high (a wrapped version, see the module doc) hides no gap.
    use_hint: bool,
}

impl<'h> HintedSearch<'h> {
    pub(crate) fn new(hint: Option<&'h Hint>) -> Self {
        Self {
            hint,
            use_hint: true,
        }
    }

    /// Claims the first gap of `len + 2 * pad` bytes in `within` for `node` (at `pad` bytes into
    /// it), searching from the hint (if any, and if it lies in `within`) and again from
    /// `within.start` if that found no room. The hint must be the one for `pad`
    /// ([`ArenaHints::for_pad`]) and `len + 2 * pad` must not overflow.
    /// On anything but `Inserted` the node is still the caller's; after a `Straddle` the caller
    /// may call `run` again (the search keeps its state).
    ///
    /// # Safety
    /// As `RawSkipList::alloc_insert`.
    pub(crate) unsafe fn run<V>(
        &mut self,
        raw: &RawSkipList<V>,
        within: Interval,
        len: u64,
        pad: u64,
        node: *mut Node<V>,
    ) -> Hinted {
        loop {
            let (seen, from) = match self.hint {
                Some(h) if self.use_hint => {
                    let (w, a) = h.read();
                    if within.start <= a {
                        (Some(w), a.min(within.end))
                    } else {
                        (None, within.start)
                    }
                }
                _ => (None, within.start),
            };
            // SAFETY: forwarded.
            match unsafe { raw.alloc_insert(from, within.start, within.end, len, pad, node) } {
                AllocOutcome::Inserted { start, hint_to } => {
                    if let (Some(h), Some(w)) = (self.hint, seen) {
                        h.advance(w, hint_to);
                    }
                    return Hinted::Inserted(start);
                }
                AllocOutcome::NoSpace if from > within.start => {
                    self.use_hint = false;
                }
                AllocOutcome::NoSpace => return Hinted::NoSpace,
                AllocOutcome::Straddle(g) => return Hinted::Straddle(g),
            }
        }
    }
}
