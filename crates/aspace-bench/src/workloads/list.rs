//! The five-element linked list of the thesis' RCU benchmarks (§6.1-6.3), in the three shapes the
//! `rcu-*` workloads need: a plain owned list (for `none`, `mutex`, `rwlock`), an RCU list whose
//! nodes are retired through an `aspace_rcu::Domain` (`memb`, `qsbr`), and a crossbeam-epoch list.
//!
//! The list is traversed whole, summing the node values; the list reference is passed through
//! `black_box` (so a traversal of an unchanging list is not hoisted out of the loop) and callers
//! `black_box` the sum (so it is not discarded). An update replaces the **first** element by a new node with
//! a new value, as in thesis §6.3: the new node copies the old head's `next`, is published with one
//! `Release` store of the head pointer, and the old head is retired (RCU grace period or epoch).
//! Nodes other than the head are never replaced, so a node's `next` is immutable after
//! publication; a reader that loaded the old head still walks a valid list.
//!
//! Invariants: the list always has at least one node; nodes reachable from `head` are alive; a
//! node unlinked by `replace_head` is freed only by the caller's deferred reclamation through the
//! list's domain, after every reader that could see it has left its read section. `RcuList::sum`
//! trusts only a guard of the list's own domain (checked, as the maps' `check_guard`: a guard of
//! another domain protects nothing, since this domain's grace periods do not wait for it). Updaters are serialised by an update lock
//! (the thesis used a spinlock; here `parking_lot::Mutex`).
//!
//! Not for: anything but benchmarking read-side and update-side costs of a tiny shared list.

use aspace_rcu::{Domain, Flavor, Guard, Memb, Qsbr, Reader};
use crossbeam_epoch as epoch;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::hint::black_box;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Elements per list (thesis §6.1).
pub const LIST_LEN: u64 = 5;

/// A node of the plain list.
#[derive(Debug)]
pub struct PlainNode {
    value: u64,
    next: Option<Box<PlainNode>>,
}

/// An owned list with no synchronisation of its own (the `none` design uses it read-only; the
/// lock designs wrap it in a lock).
#[derive(Debug)]
pub struct PlainList {
    head: Box<PlainNode>,
}

impl PlainList {
    /// A list holding `1..=LIST_LEN`.
    pub fn new() -> Self {
        let mut next = None;
        for value in (1..=LIST_LEN).rev() {
            next = Some(Box::new(PlainNode { value, next }));
        }
        PlainList {
            head: next.expect("LIST_LEN > 0"),
        }
    }

    /// Sum of all values (one traversal).
    #[inline]
    pub fn sum(&self) -> u64 {
        // Opaque to the optimiser: the list never changes in `rcu-read`, so without this the
        // traversal could be hoisted out of the benchmark loop.
        let this = black_box(self);
        let mut s = 0;
        let mut p = Some(&*this.head);
        while let Some(n) = p {
            s += n.value;
            p = n.next.as_deref();
        }
        s
    }

    /// Replaces the first node by a new one holding `value`; returns the old node so that the
    /// caller can drop it after releasing its lock.
    pub fn replace_head(&mut self, value: u64) -> Box<PlainNode> {
        let next = self.head.next.take();
        std::mem::replace(&mut self.head, Box::new(PlainNode { value, next }))
    }
}

impl Default for PlainList {
    fn default() -> Self {
        Self::new()
    }
}

/// A node of the RCU list; immutable after publication.
#[derive(Debug)]
pub struct RcuNode {
    value: u64,
    next: *const RcuNode,
}

// SAFETY: a node is immutable once published and owns nothing thread-bound; its raw `next` is
// only dereferenced under the list's protection rules, so moving the node (to the reclaimer
// thread, which only frees it) is sound.
unsafe impl Send for RcuNode {}

/// The list read under an `aspace_rcu` read section of its domain and updated by head
/// replacement.
#[derive(Debug)]
pub struct RcuList<F: Flavor> {
    /// On its own cache line: readers load it on every traversal, and the update lock (which
    /// the updater writes twice per update) must not invalidate it a second and third time.
    /// The domain handle shares the line (it never changes), so the guard check costs no
    /// extra miss.
    head: CachePadded<RcuHead<F>>,
    update: Mutex<()>,
}

/// The head pointer and the domain whose grace periods protect the nodes it reaches.
#[derive(Debug)]
struct RcuHead<F: Flavor> {
    ptr: AtomicPtr<RcuNode>,
    domain: Domain<F>,
}

impl<F: Flavor> RcuList<F> {
    /// A list holding `1..=LIST_LEN`, read under guards of `domain` (and whose unlinked nodes
    /// the caller retires through it).
    pub fn new(domain: &Domain<F>) -> Self {
        let mut next: *const RcuNode = std::ptr::null();
        for value in (1..=LIST_LEN).rev() {
            next = Box::into_raw(Box::new(RcuNode { value, next }));
        }
        RcuList {
            head: CachePadded::new(RcuHead {
                ptr: AtomicPtr::new(next as *mut RcuNode),
                domain: domain.clone(),
            }),
            update: Mutex::new(()),
        }
    }

