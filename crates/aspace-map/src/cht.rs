//! CHT: the RCU resizable concurrent hash table of Hraška's thesis (§5.1.2).
//!
//! Separate chaining with one Michael lock-free list per bucket, each sorted by the item's
//! mixed hash (memoized in the node). Lookups walk a list under an RCU read guard: no lock, no
//! atomic read-modify-write, no fence per node (RCU replaces Michael's hazard pointers: a node
//! is freed through the domain a grace period after its unlink, which also rules out ABA).
//! Insert and remove are lock-free: an insert links its node with one CAS on its predecessor's
//! link, a remove marks the node's own link DELETED (its linearization point) and then unlinks
//! it with a CAS on the predecessor's link; a walk unlinks the deleted nodes it passes.
//!
//! The bucket of an item is the top `order` bits of its mixed hash, so when the array doubles,
//! bucket i splits into 2i and 2i+1 and, the list being sorted by hash, the items of 2i come
//! first: there is one split point. The resize (`cht/resize.rs`) moves every head to the new
//! array with Click's protocol (a frozen head, CONST, is helped along by any updater that finds
//! it), then splits each list at its split point with the link marks (JOIN_FOLLOWS on the link
//! before the first upper-half node F, JOIN on F, which then belongs to two lists and may be
//! marked deleted but not unlinked), cuts the split links a grace period later and clears the
//! JOIN marks after another. A shrink moves the even heads with a pending-join mark and links
//! each odd list behind its even partner's. A background thread runs resizes (triggered when
//! the load leaves `[max_load / 4, max_load]` items per bucket); an updater that meets a bucket
//! mid-move, unsplit or unjoined completes that step itself (steps never wait on each other),
//! so updates stay lock-free during a resize. The marks are listed in `cht/link.rs`.
//!
//! Correctness in brief (each step's argument is next to its code in `cht/raw.rs`):
//! - A CAS that expects an unmarked word fails once a mark is set, so an updater that does not
//!   know about a resize cannot insert at a frozen head, between a split link and F, or unlink
//!   F; it restarts, finds the frozen head and moves to the new array.
//! - A reader that finds a frozen or moved head follows the old array's `next` to the new one;
//!   if the new head is not valid yet it walks the list that still holds its items (the frozen
//!   head, or the lower half's list that F still hangs off). That list stays whole until the
//!   cut, which waits a grace period for such readers; the cut and the JOIN clear are a grace
//!   period apart, so F is unlinked (and freed a grace period later) only once no list but its
//!   own reaches it.
//! - Inserts into a bucket go after the last item with an equal or smaller hash, so equal keys
//!   sit in one run and `insert_unique` checks the run and links at its end with one CAS: two
//!   racing unique inserts of one key CAS the same link and the loser sees the winner.
//!
//! Where the thesis leaves a gap, closed here: (1) marks use three bits (nodes are 8-aligned)
//! instead of six values in two bits; (2) lists end in null, not a global sentinel; (3) an
//! insert whose predecessor is a deleted join node (pinned until the JOIN mark is cleared, two
//! grace periods at most) leaves its read section and retries (`Again::Blocked`): the one
//! place where an update waits for the resizer; (4) the shrink marks the joined odd list's
//! first node JOIN (not the even list's last link) because that node is reachable from the
//! frozen odd head and the joined list until the clear; (5) the resizer is a thread spawned
//! per burst of resizes (there are no work queues here); (6) a split whose upper half is empty
//! still marks its split point: the end of the lower list (a null link) gets JOIN_FOLLOWS
//! before the upper head becomes an empty list, so that an updater still on the old array,
//! whose CAS expects that link null, cannot append an upper-half item to the lower list only
//! (where no lookup or update of its bucket would find it); the cut clears the mark.
//!
//! The lookup path is a chain of dependent loads, so it is kept short: the user hash is mixed
//! with one multiply (`node::mix`), the current array is one word holding its address and
//! order (`cht/table.rs`: the head's address needs no load of a header), and the walk compares
//! the memoized hash before the key. What remains is the walk itself: at the thesis' load of 4
//! items per bucket a lookup visits about three nodes, one dependent load each.
//!
//! API: [`Cht::insert`] allows equal keys (a multimap, as the thesis' table), and
//! [`Cht::insert_unique`] refuses a key present; [`Cht::get`] returns one item with the key,
//! [`Cht::for_each_equal`] all of them; [`Cht::remove`] removes one. Not for: ordered
//! iteration or range queries (use the skiplist), values that need updating in place.

