//! The bounded run shared by the writer-versus-zapper protocol tests: when the zapper stops,
//! stopping the writer however the zapper ends, and the checks every run ends with.
//!
//! The zapper stops after `iterations` zaps, or after `SOFT_LIMIT` once it did `MIN_ZAPS` (on an
//! oversubscribed machine every shootdown may wait for a preempted writer, and iterations are
//! slow), in both cases only once the writer did `MIN_WRITES` writes (a starved writer makes the
//! test longer, not vacuous); `MAX_RUN` caps it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aspace_vm::AddressSpace;

/// Past this time the zapper stops as soon as it did `MIN_ZAPS`.
pub const SOFT_LIMIT: Duration = Duration::from_secs(10);
pub const MIN_ZAPS: u64 = 200;
pub const MIN_WRITES: u64 = 200;
pub const MAX_RUN: Duration = Duration::from_secs(60);

/// When the zapper stops (module doc).
pub struct Budget {
    started: Instant,
    iterations: u64,
}

impl Budget {
    /// A run of at most `iterations` zaps, starting now.
    pub fn new(iterations: u64) -> Budget {
        Budget {
            started: Instant::now(),
            iterations,
        }
    }

    /// Whether the zapper, having done `zaps`, stops now.
    pub fn done(&self, zaps: u64, writes: &AtomicU64) -> bool {
        let elapsed = self.started.elapsed();
        let enough = zaps >= MIN_ZAPS && writes.load(Ordering::Relaxed) >= MIN_WRITES;
        enough && (zaps >= self.iterations || elapsed > SOFT_LIMIT) || elapsed > MAX_RUN
    }
}

/// Stops the writer when the zapper ends, also by a panic.
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The end of every run: the zapper's verdict, enough progress on both sides, and nothing
/// leaked through the racing zaps (unmapping `[a, a + len)` frees every frame).
pub fn finish(
    space: &AddressSpace,
    zaps: Result<u64, String>,
    writes: &AtomicU64,
    a: u64,
    len: u64,
) {
    let zaps = zaps.unwrap_or_else(|msg| panic!("{msg}"));
    let writes = writes.load(Ordering::Relaxed);
    assert!(
        zaps >= MIN_ZAPS && writes >= MIN_WRITES,
        "only {zaps} zaps and {writes} writes in {MAX_RUN:?}"
    );
    let mut last = space.attach().expect("attach");
    last.munmap(a, len).expect("unmap A");
    assert_eq!(space.stats().frames_in_use, 0);
}
