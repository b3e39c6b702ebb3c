//! The raw CHT: bucket lists, lookups, updates and the resize steps, on explicit guards.
//!
//! Every method that dereferences nodes takes a `&Guard` of the table's domain (the facade checks
//! it); `Self::resize_steps` is driven by the resizer (`resize.rs`) between grace periods. See the
//! module doc of `cht.rs` for the protocol and its correctness argument.
//!
//! Orderings: every load of a head or link is `Acquire` and every CAS that publishes a node or
//! a mark is `AcqRel`: the Release publishes the node's fields (and the list behind a moved
//! head) to the Acquire loads of readers and of other updaters walking the list; the Acquire of
//! a CAS orders the walk that follows it. Nothing here relies on SeqCst: the grace periods the
//! resizer waits for are the only global ordering points.

use super::link::{ptr, word, CONST, DELETED, INVALID, JOIN, JOIN_FOLLOWS, MARKS, MOVED};
use super::node::{bucket, Node};
use super::table::{Table, TableRef};
use crate::sync::{AtomicUsize, Ordering};
use aspace_rcu::{Domain, Guard};
use std::marker::PhantomData;

/// Where a walk of a bucket list stopped: the link `prev` (holding `pv`) points to `cur`.
pub(crate) struct At<'g> {
    pub(crate) prev: &'g AtomicUsize,
    pub(crate) pv: usize,
}

/// Why an update must start over.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Again {
    /// The list changed under the walk (a CAS failed, a head froze): walk again now.
    Restart,
    /// The insertion point follows a deleted node that may not be unlinked until the resizer
    /// clears a mark after a grace period: leave the read section and try again.
    Blocked,
}

/// Outcome of an insert that did not link its node.
pub(crate) enum NotInserted<K, V> {
    /// `insert_unique` found a live item with an equal key.
    Exists(Box<Node<K, V>>),
    /// See [`Again::Blocked`].
    Blocked(Box<Node<K, V>>),
}

/// Direction of a resize.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Grow,
    Shrink,
}

pub(crate) struct RawCht<K, V> {
    /// The current array's word: its address and order (`TableRef::word_of`).
    table: AtomicUsize,
    domain: Domain,
    _nodes: PhantomData<Box<Node<K, V>>>,
}

// SAFETY: nodes are shared between threads (readers get `&K`/`&V`, the reclaimer drops them):
// K and V must be Send + Sync, which the bounds on the impls that hand them out require.
unsafe impl<K: Send + Sync, V: Send + Sync> Send for RawCht<K, V> {}
// SAFETY: as above.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for RawCht<K, V> {}

impl<K: Send + 'static, V: Send + 'static> RawCht<K, V> {
    pub(crate) fn new(domain: Domain, order: u32) -> Self {
        RawCht {
            table: AtomicUsize::new(TableRef::word_of(Table::alloc(order, true, false), order)),
            domain,
            _nodes: PhantomData,
        }
    }

    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The current array.
    #[inline]
    pub(crate) fn table<'g>(&self, _g: &'g Guard<'_>) -> TableRef<'g> {
        // Acquire: pairs with the Release store of the switch (`finish`), which follows the
        // moves that initialised the array's heads.
        let w = self.table.load(Ordering::Acquire);
        // SAFETY: a word made by `word_of`; the array is freed a grace period after it stops
        // being current; `_g` is a read section of this table's domain (checked by the facade).
        unsafe { TableRef::from_word(w) }
    }

    // ---------------------------------------------------------------- lookups

    /// The head word a reader of `h` walks from, in whichever array holds the bucket now.
    #[inline]
    fn read_head(&self, h: u64, g: &Guard<'_>) -> usize {
        let t = self.table(g);
        let w = t.head_of(h).load(Ordering::Acquire);
        if w & CONST == 0 {
            return w;
        }
        self.read_head_resizing(t, w, h)
    }