#![allow(clippy::type_complexity)]

mod link;
mod node;
mod raw;
mod resize;
mod table;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

use crate::skiplist::readers::{ReaderPool, SlotLocal};
use crate::sync::stat::AtomicIsize;
use crate::validate::check_guard;
use aspace_rcu::{Domain, Guard};
use node::{mix, Node};
use raw::{Direction, NotInserted, RawCht};
use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Tuning of a [`Cht`].
#[derive(Clone, Copy, Debug)]
pub struct ChtConfig {
    /// log2 of the initial number of buckets (thesis §6.4: 7, 128 buckets).
    pub initial_order: u32,
    /// The table never shrinks below `2^min_order` buckets.
    pub min_order: u32,
    /// The table never grows beyond `2^max_order` buckets.
    pub max_order: u32,
    /// Grow when items exceed `max_load` per bucket; shrink below `max_load / 4`.
    pub max_load: usize,
    /// Whether updates start background resizes (off: only [`Cht::grow`]/[`Cht::shrink`]).
    pub auto_resize: bool,
}

impl Default for ChtConfig {
    fn default() -> Self {
        ChtConfig {
            initial_order: 7,
            min_order: 4,
            max_order: 30,
            max_load: 4,
            auto_resize: true,
        }
    }
}

/// The per-slot item count delta (folded into the shared count every `FOLD` changes).
#[derive(Default)]
struct Local {
    delta: isize,
}

impl SlotLocal for Local {
    fn release(&mut self, _domain: &Domain) {}
}

/// How far a slot's count may drift before it is folded into the shared count.
const FOLD: isize = 32;

struct Shared<K, V, S> {
    raw: RawCht<K, V>,
    hasher: S,
    pool: ReaderPool<Local>,
    count: AtomicIsize,
    /// Set while a resizer runs; its own `Arc` so that the background resizer clears it after
    /// dropping its handle of the table (then `wait_for_resize` means no thread holds one).
    resizing: Arc<AtomicBool>,
    config: ChtConfig,
}

/// The thesis' resizable concurrent hash table (see the module doc).
pub struct Cht<K, V, S = RandomState> {
    shared: Arc<Shared<K, V, S>>,
}

impl<K, V> Cht<K, V, RandomState>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    /// An empty table with 128 buckets whose nodes are freed through `domain`.
    pub fn new(domain: Domain) -> Self {
        Self::with_config(domain, ChtConfig::default(), RandomState::new())
    }
}

