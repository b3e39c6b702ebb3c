//! Skiplist nodes: an interval, a value, a height and a tower of tagged links, in one allocation.
//!
//! Layout (`repr(C)`): `start, end, height, kind, value`, then `height` link words. The tower is
//! allocated inline after the header (crossbeam-skiplist does the same) so that a node of height
//! <= 4 with a `u64` value fits one cache line, which is what a traversal touches.
//!
//! Kinds: the `Head` sentinel (height `MAX_HEIGHT`, interval `[0, 0)`, no value), `Separator`
//! nodes (zero-length `[b, b)` at arena boundaries, no value; never reported by queries, visits or
//! `len`), and `Interval` nodes (a value). Separators sort before an interval starting at the same
//! address, so both `start` and `end` are non-decreasing along every level.
//!
//! This is the crate's one module that calls `alloc`/`dealloc` for skiplist nodes. A node is
//! freed either by the owner of the whole list (`Drop`) or, once unlinked, after an RCU grace
//! period (`retire.rs`), which may instead keep its memory in the reader slot's pool for the
//! slot's next allocations (`pool.rs`: [`Node::clear`] drops the value and links, `init` makes
//! a node in fresh and recycled memory alike).
//!
//! Not for: link protocols (see `link.rs` and the operations).

use super::pool::NodePool;
use crate::contract::MapError;
use crate::fault::AllocBudget;
use crate::sync::{AtomicUsize, Ordering};
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};

/// Highest tower (the head's).
pub(crate) const MAX_HEIGHT: usize = 20;

/// What a node is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum Kind {
    /// The head sentinel.
    Head,
    /// A zero-length arena separator.
    Separator,
    /// A mapped interval with a value.
    Interval,
}

/// A node header; `height` link words follow it in the same allocation.
#[repr(C)]
pub(crate) struct Node<V> {
    /// First address (page-aligned).
    pub start: u64,
    /// One past the last address (`== start` for the head and separators).
    pub end: u64,
    /// Number of links in the tower (1..=MAX_HEIGHT).
    pub height: u32,
    /// Head, separator or interval.
    pub kind: Kind,
    /// Initialised iff `kind == Interval`.
    value: MaybeUninit<V>,
    /// The tower (`height` entries follow).
    tower: [AtomicUsize; 0],
}

impl<V> Node<V> {
    fn layout(height: usize) -> Layout {
        Layout::new::<Self>()
            .extend(Layout::array::<AtomicUsize>(height).expect("tower layout"))
            .expect("node layout")
            .0
            .pad_to_align()
    }

    /// A fresh node (the caller owns the pointer); aborts if memory is exhausted. For nodes
    /// outside any map operation (the head, a new map's separators, loom models).
    pub(crate) fn alloc(
        start: u64,
        end: u64,
        height: usize,
        kind: Kind,
        value: Option<V>,
    ) -> *mut Self {
        Self::try_alloc(start, end, height, kind, value, None, None)
            .unwrap_or_else(|_| handle_alloc_error(Self::layout(height)))
    }

    /// The one fallible node allocation of the skiplist's operations: takes one unit of
    /// `budget` (the test hook, `fault.rs`) first, then a block of the height from `pool` (the
    /// operation's reader slot's, `pool.rs`) if it keeps one, else from the allocator; on
    /// failure (injected or real) drops `value` and returns `OutOfMemory`. The node is
    /// unpublished either way, and initialised the same way whatever its block's origin.
    pub(crate) fn try_alloc(
        start: u64,
        end: u64,
        height: usize,
        kind: Kind,
        value: Option<V>,
        budget: Option<&AllocBudget>,
        pool: Option<&mut NodePool<V>>,
    ) -> Result<*mut Self, MapError> {
        assert!((1..=MAX_HEIGHT).contains(&height), "height {height}");
        debug_assert_eq!(value.is_some(), kind == Kind::Interval);
        if let Some(b) = budget {
            b.take()?;
        }
        let block = match pool.and_then(|pool| pool.take(height)) {
            Some(block) => block,
            None => Self::alloc_block(height).ok_or(MapError::OutOfMemory)?,
        };
        // SAFETY: the block is ours (fresh, or given up by the pool) and of `height`'s layout.
        Ok(unsafe { Self::init(block, start, end, height, kind, value) })
    }