    /// `read_head` of a frozen or moved head: follow the array it moves to (and the one after
    /// it, if a reader was held up through a whole resize and the start of the next).
    #[cold]
    fn read_head_resizing(&self, mut t: TableRef<'_>, mut w: usize, h: u64) -> usize {
        loop {
            // Acquire: pairs with the Release store in `begin`, which happened before the
            // freeze whose word we read with Acquire.
            // SAFETY: a frozen head exists only while `t.next` is set, and `t.next` is freed
            // after `t` (see `finish`); our caller's guard protects `t`.
            let nt = unsafe { TableRef::from_ptr(t.next.load(Ordering::Acquire)) };
            let ni = bucket(h, nt.order);
            let nw = nt.heads()[ni].load(Ordering::Acquire);
            if nw & CONST != 0 {
                // `nt` is itself being resized (we were held up): follow it on.
                t = nt;
                w = nw;
                continue;
            }
            if nt.shrink_target {
                // A bucket of the odd half whose join is pending is still the frozen list.
                let odd = bucket(h, t.order) & 1 == 1;
                if nw & INVALID != 0 || (odd && nw & JOIN_FOLLOWS != 0) {
                    return w & !MARKS;
                }
                return nw;
            }
            if nw & INVALID == 0 {
                return nw;
            }
            // Grow: the upper half is not split off yet; its items are behind the lower half's.
            let sw = nt.heads()[ni & !1].load(Ordering::Acquire);
            if sw & INVALID == 0 {
                return sw;
            }
            return w & !MARKS;
        }
    }