impl<K, V, S> Cht<K, V, S>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    /// An empty table with the given tuning and hasher. Orders are clamped to `[0, 30]`.
    pub fn with_config(domain: Domain, mut config: ChtConfig, hasher: S) -> Self {
        config.max_order = config.max_order.min(30);
        config.min_order = config.min_order.min(config.max_order);
        config.initial_order = config
            .initial_order
            .clamp(config.min_order, config.max_order);
        config.max_load = config.max_load.max(1);
        Cht {
            shared: Arc::new(Shared {
                raw: RawCht::new(domain.clone(), config.initial_order),
                hasher,
                pool: ReaderPool::new(domain),
                count: AtomicIsize::new(0),
                resizing: Arc::new(AtomicBool::new(false)),
                config,
            }),
        }
    }

    /// The RCU domain whose guards [`Cht::get`] takes.
    pub fn domain(&self) -> &Domain {
        self.shared.raw.domain()
    }

    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        mix(self.shared.hasher.hash_one(key))
    }

    /// One live value with a key equal to `key`, valid for the guard's lifetime.
    ///
    /// # Panics
    /// If `guard` is not a read section of this table's domain.
    #[inline]
    pub fn get<'g, Q>(&self, key: &Q, guard: &'g Guard<'_>) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        check_guard(self.domain(), guard);
        let h = self.hash(key);
        self.shared
            .raw
            .get(h, |k| k.borrow() == key, guard)
            .map(|n| &n.value)
    }

    /// Whether a live item with a key equal to `key` is present.
    pub fn contains_key<Q>(&self, key: &Q, guard: &Guard<'_>) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key, guard).is_some()
    }

    /// Calls `f` on every live item with a key equal to `key` (the table allows equal keys).
    ///
    /// # Panics
    /// If `guard` is not a read section of this table's domain.
    pub fn for_each_equal<'g, Q>(
        &self,
        key: &Q,
        guard: &'g Guard<'_>,
        mut f: impl FnMut(&'g K, &'g V),
    ) where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        check_guard(self.domain(), guard);
        let h = self.hash(key);
        self.shared
            .raw
            .get_all(h, |k| k.borrow() == key, guard, |n| f(&n.key, &n.value));
    }

    /// Inserts an item; an equal key already present stays (both are then found).
    pub fn insert(&self, key: K, value: V) {
        let node = Node::new(self.hash(&key), key, value);
        let r = self.insert_node(node, false);
        debug_assert!(r.is_ok());
    }

    /// Inserts an item unless a live item with an equal key is present; then returns it back.
    ///
    /// # Errors
    /// `(key, value)` when the key is present.
    pub fn insert_unique(&self, key: K, value: V) -> Result<(), (K, V)> {
        let node = Node::new(self.hash(&key), key, value);
        self.insert_node(node, true).map_err(|n| (n.key, n.value))
    }

    fn insert_node(&self, mut node: Box<Node<K, V>>, unique: bool) -> Result<(), Box<Node<K, V>>> {
        loop {
            let r = self.shared.pool.with(|g, _, local| {
                let r = self.shared.raw.insert(node, unique, |a, b| a == b, g);
                if r.is_ok() {
                    local.delta += 1;
                    if local.delta >= FOLD {
                        self.fold(local);
                    }
                }
                r
            });
            match r {
                Ok(()) => return Ok(()),
                Err(NotInserted::Exists(n)) => return Err(n),
                Err(NotInserted::Blocked(n)) => {
                    // Outside the read section, so the resizer's grace period can end.
                    node = n;
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Removes one live item with a key equal to `key`; returns whether there was one. Its
    /// key and value are dropped a grace period later, on the domain's reclaimer thread.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let h = self.hash(key);
        self.shared.pool.with(|g, _, local| {
            let removed = self.shared.raw.remove(h, |k| k.borrow() == key, g);
            if removed {
                local.delta -= 1;
                if local.delta <= -FOLD {
                    self.fold(local);
                }
            }
            removed
        })
    }

    /// Folds a slot's delta into the shared count and starts a resize if the load left its
    /// band.
    fn fold(&self, local: &mut Local) {
        let n = self.shared.count.fetch_add(local.delta, Ordering::Relaxed) + local.delta;
        local.delta = 0;
        if self.shared.config.auto_resize {
            self.maybe_resize(n.max(0) as usize);
        }
    }

    fn wanted(&self, n: usize, order: u32) -> Option<Direction> {
        let c = &self.shared.config;
        let buckets = 1usize << order;
        if n > buckets.saturating_mul(c.max_load) && order < c.max_order {
            Some(Direction::Grow)
        } else if n < buckets.saturating_mul(c.max_load) / 4 && order > c.min_order {
            Some(Direction::Shrink)
        } else {
            None
        }
    }

    fn maybe_resize(&self, n: usize) {
        let order = self.shared.pool.with(|g, _, _| self.shared.raw.order(g));
        if self.wanted(n, order).is_none() || self.shared.resizing.load(Ordering::Relaxed) {
            return;
        }
        if self
            .shared
            .resizing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let me = Cht {
            shared: Arc::clone(&self.shared),
        };
        let spawned = std::thread::Builder::new()
            .name("aspace-cht-resizer".into())
            .spawn(move || me.background_resizer());
        if spawned.is_err() {
            // No thread: no resize this time (the table stays correct, only slower).
            self.shared.resizing.store(false, Ordering::Release);
        }
    }

    /// The resizer thread: resizes while the load is out of band, then leaves.
    fn background_resizer(self) {
        let reader = self.domain().register();
        loop {
            let n = self.shared.count.load(Ordering::Relaxed).max(0) as usize;
            let order = self.shared.raw.order(&reader.read());
            let Some(dir) = self.wanted(n, order) else {
                break;
            };
            let c = &self.shared.config;
            if !resize::resize(&self.shared.raw, &reader, dir, c.min_order, c.max_order) {
                break;
            }
        }
        let flag = Arc::clone(&self.shared.resizing);
        drop(reader);
        drop(self);
        // Release: pairs with the Acquire of the next claim.
        flag.store(false, Ordering::Release);
    }

    /// Doubles the number of buckets now, on this thread (waits for a running resize).
    /// Returns false at `max_order`. Must not be called inside a read section of the domain.
    pub fn grow(&self) -> bool {
        self.resize_now(Direction::Grow)
    }

    /// Halves the number of buckets now (see [`Cht::grow`]). Returns false at `min_order`.
    pub fn shrink(&self) -> bool {
        self.resize_now(Direction::Shrink)
    }

    fn resize_now(&self, dir: Direction) -> bool {
        while self
            .shared
            .resizing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        struct Release<'a>(&'a AtomicBool);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _release = Release(&self.shared.resizing);
        let reader = self.domain().register();
        let c = &self.shared.config;
        resize::resize(&self.shared.raw, &reader, dir, c.min_order, c.max_order)
    }

    /// The number of live items (exact when no update runs concurrently).
    pub fn len(&self) -> usize {
        let mut n = self.shared.count.load(Ordering::Relaxed);
        self.shared.pool.for_each_local(|l| n += l.delta);
        n.max(0) as usize
    }

    /// Whether the table holds no live item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// log2 of the current number of buckets.
    pub fn order(&self) -> u32 {
        self.shared.pool.with(|g, _, _| self.shared.raw.order(g))
    }

    /// Whether a resize is in progress.
    pub fn is_resizing(&self) -> bool {
        self.shared.resizing.load(Ordering::Acquire)
    }

    /// Waits until no resize runs (a started background resize finishes).
    pub fn wait_for_resize(&self) {
        while self.is_resizing() {
            std::thread::yield_now();
        }
    }

    /// Unlinks every deleted node still linked (a walk of every bucket), so that after
    /// `domain().barrier()` every removed item has been dropped.
    pub fn purge(&self) {
        self.shared.pool.with(|g, _, _| self.shared.raw.purge(g));
    }

    /// Checks the structure (no resize may run): every list sorted by hash, every item in the
    /// bucket of its hash, no mark but DELETED left, the live count equal to `len()`.
    ///
    /// # Panics
    /// On the first violation.
    pub fn check_invariants(&self) {
        self.wait_for_resize();
        let n = self.len();
        let live = self.shared.pool.with(|g, _, _| {
            assert!(!self.shared.raw.is_resizing(g), "a resize is in progress");
            let order = self.shared.raw.order(g);
            let mut live = 0;
            let mut last: Option<(usize, u64)> = None;
            self.shared.raw.for_each_node(g, |i, n, deleted| {
                assert_eq!(
                    node::bucket(n.hash, order),
                    i,
                    "an item in the wrong bucket"
                );
                assert_eq!(n.hash, self.hash(&n.key), "a stale memoized hash");
                assert_eq!(
                    n.next.load(crate::sync::Ordering::Acquire) & (link::MARKS & !link::DELETED),
                    0,
                    "a resize mark left behind"
                );
                if let Some((li, lh)) = last {
                    if li == i {
                        assert!(lh <= n.hash, "a list out of hash order");
                    }
                }
                last = Some((i, n.hash));
                if !deleted {
                    live += 1;
                }
            });
            live
        });
        assert_eq!(live, n, "len() disagrees with the live items");
    }
}

impl<K, V, S> std::fmt::Debug for Cht<K, V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cht").finish_non_exhaustive()
    }
}
