//! Debug-build thread identity, used to turn self-deadlocks into panics.
//!
//! A `synchronize()` that waits for a reader slot last used by the calling thread itself can
//! never finish: the thread would have to leave its read section (memb) or announce a quiescent
//! state (qsbr) while it is blocked in `synchronize()`. In debug builds each reader slot records
//! the token of the thread that last entered a read section (memb) or announced/came online
//! (qsbr), and the wait loops compare it with the caller's token.
//!
//! The token is the address of a thread-local byte: unique among live threads, free to compute.
//! Compiled only with `debug_assertions` and without loom (loom threads share one OS thread).
//!
//! Not for: anything in release builds.

/// A token naming the calling thread (unique among live threads); never 0.
pub(crate) fn current() -> usize {
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    TOKEN.with(|t| t as *const u8 as usize)
}