    /// Memory for a node of `height` from the allocator (`None` if exhausted).
    fn alloc_block(height: usize) -> Option<NonNull<u8>> {
        // SAFETY: the layout has a non-zero size (the header alone is non-empty).
        let p = NonNull::new(unsafe { alloc(Self::layout(height)) })?;
        #[cfg(all(test, not(loom)))]
        BLOCKS.with(|c| c.set(c.get() + 1));
        Some(p)
    }

    /// Gives a node's memory back to the allocator.
    ///
    /// # Safety
    /// `block` came from `alloc_block(height)` (directly, through a node, or through a pool),
    /// holds no live value or link (a node's were dropped by [`Node::clear`]), is unreachable
    /// by any thread, and is freed once.
    pub(crate) unsafe fn free_block(block: NonNull<u8>, height: usize) {
        #[cfg(all(test, not(loom)))]
        BLOCKS.with(|c| c.set(c.get() - 1));
        // SAFETY: the contract; the layout is the one the block was allocated with.
        unsafe { dealloc(block.as_ptr(), Self::layout(height)) };
    }

    /// Makes a node in `block`: every field, the value and every tower link (zero: no target,
    /// no tag) written before any read. The one initialisation of fresh and recycled blocks.
    ///
    /// # Safety
    /// `block` is owned by the caller, unreachable by any other thread, and has the layout of
    /// a node of `height`.
    unsafe fn init(
        block: NonNull<u8>,
        start: u64,
        end: u64,
        height: usize,
        kind: Kind,
        value: Option<V>,
    ) -> *mut Self {
        let p = block.as_ptr() as *mut Self;
        let value = match value {
            Some(v) => MaybeUninit::new(v),
            None => MaybeUninit::uninit(),
        };
        // SAFETY: `p` is a block of the layout of `height`, which holds the header and
        // `height` link words after `tower`; every field is written exactly once before any
        // read (a recycled block's old fields were dropped by `clear`, nothing is read back).
        unsafe {
            ptr::addr_of_mut!((*p).start).write(start);
            ptr::addr_of_mut!((*p).end).write(end);
            ptr::addr_of_mut!((*p).height).write(height as u32);
            ptr::addr_of_mut!((*p).kind).write(kind);
            ptr::addr_of_mut!((*p).value).write(value);
            let tower = ptr::addr_of_mut!((*p).tower) as *mut AtomicUsize;
            for i in 0..height {
                tower.add(i).write(AtomicUsize::new(0));
            }
        }
        p
    }

    /// Drops a node's value (if an interval) and links, and returns its memory and height:
    /// the block is the caller's to free ([`Node::free_block`]) or keep (`pool.rs`). If the
    /// value's drop (the caller's code) panics, the block is freed while unwinding.
    ///
    /// # Safety
    /// `p` came from [`Node::alloc`] or [`Node::try_alloc`], is cleared or freed once, and no
    /// thread can reach it any more.
    pub(crate) unsafe fn clear(p: *mut Self) -> (NonNull<u8>, usize) {
        /// Drops the links, and frees the memory if dropped while unwinding.
        struct Links<V>(*mut Node<V>);
        impl<V> Links<V> {
            /// Drops the links of the node; returns its block and height.
            fn drop_links(&self) -> (NonNull<u8>, usize) {
                let p = self.0;
                // SAFETY: `p` is owned exclusively (the enclosing function's contract), its
                // header and links are initialised, and the links are dropped once (by the
                // one call of this function, in `clear` or in the drop below).
                unsafe {
                    let height = (*p).height as usize;
                    let tower = ptr::addr_of_mut!((*p).tower) as *mut AtomicUsize;
                    for i in 0..height {
                        ptr::drop_in_place(tower.add(i));
                    }
                    (NonNull::new_unchecked(p as *mut u8), height)
                }
            }
        }
        impl<V> Drop for Links<V> {
            fn drop(&mut self) {
                let (block, height) = self.drop_links();
                // SAFETY: only reached while unwinding from the value's drop: the block is
                // ours (contract), its value dropped (or dropping) and links dropped now, and
                // nobody else will free it.
                unsafe { Node::<V>::free_block(block, height) };
            }
        }
        let links = Links(p);
        // SAFETY: the caller owns `p` exclusively; it was initialised by `init`, with a value
        // iff it is an interval node; the value is dropped once.
        unsafe {
            if (*p).kind == Kind::Interval {
                (*p).value.assume_init_drop();
            }
        }
        let links = std::mem::ManuallyDrop::new(links);
        links.drop_links()
    }