    /// The first live item with hash `h` whose key satisfies `eq`.
    #[inline]
    pub(crate) fn get<'g>(
        &self,
        h: u64,
        mut eq: impl FnMut(&K) -> bool,
        g: &'g Guard<'_>,
    ) -> Option<&'g Node<K, V>> {
        let mut p = ptr::<K, V>(self.read_head(h, g));
        while !p.is_null() {
            // SAFETY: reachable from a head under `g`; freed only a grace period after unlink.
            let n = unsafe { &*p };
            if n.hash > h {
                break;
            }
            // Acquire: pairs with the publishing CAS of the successor.
            let nx = n.next.load(Ordering::Acquire);
            if n.hash == h && nx & DELETED == 0 && eq(&n.key) {
                return Some(n);
            }
            p = ptr(nx);
        }
        None
    }

    /// Calls `f` on every live item with hash `h` and a key satisfying `eq` (equal keys).
    pub(crate) fn get_all<'g>(
        &self,
        h: u64,
        mut eq: impl FnMut(&K) -> bool,
        g: &'g Guard<'_>,
        mut f: impl FnMut(&'g Node<K, V>),
    ) {
        let mut p = ptr::<K, V>(self.read_head(h, g));
        while !p.is_null() {
            // SAFETY: as in `get`.
            let n = unsafe { &*p };
            if n.hash > h {
                break;
            }
            let nx = n.next.load(Ordering::Acquire);
            if n.hash == h && nx & DELETED == 0 && eq(&n.key) {
                f(n);
            }
            p = ptr(nx);
        }
    }

    // ---------------------------------------------------------------- updates

    /// The array and bucket an updater of `h` works in, after helping every resize step that
    /// keeps that bucket from being updated (a frozen head, an unsplit or unjoined bucket).
    pub(crate) fn update_bucket<'g>(&self, h: u64, g: &'g Guard<'_>) -> (TableRef<'g>, usize) {
        let t = self.table(g);
        let i = bucket(h, t.order);
        if t.heads()[i].load(Ordering::Acquire) & CONST == 0 {
            return (t, i);
        }
        // SAFETY: as in `read_head_resizing`.
        let nt: TableRef<'g> = unsafe { TableRef::from_ptr(t.next.load(Ordering::Acquire)) };
        if nt.shrink_target {
            let j = i / 2;
            help_move(t, 2 * j, nt, j, JOIN_FOLLOWS);
            self.help_join(t, nt, j, g);
            (nt, j)
        } else {
            help_move(t, i, nt, 2 * i, 0);
            self.help_split(nt, 2 * i, g);
            (nt, bucket(h, nt.order))
        }
    }

    /// Michael's search in bucket `i` of `t`: unlinks the deleted nodes it passes where the
    /// marks allow and stops at the first node with a hash above `h` (`incl`) or at or above
    /// `h` (`!incl`). `seen` is called on every live node with hash `h` passed over; when it
    /// returns true the walk stops with `Ok(None)`.
    pub(crate) fn find<'g>(
        &self,
        t: TableRef<'g>,
        i: usize,
        h: u64,
        incl: bool,
        mut seen: impl FnMut(&'g Node<K, V>) -> bool,
        _g: &'g Guard<'_>,
    ) -> Result<Option<At<'g>>, Again> {
        let head = &t.heads()[i];
        'restart: loop {
            let mut prev: &'g AtomicUsize = head;
            let mut pv = head.load(Ordering::Acquire);
            if pv & (CONST | INVALID) != 0 {
                return Err(Again::Restart);
            }
            loop {
                let cur = ptr::<K, V>(pv);
                if cur.is_null() {
                    return Ok(Some(At { prev, pv }));
                }
                // SAFETY: reachable under the guard; freed a grace period after its unlink.
                let c: &'g Node<K, V> = unsafe { &*cur };
                let cn = c.next.load(Ordering::Acquire);
                if cn & DELETED != 0 {
                    // A head's JOIN_FOLLOWS is a pending join in a shrink target (kept by the
                    // unlink); anywhere else JOIN_FOLLOWS in `pv` makes `c` the join node.
                    let pending = std::ptr::eq(prev, head) && t.shrink_target;
                    let pinned =
                        cn & JOIN != 0 || pv & DELETED != 0 || (pv & JOIN_FOLLOWS != 0 && !pending);
                    if !pinned {
                        // Unlink `c`: its successor takes its place, with `prev`'s JOIN (a
                        // join node stays one) and `c`'s JOIN_FOLLOWS (the split point moves
                        // back to `prev`).
                        let nv = word(ptr::<K, V>(cn))
                            | (pv & (JOIN | JOIN_FOLLOWS))
                            | (cn & JOIN_FOLLOWS);
                        // AcqRel: Release publishes the shorter list; Acquire orders our walk on.
                        match prev.compare_exchange(pv, nv, Ordering::AcqRel, Ordering::Acquire) {
                            Ok(_) => {
                                // SAFETY: we unlinked `c` (one CAS succeeds per node: its only
                                // link changed from `c`), so no reader that starts later can
                                // reach it; it came from `Box::into_raw` in `insert`.
                                unsafe { self.domain.defer_free(cur) };
                                pv = nv;
                                continue;
                            }
                            Err(_) => continue 'restart,
                        }
                    }
                    // Pinned: a deleted node stays until the resizer clears its mark.
                    if c.hash > h || (!incl && c.hash == h) {
                        return Ok(Some(At { prev, pv }));
                    }
                    prev = &c.next;
                    pv = cn;
                    continue;
                }
                if c.hash > h || (!incl && c.hash == h) {
                    return Ok(Some(At { prev, pv }));
                }
                if c.hash == h && seen(c) {
                    return Ok(None);
                }
                prev = &c.next;
                pv = cn;
            }
        }
    }

    /// Links `node` at `at` (found in `t`). `Err(Restart)` when the link changed.
    fn link_at(&self, t: TableRef<'_>, at: &At<'_>, node: *mut Node<K, V>) -> Result<(), Again> {
        let pv = at.pv;
        if pv & DELETED != 0 {
            return Err(Again::Blocked);
        }
        let mut succ = word(ptr::<K, V>(pv));
        if pv & JOIN_FOLLOWS != 0 {
            if is_head(t, at.prev) && t.shrink_target {
                // Pending join on a head: updaters helped it before walking; never here.
                return Err(Again::Restart);
            }
            // The split point. Only a walker of the newest array (which inserts an item of the
            // lower half) may move it; a walker of the array being resized restarts and
            // finds its head frozen.
            if !t.next.load(Ordering::Acquire).is_null() {
                return Err(Again::Restart);
            }
            succ |= JOIN_FOLLOWS;
        }
        // SAFETY: `node` is ours until the CAS below publishes it.
        unsafe { (*node).next.store(succ, Ordering::Relaxed) };
        let nv = word(node) | (pv & JOIN);
        // AcqRel: Release publishes the node's fields and `next` (stored above) to every
        // Acquire load of this link; Acquire orders what follows.
        at.prev
            .compare_exchange(pv, nv, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(|_| Again::Restart)
    }

    /// Inserts `node` after every item with an equal or smaller hash; with `unique`, fails if a
    /// live item's key satisfies `eq`.
    pub(crate) fn insert(
        &self,
        mut node: Box<Node<K, V>>,
        unique: bool,
        mut eq: impl FnMut(&K, &K) -> bool,
        g: &Guard<'_>,
    ) -> Result<(), NotInserted<K, V>> {
        let h = node.hash;
        loop {
            let (t, i) = self.update_bucket(h, g);
            let found = self.find(t, i, h, true, |n| unique && eq(&n.key, &node.key), g);
            let at = match found {
                Ok(Some(at)) => at,
                Ok(None) => return Err(NotInserted::Exists(node)),
                Err(Again::Restart) => continue,
                Err(Again::Blocked) => return Err(NotInserted::Blocked(node)),
            };
            let raw = Box::into_raw(node);
            match self.link_at(t, &at, raw) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    // SAFETY: not published (the CAS failed or was not tried): still ours.
                    node = unsafe { Box::from_raw(raw) };
                    if e == Again::Blocked {
                        return Err(NotInserted::Blocked(node));
                    }
                }
            }
        }
    }

    /// Marks the first live item with hash `h` and a key satisfying `eq` deleted, then unlinks
    /// it (best effort; a pinned node is unlinked by a later walk). Returns whether one was.
    pub(crate) fn remove(&self, h: u64, mut eq: impl FnMut(&K) -> bool, g: &Guard<'_>) -> bool {
        loop {
            let (t, i) = self.update_bucket(h, g);
            let at = match self.find(t, i, h, false, |_| false, g) {
                Ok(Some(at)) => at,
                Ok(None) => unreachable!("seen never stops the walk"),
                Err(_) => continue,
            };
            let mut p = ptr::<K, V>(at.pv);
            while !p.is_null() {
                // SAFETY: reachable under `g`.
                let c = unsafe { &*p };
                if c.hash != h {
                    break;
                }
                let mut cn = c.next.load(Ordering::Acquire);
                if cn & DELETED == 0 && eq(&c.key) {
                    loop {
                        // AcqRel: the linearization point of the removal; Release orders it
                        // before the unlink of any walker that sees the mark.
                        match c.next.compare_exchange(
                            cn,
                            cn | DELETED,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        ) {
                            Ok(_) => {
                                let _ = self.find(t, i, h, true, |_| false, g);
                                return true;
                            }
                            Err(x) if x & DELETED != 0 => {
                                cn = x;
                                break;
                            }
                            Err(x) => cn = x,
                        }
                    }
                }
                p = ptr(cn);
            }
            return false;
        }
    }

    // ---------------------------------------------------------------- resize steps

    /// Starts a resize: allocates the new array (heads INVALID) and links it from the current
    /// one. `None` if one is in progress or the order would leave `[min, max]`.
    pub(crate) fn begin(&self, dir: Direction, min: u32, max: u32) -> Option<()> {
        // SAFETY: only the resizer (one at a time, `resize.rs`) frees arrays; it is us.
        let t = unsafe { TableRef::from_word(self.table.load(Ordering::Acquire)) };
        if !t.next.load(Ordering::Acquire).is_null() {
            return None;
        }
        let order = match dir {
            Direction::Grow if t.order < max => t.order + 1,
            Direction::Shrink if t.order > min => t.order - 1,
            _ => return None,
        };
        let nt = Table::alloc(order, false, dir == Direction::Shrink).as_ptr();
        // Release: publishes the new array's INVALID heads to helpers that load `next` with
        // Acquire after seeing a frozen head.
        t.next.store(nt, Ordering::Release);
        Some(())
    }

    /// The array being resized and its target.
    fn resizing<'g>(&self, g: &'g Guard<'_>) -> (TableRef<'g>, TableRef<'g>) {
        let t = self.table(g);
        // SAFETY: set by `begin` (not null); freed after `t`.
        let nt = unsafe { TableRef::from_ptr(t.next.load(Ordering::Acquire)) };
        (t, nt)
    }

    /// Step 2 (both directions): moves every head to the new array (Click's protocol).
    pub(crate) fn move_heads(&self, g: &Guard<'_>) {
        let (t, nt) = self.resizing(g);
        for i in 0..t.len() {
            if nt.shrink_target {
                if i % 2 == 0 {
                    help_move(t, i, nt, i / 2, JOIN_FOLLOWS);
                }
            } else {
                help_move(t, i, nt, 2 * i, 0);
            }
        }
    }

    /// Step 3 (a)-(c) of a grow, or the join of a shrink, for every bucket.
    pub(crate) fn split_or_join_all(&self, g: &Guard<'_>) {
        let (t, nt) = self.resizing(g);
        if nt.shrink_target {
            for j in 0..nt.len() {
                self.help_join(t, nt, j, g);
            }
        } else {
            for s in (0..nt.len()).step_by(2) {
                self.help_split(nt, s, g);
            }
        }
    }

    /// Step 3 (d) of a grow: cuts every split point (`JOIN_FOLLOWS` link) of the lower halves.
    /// Runs a grace period after the splits, so no updater still splits or walks an unsplit
    /// list it took for the upper half's.
    pub(crate) fn cut_all(&self, g: &Guard<'_>) {
        let (_, nt) = self.resizing(g);
        if nt.shrink_target {
            return;
        }
        for s in (0..nt.len()).step_by(2) {
            self.cut(nt, s, g);
        }
    }

    /// Step 3 (e) / the shrink's counterpart: clears the JOIN marks, a grace period after the
    /// last walker could reach a join node from two lists.
    pub(crate) fn clear_joins(&self, g: &Guard<'_>) {
        let (t, nt) = self.resizing(g);
        if nt.shrink_target {
            for j in 0..nt.len() {
                let f = ptr::<K, V>(t.heads()[2 * j + 1].load(Ordering::Acquire));
                if !f.is_null() {
                    // SAFETY: a join node is never unlinked while marked, so still linked.
                    clear_join(unsafe { &*f });
                }
            }
        } else {
            for d in (1..nt.len()).step_by(2) {
                let mut p = ptr::<K, V>(nt.heads()[d].load(Ordering::Acquire));
                while !p.is_null() {
                    // SAFETY: reachable under `g`.
                    let c = unsafe { &*p };
                    let cn = c.next.load(Ordering::Acquire);
                    if cn & JOIN != 0 {
                        clear_join(c);
                        break;
                    }
                    p = ptr(cn);
                }
            }
        }
    }

    /// Step 5: the new array becomes current; the old one is freed after a grace period.
    pub(crate) fn finish(&self) {
        // SAFETY: only the resizer frees arrays; the current one is alive.
        let old = unsafe { TableRef::from_word(self.table.load(Ordering::Acquire)) };
        let nt = old.next.load(Ordering::Acquire);
        debug_assert!(!nt.is_null());
        // SAFETY: set by `begin`, alive until after `old` is freed.
        let new = unsafe { TableRef::from_ptr(nt) };
        // Release: pairs with `table()`'s Acquire; the moves, splits and joins all happened
        // before (they are the resizer's own or were seen complete by it).
        self.table.store(
            TableRef::word_of(new.non_null(), new.order),
            Ordering::Release,
        );
        let old = SendTable(old.non_null());
        self.domain.call(move || {
            let old = old;
            // SAFETY: unreachable for readers that start after the store above, and the
            // callback runs a grace period after it; from `Table::alloc`, freed once.
            unsafe { Table::free(old.0) };
        });
    }

    /// Grow step 3 (a)-(c) for the pair (s, s+1) of the new array: marks the split point
    /// `JOIN_FOLLOWS`, the first upper-half node `F` `JOIN`, and points head s+1 at `F`. With
    /// no upper-half node the split point is the lower list's null end: it is marked all the
    /// same and head s+1 becomes an empty list (`cht.rs`, gap (6)).
    fn help_split(&self, nt: TableRef<'_>, s: usize, g: &Guard<'_>) {
        let d = s + 1;
        'again: loop {
            if nt.heads()[d].load(Ordering::Acquire) & INVALID == 0 {
                return;
            }
            let mut prev = &nt.heads()[s];
            let mut pv = prev.load(Ordering::Acquire);
            let f = loop {
                if pv & JOIN_FOLLOWS != 0 {
                    // Split already (F, or null for an empty upper half).
                    break ptr::<K, V>(pv);
                }
                let cur = ptr::<K, V>(pv);
                if cur.is_null() {
                    // Nothing for the upper half: the split point is the end of the list, and
                    // it is marked like any other. Without the mark, an updater that started
                    // on the old array and holds this (null) link could append an upper-half
                    // item here after the upper head was made empty: linked in the lower list
                    // only, it would be lost to every lookup and update of its bucket. The
                    // CAS expects the link unmarked and L live, as in (a) below.
                    if pv & DELETED != 0 {
                        let _ = self.find(nt, s, u64::MAX, true, |_| false, g);
                        continue 'again;
                    }
                    // AcqRel: Release orders the mark before the upper head's publication
                    // below (an updater that finds that head valid and walks the lower list
                    // sees the end marked); Acquire as in (a).
                    if prev
                        .compare_exchange(
                            pv,
                            pv | JOIN_FOLLOWS,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_err()
                    {
                        continue 'again;
                    }
                    break cur;
                }
                // SAFETY: reachable under `g`.
                let c = unsafe { &*cur };
                if bucket(c.hash, nt.order) == d {
                    // (a) L's link gets JOIN_FOLLOWS; the CAS expects L live (no DELETED), so L
                    // is linked (a node is unlinked only once deleted): a deleted L is unlinked
                    // by `find` first.
                    if pv & DELETED != 0 {
                        let _ = self.find(nt, s, c.hash, false, |_| false, g);
                        continue 'again;
                    }
                    if prev
                        .compare_exchange(
                            pv,
                            pv | JOIN_FOLLOWS,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_err()
                    {
                        continue 'again;
                    }
                    break cur;
                }
                prev = &c.next;
                pv = c.next.load(Ordering::Acquire);
            };
            // (b) F becomes a join node.
            if !f.is_null() {
                // SAFETY: F is linked behind the JOIN_FOLLOWS link, which pins it.
                set_join(unsafe { &*f });
            }
            // (c) the upper half's head points to F (an empty list when there is none).
            let _ = nt.heads()[d].compare_exchange(
                INVALID,
                word(f),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            return;
        }
    }

    /// Grow step 3 (d) for the lower half s: its JOIN_FOLLOWS link becomes the end of the list.
    fn cut(&self, nt: TableRef<'_>, s: usize, g: &Guard<'_>) {
        'again: loop {
            let mut prev = &nt.heads()[s];
            let mut pv = prev.load(Ordering::Acquire);
            loop {
                if pv & JOIN_FOLLOWS != 0 {
                    if pv & DELETED != 0 {
                        // L is deleted: unlink it (moving the mark back), then cut there.
                        let f = ptr::<K, V>(pv);
                        if f.is_null() {
                            // The split point is the end of the list (empty upper half).
                            let _ = self.find(nt, s, u64::MAX, true, |_| false, g);
                        } else {
                            // SAFETY: pinned by the JOIN_FOLLOWS link.
                            let fh = unsafe { (*f).hash };
                            let _ = self.find(nt, s, fh, false, |_| false, g);
                        }
                        continue 'again;
                    }
                    // Release: the end of the lower list; Acquire orders our next walk.
                    if prev
                        .compare_exchange(pv, pv & JOIN, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        continue 'again;
                    }
                    return;
                }
                let cur = ptr::<K, V>(pv);
                if cur.is_null() {
                    return;
                }
                // SAFETY: reachable under `g`.
                let c = unsafe { &*cur };
                prev = &c.next;
                pv = c.next.load(Ordering::Acquire);
            }
        }
    }

    /// Shrink: joins the odd bucket 2j+1 of `t` behind the list of new bucket j: freezes its
    /// head, marks its first node `F` JOIN, links `F` at the end of the even list, marks the old
    /// head MOVED (keeping `F` for `clear_joins`) and clears the pending mark of the new head.
    fn help_join(&self, t: TableRef<'_>, nt: TableRef<'_>, j: usize, g: &Guard<'_>) {
        let o = &t.heads()[2 * j + 1];
        let w = freeze(o);
        if w & INVALID == 0 {
            let f = ptr::<K, V>(w);
            if !f.is_null() {
                // SAFETY: F is the first node behind a frozen head: no CAS can unlink it.
                let fr = unsafe { &*f };
                set_join(fr);
                loop {
                    match self.find(nt, j, fr.hash, false, |_| false, g) {
                        Ok(Some(at)) => {
                            if ptr::<K, V>(at.pv) == f {
                                break;
                            }
                            debug_assert!(ptr::<K, V>(at.pv).is_null());
                            if at.pv & DELETED != 0 {
                                continue;
                            }
                            let nv = word(f) | (at.pv & (JOIN | JOIN_FOLLOWS));
                            // Release: publishes the joined list.
                            if at
                                .prev
                                .compare_exchange(at.pv, nv, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok()
                            {
                                break;
                            }
                        }
                        Ok(None) => unreachable!(),
                        Err(_) => continue,
                    }
                }
            }
            let _ = o.compare_exchange(w, w | INVALID, Ordering::AcqRel, Ordering::Acquire);
        }
        let nh = &nt.heads()[j];
        let mut v = nh.load(Ordering::Acquire);
        while v & JOIN_FOLLOWS != 0 {
            match nh.compare_exchange(v, v & !JOIN_FOLLOWS, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(x) => v = x,
            }
        }
    }

    /// Calls `f` on every item (live or deleted-but-linked) of the current array, with no
    /// resize in progress. For invariant checks.
    pub(crate) fn for_each_node(&self, g: &Guard<'_>, mut f: impl FnMut(usize, &Node<K, V>, bool)) {
        let t = self.table(g);
        for (i, head) in t.heads().iter().enumerate() {
            let mut p = ptr::<K, V>(head.load(Ordering::Acquire));
            while !p.is_null() {
                // SAFETY: reachable under `g`.
                let c = unsafe { &*p };
                let cn = c.next.load(Ordering::Acquire);
                f(i, c, cn & DELETED != 0);
                p = ptr(cn);
            }
        }
    }

    /// The order of the current array.
    pub(crate) fn order(&self, g: &Guard<'_>) -> u32 {
        self.table(g).order
    }

    /// Whether a resize is in progress.
    pub(crate) fn is_resizing(&self, g: &Guard<'_>) -> bool {
        !self.table(g).next.load(Ordering::Acquire).is_null()
    }

    /// Unlinks every deleted node that can be (a walk of every bucket).
    pub(crate) fn purge(&self, g: &Guard<'_>) {
        let t = self.table(g);
        for i in 0..t.len() {
            let _ = self.find(t, i, u64::MAX, true, |_| false, g);
        }
    }
}

fn is_head(t: TableRef<'_>, l: &AtomicUsize) -> bool {
    let heads = t.heads();
    let base = heads.as_ptr() as usize;
    let a = l as *const AtomicUsize as usize;
    a >= base && a < base + std::mem::size_of_val(heads)
}

/// Freezes a head (sets CONST); returns the frozen word.
fn freeze(head: &AtomicUsize) -> usize {
    let mut w = head.load(Ordering::Acquire);
    loop {
        if w & CONST != 0 {
            return w;
        }
        // AcqRel: Acquire takes the list behind the head as of the freeze; Release orders the
        // freeze before our copy into the new array.
        match head.compare_exchange(w, w | CONST, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return w | CONST,
            Err(x) => w = x,
        }
    }
}

/// Click's move of head `i` of `t` to head `dst` of `nt` (which gets `mark` too): freeze,
/// copy into the INVALID target, mark moved. Any step may be done by any thread.
fn help_move(t: TableRef<'_>, i: usize, nt: TableRef<'_>, dst: usize, mark: usize) {
    let w = freeze(&t.heads()[i]);
    if w & MOVED == MOVED {
        return;
    }
    // Release: publishes the list to walkers of the new array.
    let _ = nt.heads()[dst].compare_exchange(
        INVALID,
        (w & !MARKS) | mark,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    let _ = t.heads()[i].compare_exchange(w, w | INVALID, Ordering::AcqRel, Ordering::Acquire);
}

fn set_join<K, V>(n: &Node<K, V>) {
    let mut cn = n.next.load(Ordering::Acquire);
    while cn & JOIN == 0 {
        match n
            .next
            .compare_exchange(cn, cn | JOIN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return,
            Err(x) => cn = x,
        }
    }
}

fn clear_join<K, V>(n: &Node<K, V>) {
    let mut cn = n.next.load(Ordering::Acquire);
    while cn & JOIN != 0 {
        match n
            .next
            .compare_exchange(cn, cn & !JOIN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return,
            Err(x) => cn = x,
        }
    }
}

impl<K, V> Drop for RawCht<K, V> {
    fn drop(&mut self) {
        // No resize is in progress (the resizer holds the facade's Arc) and no reader holds a
        // guard (we are dropped by the last owner): free every node still linked, then the array.
        // SAFETY: owned; see above. Freed at the end of this function (`FreeTable`, also when
        // a key's or value's drop panics).
        let t = unsafe { TableRef::from_word(self.table.load(Ordering::Acquire)) };
        struct FreeTable(std::ptr::NonNull<Table>);
        impl Drop for FreeTable {
            fn drop(&mut self) {
                // SAFETY: the current array, from `Table::alloc`, freed only here.
                unsafe { Table::free(self.0) };
            }
        }
        let _free_table = FreeTable(t.non_null());
        debug_assert!(t.next.load(Ordering::Relaxed).is_null());
        let mut nodes = Vec::new();
        for head in t.heads().iter() {
            let mut p = ptr::<K, V>(head.load(Ordering::Relaxed));
            while !p.is_null() {
                nodes.push(p);
                // SAFETY: linked, not freed yet (we free after collecting).
                p = ptr(unsafe { (*p).next.load(Ordering::Relaxed) });
            }
        }
        /// Frees the nodes not freed yet, also when a key's or value's drop panics (then the
        /// rest are still freed, as `Vec`'s drop does).
        struct FreeAll<K, V>(std::vec::IntoIter<*mut Node<K, V>>);
        impl<K, V> Drop for FreeAll<K, V> {
            fn drop(&mut self) {
                for p in self.0.by_ref() {
                    // SAFETY: every linked node is owned by the table (unlinked ones went to
                    // the domain), in exactly one list when no resize is in progress, and
                    // taken from the iterator once.
                    drop(unsafe { Box::from_raw(p) });
                }
            }
        }
        let mut rest = FreeAll(nodes.into_iter());
        for p in rest.0.by_ref() {
            // SAFETY: as in `FreeAll::drop` (which frees the rest if this drop panics).
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// A retired array's pointer, sent to the reclaimer (arrays hold only atomics and raw words).
struct SendTable(std::ptr::NonNull<Table>);
// SAFETY: the array is only freed through it, on the reclaimer thread, after no thread can
// reach it any more.
unsafe impl Send for SendTable {}