    /// The domain the list's readers and reclamation use.
    pub fn domain(&self) -> &Domain<F> {
        &self.head.domain
    }

    /// Sum of all values, inside the read section proven by `guard`.
    ///
    /// # Panics
    /// If `guard` belongs to another domain than the list's: it would protect nothing here.
    #[inline]
    pub fn sum(&self, guard: &Guard<'_, F>) -> u64 {
        // See `PlainList::sum`.
        let this = black_box(self);
        if !guard.belongs_to(&this.head.domain) {
            foreign_guard();
        }
        // Acquire: pairs with the Release store in `replace_head`, so the new node's fields are
        // visible before we read them.
        let mut p = this.head.ptr.load(Ordering::Acquire) as *const RcuNode;
        let mut s = 0;
        while !p.is_null() {
            // SAFETY: `p` was reachable from `head` during this read section of the list's
            // domain (checked above; the guard lives across the whole loop); a node is freed
            // only after a grace period of that domain that begins after it was unlinked, so it
            // outlives this section. Nodes are immutable once published.
            let n = unsafe { &*p };
            s += n.value;
            p = n.next;
        }
        s
    }

    /// Replaces the first node by a new one holding `value` and returns the unlinked old head,
    /// which the caller must retire (`Domain::defer_free`) exactly once.
    pub fn replace_head(&self, value: u64) -> *mut RcuNode {
        let _serialised = self.update.lock();
        // Relaxed: only updaters store `head`, and they are serialised by `update`, whose
        // lock/unlock orders this load after the previous updater's store.
        let old = self.head.ptr.load(Ordering::Relaxed);
        // SAFETY: `old` is the current head; only updaters unlink nodes and we hold the update
        // lock, so it cannot be retired (let alone freed) while we read it.
        let next = unsafe { (*old).next };
        let new = Box::into_raw(Box::new(RcuNode { value, next }));
        // Release: publishes the new node's fields; pairs with the Acquire load in `sum`.
        self.head.ptr.store(new, Ordering::Release);
        old
    }
}

/// `RcuList::sum` was handed a guard of another domain (the maps' `check_guard` message).
#[cold]
#[inline(never)]
#[track_caller]
fn foreign_guard() -> ! {
    panic!(
        "aspace-bench: the guard passed to RcuList::sum belongs to another RCU domain than the \
         list's (register readers with list.domain())"
    );
}

impl<F: Flavor> Drop for RcuList<F> {
    fn drop(&mut self) {
        let mut p = *self.head.ptr.get_mut() as *const RcuNode;
        while !p.is_null() {
            // SAFETY: `&mut self` means no reader or updater is active; every node still
            // reachable from `head` was allocated by `Box::into_raw` here and was never retired
            // (retired nodes are unreachable), so each is freed exactly once.
            let node = unsafe { Box::from_raw(p as *mut RcuNode) };
            p = node.next;
        }
    }
}

/// How an RCU reader of a given flavor ends a stretch of read sections, and how it steps aside
/// while it blocks outside the measured loop.
/// (`&mut Reader`: the qsbr state changes cannot run while a guard borrows the reader.)
pub trait Quiesce: Flavor + Sized {
    /// `memb`: nothing (read sections end with their guard). `qsbr`: announce a quiescent state.
    fn quiesce(reader: &mut Reader<Self>);
    /// Before blocking outside any read section (e.g. in the harness' start barrier, after a
    /// setup that registered the reader): `qsbr` goes offline, so that grace periods do not
    /// wait for a thread that is asleep; `memb`: nothing (outside a section it never delays
    /// a grace period).
    fn park(reader: &mut Reader<Self>);
    /// After such a block, before the first read section: `qsbr` comes back online.
    fn unpark(reader: &mut Reader<Self>);
}

impl Quiesce for Memb {
    #[inline]
    fn quiesce(_reader: &mut Reader<Memb>) {}
    fn park(_reader: &mut Reader<Memb>) {}
    fn unpark(_reader: &mut Reader<Memb>) {}
}

impl Quiesce for Qsbr {
    #[inline]
    fn quiesce(reader: &mut Reader<Qsbr>) {
        reader.quiescent_state();
    }
    fn park(reader: &mut Reader<Qsbr>) {
        reader.offline();
    }
    fn unpark(reader: &mut Reader<Qsbr>) {
        reader.online();
    }
}

/// A node of the crossbeam-epoch list.
#[derive(Debug)]
pub struct EpochNode {
    value: u64,
    next: epoch::Atomic<EpochNode>,
}

/// The list read under a crossbeam-epoch pin and updated by head replacement.
#[derive(Debug)]
pub struct EpochList {
    /// On its own cache line, apart from the update lock (see `RcuList::head`).
    head: CachePadded<epoch::Atomic<EpochNode>>,
    update: Mutex<()>,
}

