//! User-space RCU for aspace: domains, registered readers, grace periods and batched deferred
//! reclamation (after M. Hrubý's thesis "RCU for HelenOS", chapters 2-4, and its user-space RCU
//! of §4.4).
//!
//! # What
//!
//! Read-copy-update lets readers traverse shared structures with no locks and no atomic
//! read-modify-write, while writers publish new versions by swapping one pointer and free the
//! old version only after a *grace period*: once every read section that could still hold it has
//! ended. A [`Domain`] tracks its registered readers, runs grace periods
//! ([`Domain::synchronize`]) and owns a reclaimer thread that runs deferred callbacks
//! ([`Domain::call`], [`Domain::defer_drop`], [`Domain::defer_free`]) in batches, one grace
//! period per batch; [`Domain::barrier`] waits for everything queued so far.
//!
//! ```
//! use aspace_rcu::Domain;
//! use std::sync::atomic::{AtomicPtr, Ordering};
//!
//! let domain: Domain = Domain::new();                // memb flavor by default
//! let reader = domain.register();                    // once per thread (RAII; Send, !Sync)
//! let shared = AtomicPtr::new(Box::into_raw(Box::new(1u64)));
//! {
//!     let _g = reader.read();                        // nestable, !Send
//!     // Acquire: pairs with the Release swap below.
//!     let v = unsafe { *shared.load(Ordering::Acquire) };
//!     assert_eq!(v, 1);
//! }
//! let old = shared.swap(Box::into_raw(Box::new(2u64)), Ordering::AcqRel);
//! unsafe { domain.defer_free(old) };                 // freed after a grace period
//! domain.barrier();                                  // every queued callback has run
//! assert_eq!(domain.pending(), 0);
//! # drop(reader);
//! # unsafe { drop(Box::from_raw(shared.load(Ordering::Relaxed))) };
//! ```
//!
//! # Algorithms
//!
//! - [`Memb`] (`memb.rs`): the thesis' user-space RCU (§4.4). A reader's nesting count and reader
//!   group share one word in its slot; read lock/unlock are two plain stores with compiler fences.
//!   The writer forces memory barriers in all running threads with
//!   `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, waits for readers delayed into the next
//!   group, flips the group once, waits for the pre-existing readers, and exits early when a full
//!   grace period elapsed while it waited for the writer mutex. Without membarrier the domain
//!   falls back to full-fence readers and says so ([`Domain::mode`]).
//! - [`Qsbr`] (`qsbr.rs`): read sections cost one load of the reader's own slot (the check that
//!   it is online); each reader announces quiescent states ([`Reader::quiescent_state`]) and
//!   goes [`Reader::offline`] around blocking.
//!
//! # The RCU contract (what this crate promises and what it asks)
//!
//! - A reference loaded from an RCU-protected pointer inside a read section (while a [`Guard`]
//!   lives, and for qsbr until the reader's next quiescent state or `offline()`) stays valid until
//!   the guard drops, provided writers unlink an object *before* handing it to
//!   `synchronize()`/`call()`/`defer_*()`.
//! - Writers publish with Release (or stronger) and readers load with Acquire; RCU orders
//!   unlinking against freeing, not the contents of a new object against its publication.
//! - Writers serialize among themselves with their own lock; RCU does not.
//! - Callbacks run on the reclaimer thread, in FIFO order per batch, after a grace period that
//!   started after they were queued. All of them run before the domain's last handle is gone.
//!
//! # Hazards
//!
//! - **`synchronize()` or `barrier()` inside a read section** of the same domain (or, qsbr, from
//!   an online reader's thread: use [`Reader::synchronize`], or go offline first) waits forever
//!   for itself. Debug builds panic (qsbr's `barrier()` once it has waited 200 ms). `barrier()`
//!   inside a callback panics in every build. A reader's own state changes
//!   ([`Reader::synchronize`], qsbr's [`Reader::quiescent_state`], [`Reader::offline`],
//!   [`Reader::online`]) take `&mut self`, so the borrow checker rejects them while one of its
//!   guards lives; qsbr's `read()` on an offline reader panics in every build.
//! - **Thread exit with a live guard** cannot happen safely: a `Guard` borrows its `Reader`, so it
//!   drops first. Leaking a guard (`mem::forget`) leaves the reader "inside" a section and stalls
//!   every grace period until the `Reader` drops (which panics in debug builds); it never makes
//!   the reader look idle: past the nesting limit (2^31 - 1 guards, 2^15 - 1 on 32-bit targets)
//!   `read()` panics instead of wrapping the count.
//! - **A dead reclaimer thread**: it survives every callback (panics and panicking panic
//!   payloads are caught). Should it die anyway, `barrier()`, `call()` and `defer_*()` panic
//!   instead of waiting or queueing forever, and the last handle's drop runs what was queued
//!   and panics with the reclaimer's message.
//! - **A qsbr reader that never announces a quiescent state** (or forgets to go offline before
//!   blocking) stalls every grace period and, through the reclaimer, all reclamation.
//! - **fork()**: the child inherits the domain's memory but not its reclaimer thread nor the
//!   other readers' threads; using a domain in a forked child is unsupported (as in liburcu
//!   without its atfork hooks). membarrier registration is inherited per mm by the kernel only
//!   for the same process; a child must not rely on it.
//! - **Signals**: a signal handler must not enter a read section on a reader that the interrupted
//!   code is using (the `!Sync` reader is not reentrant across an async interruption of a lock
//!   or unlock), nor call `synchronize()`.
//! - Long read sections delay reclamation; there is no blocking back-pressure on `call()`
//!   (the caller may itself be a reader), so garbage grows until readers let grace periods end.
//!
//! Not for: reference counting, or protecting data that writers modify in place.

#![deny(unsafe_op_in_unsafe_fn)]

mod config;
mod domain;
pub mod flavor;
mod memb;
mod membarrier;
#[cfg(all(debug_assertions, not(loom)))]
mod owner;
mod qsbr;
mod reclaimer;
mod registry;
mod stats;
mod sync;
mod wait;

pub use config::DomainConfig;
pub use domain::{Domain, Guard, Reader};
pub use flavor::{Flavor, Memb, Qsbr};
pub use membarrier::{MembMode, MembarrierError};
pub use stats::Stats;
