//! A bucket head array: a 64-aligned header (order, whether it is a shrink target, `next`)
//! followed in the same allocation by its `2^order` heads. `next` points to the array a resize
//! in progress moves it to, and stays set until the array is freed (a grace period after the
//! table switched), so a reader that loaded this array and finds a moved head can always follow
//! it.
//!
//! The table publishes its current array as one word, the array's address with its order in
//! the six low bits the alignment leaves free ([`TableRef::from_word`]): a lookup computes the
//! address of its head from that word alone, one dependent load fewer than a header holding the
//! order and a pointer to a separate heads array (the lookup path was a chain of loads: the
//! table's word, the header, the head, the nodes). The order of an array never changes, so the
//! word and the header always agree.
//!
//! This file holds the crate's one raw allocation of the CHT (`alloc`/`free`); the nodes are
//! boxes.

use super::link::INVALID;
use super::node::bucket;
use crate::sync::{AtomicPtr, AtomicUsize};
use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// The header of a head array; the heads follow it (see the module doc).
#[repr(C, align(64))]
pub(crate) struct Table {
    /// log2 of the number of heads.
    pub(crate) order: u32,
    /// Whether this array is the target of a shrink (a head's `JOIN_FOLLOWS` then means "the
    /// join of the odd half is pending", not "the successor is a join node").
    pub(crate) shrink_target: bool,
    pub(crate) next: AtomicPtr<Table>,
}

/// The low bits of a table word that hold the order (arrays are 64-aligned; orders are at most
/// 30).
const ORDER_MASK: usize = 63;

/// Where the heads start: right after the header (its size is a multiple of its alignment,
/// 64, which is a multiple of a head's alignment; `layout` checks it).
const HEADS: usize = std::mem::size_of::<Table>();

impl Table {
    /// The allocation of an array of `2^order` heads, and the offset of the heads in it.
    fn layout(order: u32) -> Layout {
        let heads = Layout::array::<AtomicUsize>(1usize << order).expect("order is at most 30");
        let (layout, offset) = Layout::new::<Table>()
            .extend(heads)
            .expect("order is at most 30");
        assert_eq!(offset, HEADS, "the heads follow the header directly");
        layout
    }

    /// A new array of `2^order` heads, empty (`valid`) or not yet initialised (`INVALID`).
    /// Freed with [`Table::free`].
    pub(crate) fn alloc(order: u32, valid: bool, shrink_target: bool) -> NonNull<Table> {
        debug_assert!(order <= 30);
        let layout = Self::layout(order);
        // SAFETY: the layout is not zero-sized (it holds the header).
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(p) = NonNull::new(raw.cast::<Table>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        let init = if valid { 0 } else { INVALID };
        // SAFETY: `p` is a fresh allocation of `layout`: the header at its start, then room
        // for `2^order` heads at `HEADS` (checked by `layout`), each written once here before
        // the array is shared.
        unsafe {
            p.as_ptr().write(Table {
                order,
                shrink_target,
                next: AtomicPtr::new(std::ptr::null_mut()),
            });
            let heads = raw.add(HEADS).cast::<AtomicUsize>();
            for i in 0..1usize << order {
                heads.add(i).write(AtomicUsize::new(init));
            }
        }
        p
    }

    /// Frees an array made by [`Table::alloc`].
    ///
    /// # Safety
    /// `p` came from `alloc`, is not freed yet, and no reference into it is used after this.
    pub(crate) unsafe fn free(p: NonNull<Table>) {
        // SAFETY: by the caller's contract the array is alive and ours.
        unsafe {
            let order = p.as_ref().order;
            let raw = p.as_ptr().cast::<u8>();
            let heads = raw.add(HEADS).cast::<AtomicUsize>();
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(heads, 1usize << order));
            std::ptr::drop_in_place(p.as_ptr());
            std::alloc::dealloc(raw, Self::layout(order));
        }
    }
}

/// A head array borrowed for `'g` (a read section, or the resizer's ownership): the header
/// through `Deref`, the heads through [`TableRef::heads`]. Made from the raw pointer of the
/// allocation, never from a `&Table`, so that the heads behind the header are in its reach.
#[derive(Clone, Copy)]
pub(crate) struct TableRef<'g> {
    ptr: NonNull<Table>,
    order: u32,
    _array: PhantomData<&'g Table>,
}

impl<'g> TableRef<'g> {
    /// The word that publishes `p`: its address with its order in the low bits.
    pub(crate) fn word_of(p: NonNull<Table>, order: u32) -> usize {
        let a = p.as_ptr() as usize;
        debug_assert_eq!(a & ORDER_MASK, 0, "arrays are 64-aligned");
        a | order as usize
    }

    /// The array a word made by [`TableRef::word_of`] publishes.
    ///
    /// # Safety
    /// `w` is such a word, of an array that stays allocated for `'g`.
    #[inline]
    pub(crate) unsafe fn from_word(w: usize) -> Self {
        TableRef {
            // SAFETY: the address of an allocation (not null), by the caller's contract.
            ptr: unsafe { NonNull::new_unchecked((w & !ORDER_MASK) as *mut Table) },
            order: (w & ORDER_MASK) as u32,
            _array: PhantomData,
        }
    }

    /// The array `p` (from [`Table::alloc`]) points to.
    ///
    /// # Safety
    /// `p` is not null and stays allocated for `'g`.
    #[inline]
    pub(crate) unsafe fn from_ptr(p: *mut Table) -> Self {
        // SAFETY: by the caller's contract.
        let ptr = unsafe { NonNull::new_unchecked(p) };
        TableRef {
            ptr,
            // SAFETY: as above; the header is initialised by `alloc` and never changes order.
            order: unsafe { ptr.as_ref().order },
            _array: PhantomData,
        }
    }

    /// The allocation (for `free` and for comparing arrays).
    pub(crate) fn non_null(self) -> NonNull<Table> {
        self.ptr
    }

    /// The heads.
    #[inline]
    pub(crate) fn heads(self) -> &'g [AtomicUsize] {
        // SAFETY: `alloc` wrote `2^order` heads at `HEADS`; the array lives for `'g`; the
        // pointer is the allocation's own (see the type's doc), so it reaches them.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr
                    .as_ptr()
                    .cast::<u8>()
                    .add(HEADS)
                    .cast::<AtomicUsize>(),
                1usize << self.order,
            )
        }
    }

    /// The head of the bucket of `hash` (its top `order` bits), computed from the table's word
    /// alone (no load of the header).
    #[inline]
    pub(crate) fn head_of(self, hash: u64) -> &'g AtomicUsize {
        let i = bucket(hash, self.order);
        debug_assert!(i < 1usize << self.order);
        // SAFETY: `bucket` keeps the top `order` bits of a 64-bit hash, so `i < 2^order`, the
        // number of heads `alloc` wrote at `HEADS`; the array lives for `'g`. No bounds check
        // on the lookup path.
        unsafe {
            &*self
                .ptr
                .as_ptr()
                .cast::<u8>()
                .add(HEADS)
                .cast::<AtomicUsize>()
                .add(i)
        }
    }

    /// The number of heads.
    pub(crate) fn len(self) -> usize {
        1usize << self.order
    }
}

impl<'g> std::ops::Deref for TableRef<'g> {
    type Target = Table;
    #[inline]
    fn deref(&self) -> &Table {
        // SAFETY: the header is initialised by `alloc` and lives for `'g`.
        unsafe { self.ptr.as_ref() }
    }
}