impl EpochList {
    /// A list holding `1..=LIST_LEN`.
    pub fn new() -> Self {
        let mut next = epoch::Atomic::null();
        for value in (1..=LIST_LEN).rev() {
            next = epoch::Atomic::new(EpochNode { value, next });
        }
        EpochList {
            head: CachePadded::new(next),
            update: Mutex::new(()),
        }
    }

    /// Sum of all values, under the pin `guard`.
    #[inline]
    pub fn sum(&self, guard: &epoch::Guard) -> u64 {
        // See `PlainList::sum`.
        let this = black_box(self);
        // Acquire: pairs with the Release store in `replace_head`.
        let mut p = this.head.load(Ordering::Acquire, guard);
        let mut s = 0;
        // SAFETY: nodes reachable while pinned are destroyed only through `defer_destroy`
        // after unlinking, i.e. after every guard pinned now has been dropped.
        while let Some(n) = unsafe { p.as_ref() } {
            s += n.value;
            // Acquire: `next` links were published with the node (Release on `head`); Acquire
            // keeps the load ordered after reading the node whatever path reached it.
            p = n.next.load(Ordering::Acquire, guard);
        }
        s
    }

    /// Replaces the first node by a new one holding `value` and retires the old one through
    /// `guard`.
    pub fn replace_head(&self, value: u64, guard: &epoch::Guard) {
        let _serialised = self.update.lock();
        // Relaxed: updaters are serialised by `update` (see `RcuList::replace_head`).
        let old = self.head.load(Ordering::Relaxed, guard);
        // SAFETY: `old` is the current head, never null, and cannot be retired while we hold the
        // update lock.
        let old_ref = unsafe { old.deref() };
        let next = old_ref.next.load(Ordering::Relaxed, guard);
        let new = epoch::Owned::new(EpochNode {
            value,
            next: epoch::Atomic::from(next),
        });
        // Release: publishes the new node; pairs with the Acquire loads in `sum`.
        self.head.store(new, Ordering::Release);
        // SAFETY: `old` is now unreachable from `head` and is retired exactly once (only the
        // updater that unlinked it, under the lock, gets here with it).
        unsafe { guard.defer_destroy(old) };
    }
}

impl Default for EpochList {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for EpochList {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no other thread uses the list, so the unprotected guard is
        // enough; each reachable node was allocated by `Atomic::new`/`Owned::new` and is freed
        // once (retired nodes are unreachable and owned by the epoch collector).
        unsafe {
            let guard = epoch::unprotected();
            let mut p = self.head.load(Ordering::Relaxed, guard);
            while !p.is_null() {
                let next = p.deref().next.load(Ordering::Relaxed, guard);
                drop(p.into_owned());
                p = next;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: u64 = LIST_LEN * (LIST_LEN + 1) / 2;

    #[test]
    fn plain_list_sums_and_replaces_its_head() {
        let mut l = PlainList::new();
        assert_eq!(l.sum(), FULL);
        let old = l.replace_head(100);
        assert_eq!(old.value, 1);
        assert_eq!(l.sum(), FULL - 1 + 100);
    }

    #[test]
    fn rcu_list_sums_replaces_its_head_and_the_old_head_is_reclaimed() {
        let domain = aspace_rcu::Domain::<Memb>::new();
        let reader = domain.register();
        let l = RcuList::new(&domain);
        assert_eq!(l.sum(&reader.read()), FULL);
        let old = l.replace_head(100);
        // SAFETY: `old` was just unlinked by `replace_head` and is retired once.
        unsafe { domain.defer_free(old) };
        domain.barrier();
        assert_eq!(domain.pending(), 0);
        assert_eq!(l.sum(&reader.read()), FULL - 1 + 100);
    }

    /// Regression (issue 17): `sum` trusted a guard of any domain, whose grace periods do not
    /// wait for it (nodes retired through the list's domain could be freed under it).
    #[test]
    #[should_panic(expected = "belongs to another RCU domain")]
    fn rcu_list_sum_rejects_a_guard_of_another_domain() {
        let domain = Domain::<Memb>::new();
        let other = Domain::<Memb>::new();
        let l = RcuList::new(&domain);
        let stranger = other.register();
        l.sum(&stranger.read());
    }

    #[test]
    fn rcu_list_sum_accepts_a_guard_of_a_clone_of_its_domain() {
        let domain = Domain::<Qsbr>::new();
        let l = RcuList::new(&domain);
        let reader = domain.clone().register();
        assert_eq!(l.sum(&reader.read()), FULL);
        assert!(Domain::ptr_eq(l.domain(), &domain));
    }

    #[test]
    fn epoch_list_sums_and_replaces_its_head() {
        let l = EpochList::new();
        let g = epoch::pin();
        assert_eq!(l.sum(&g), FULL);
        l.replace_head(100, &g);
        assert_eq!(l.sum(&g), FULL - 1 + 100);
    }
}
