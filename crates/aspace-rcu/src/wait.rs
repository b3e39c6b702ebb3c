//! WAIT-FOR-READERS pacing: spin, then yield, then sleep in short, growing steps.
//!
//! The thesis (§4.4) sleeps 10 ms per check; that would make a grace period cost milliseconds.
//! Here a writer first spins with `crossbeam_utils::Backoff` (readers' sections are short, so the
//! reader it waits for usually leaves within a microsecond or two), then yields its CPU (on a
//! machine with fewer cores than runnable threads the reader may need this CPU to finish), and
//! only after that sleeps, so that a long read section (or an offline-forgetting qsbr thread)
//! does not burn a core. Each sleep lasts an eighth of the time already spent sleeping, clamped
//! to [20 us, 1 ms]: the writer notices the reader's exit at most ~12.5% (or 20 us) late, so a
//! reader that was descheduled for a few milliseconds costs the grace period those
//! milliseconds and not a millisecond of oversleep on top, while a reader that stays inside a
//! section for long is polled at most a thousand times a second.
//!
//! Under loom every step is `loom::thread::yield_now()` so the model scheduler runs the readers.
//!
//! Not for: waiting on anything other than reader slots (the reclaimer uses condvars).

use std::time::Duration;
#[cfg(not(loom))]
use std::time::Instant;

/// Yields after the spin phase before the first sleep.
#[cfg(not(loom))]
const YIELDS: u32 = 64;
/// Shortest sleep.
#[cfg(not(loom))]
const FIRST_SLEEP: Duration = Duration::from_micros(20);
/// Longest sleep.
#[cfg(not(loom))]
const MAX_SLEEP: Duration = Duration::from_millis(1);
/// A sleep lasts the time already spent sleeping divided by this (bounded relative oversleep).
#[cfg(not(loom))]
const OVERSLEEP_DIVISOR: u32 = 8;

/// One writer waiting for one reader slot.
pub(crate) struct WaitBackoff {
    #[cfg(not(loom))]
    spin: crossbeam_utils::Backoff,
    #[cfg(not(loom))]
    yields: u32,
    #[cfg(not(loom))]
    sleeping_since: Option<Instant>,
}

impl WaitBackoff {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(not(loom))]
            spin: crossbeam_utils::Backoff::new(),
            #[cfg(not(loom))]
            yields: 0,
            #[cfg(not(loom))]
            sleeping_since: None,
        }
    }

    /// One pause between two checks of the reader slot.
    pub(crate) fn pause(&mut self) {
        #[cfg(loom)]
        crate::sync::spin_wait_yield();
        #[cfg(not(loom))]
        {
            if !self.spin.is_completed() {
                self.spin.snooze();
            } else if self.yields < YIELDS {
                self.yields += 1;
                std::thread::yield_now();
            } else {
                let since = *self.sleeping_since.get_or_insert_with(Instant::now);
                let sleep = (since.elapsed() / OVERSLEEP_DIVISOR).clamp(FIRST_SLEEP, MAX_SLEEP);
                std::thread::sleep(sleep);
            }
        }
    }

    /// How long this wait has been in its sleeping phase (`None` while spinning or yielding).
    /// Used by the debug-build deadlock detector of the qsbr flavor.
    #[cfg_attr(any(loom, not(debug_assertions)), allow(dead_code))]
    pub(crate) fn sleeping_for(&self) -> Option<Duration> {
        #[cfg(loom)]
        {
            None
        }
        #[cfg(not(loom))]
        {
            self.sleeping_since.map(|t| t.elapsed())
        }
    }
}