    /// Frees a node (drops its value and its links).
    ///
    /// # Safety
    /// `p` came from [`Node::alloc`] or [`Node::try_alloc`], is freed once, and no thread can reach it any more.
    pub(crate) unsafe fn dealloc(p: *mut Self) {
        // SAFETY: the contract; `clear` frees the block itself if the value's drop panics.
        let (block, height) = unsafe { Self::clear(p) };
        // SAFETY: cleared above, ours, freed once.
        unsafe { Self::free_block(block, height) };
    }

    /// Frees every node of `batch` (as [`Node::dealloc`]) and empties it; if a value's drop
    /// panics, the rest are still freed while unwinding (as a `Vec` drops its elements).
    ///
    /// # Safety
    /// As [`Node::dealloc`], for each node.
    pub(crate) unsafe fn dealloc_all(batch: &mut Vec<*mut Self>) {
        /// Frees the nodes from `next` on when dropped (only while unwinding, or empty).
        struct Rest<'a, V> {
            batch: &'a mut Vec<*mut Node<V>>,
            next: usize,
        }
        impl<V> Drop for Rest<'_, V> {
            fn drop(&mut self) {
                while self.next < self.batch.len() {
                    let p = self.batch[self.next];
                    self.next += 1;
                    // SAFETY: the enclosing function's contract; each node once.
                    unsafe { Node::dealloc(p) };
                }
                self.batch.clear();
            }
        }
        let mut rest = Rest { batch, next: 0 };
        while rest.next < rest.batch.len() {
            let p = rest.batch[rest.next];
            rest.next += 1;
            // SAFETY: the contract; each node once (`next` moved past it first).
            unsafe { Node::dealloc(p) };
        }
    }

    /// The link at level `i` (`i < height`).
    #[inline]
    pub(crate) fn next(&self, i: usize) -> &AtomicUsize {
        debug_assert!(
            i < self.height as usize,
            "level {i} >= height {}",
            self.height
        );
        // SAFETY: the allocation holds `height` initialised link words after `tower`, and
        // `i < height`; the reference lives no longer than `self`.
        unsafe { &*(ptr::addr_of!(self.tower) as *const AtomicUsize).add(i) }
    }

    /// The value of an interval node.
    #[inline]
    pub(crate) fn value(&self) -> &V {
        debug_assert_eq!(self.kind, Kind::Interval);
        // SAFETY: interval nodes are created with a value, which lives until `dealloc`.
        unsafe { self.value.assume_init_ref() }
    }

    /// Whether this is an interval (not the head or a separator).
    #[inline]
    pub(crate) fn is_interval(&self) -> bool {
        self.kind == Kind::Interval
    }

    /// Loads link `i` (Acquire: pairs with the Release store or CAS that published its target,
    /// so the target's fields are initialised when we read them).
    #[inline]
    pub(crate) fn load(&self, i: usize) -> usize {
        self.next(i).load(Ordering::Acquire)
    }
}

impl<V> Node<V> {
    /// Takes the value out of an unpublished interval node and frees the node.
    ///
    /// # Safety
    /// `p` came from [`Node::alloc`] with a value, was never published, and is not used again.
    pub(crate) unsafe fn into_value(p: *mut Self) -> V {
        // SAFETY: the caller owns `p`; the value is initialised and read exactly once, then the
        // node is freed without dropping it again.
        unsafe {
            debug_assert_eq!((*p).kind, Kind::Interval);
            let v = (*p).value.assume_init_read();
            let height = (*p).height as usize;
            let tower = ptr::addr_of_mut!((*p).tower) as *mut AtomicUsize;
            for i in 0..height {
                ptr::drop_in_place(tower.add(i));
            }
            Self::free_block(NonNull::new_unchecked(p as *mut u8), height);
            v
        }
    }
}

/// Node blocks this thread took from the allocator minus those it gave back (tests: a map
/// used on one thread frees every block it took, pools included, when dropped).
#[cfg(all(test, not(loom)))]
pub(crate) fn blocks() -> isize {
    BLOCKS.with(|c| c.get())
}

#[cfg(all(test, not(loom)))]
thread_local! {
    static BLOCKS: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}
