//! Runs operations in recorded rounds on N threads: the driver of every conflict audit.
//!
//! Each of `cores` threads (any number, whatever the machine has) builds its state
//! (`setup`, not recorded), then all meet at a barrier; in each of `rounds` rounds every thread
//! runs one operation between [`begin_op`] and [`end_op`], and all meet at a barrier again
//! before the next round (the leader advances the background round stamp in between, behind a
//! second barrier, so no access of round `r + 1` is stamped `r`). Background recording (threads
//! outside any operation: the RCU reclaimer) is on from the first round to the last.
//! `teardown` runs after the last round, unrecorded.
//!
//! Rounds put the operations of different cores side by side in time, as the analysis assumes
//! (an operation conflicts with the other cores' operations of its own and the next round);
//! on a machine with fewer CPUs than threads the round structure still holds, only slower.
//!
//! Not for: timing (the barriers dominate) or concurrent use (background recording is global:
//! one run at a time per process).

use crate::analysis::OpRecord;
use crate::record::{begin_op, end_op, set_background, set_round, take_background, BgAccess};
use std::sync::{Barrier, Mutex};

/// What a run recorded.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Every operation of every core and round.
    pub ops: Vec<OpRecord>,
    /// The background log.
    pub background: Vec<BgAccess>,
}

static ONE_RUN: Mutex<()> = Mutex::new(());

/// Runs `rounds` rounds of one `op` per core on `cores` threads (see the module doc).
/// `op(state, core, round)`; `setup(core)` and `teardown(state, core)` are not recorded.
pub fn run_rounds<S>(
    cores: usize,
    rounds: u64,
    setup: impl Fn(usize) -> S + Sync,
    op: impl Fn(&mut S, usize, u64) + Sync,
    teardown: impl Fn(S, usize) + Sync,
) -> Recorded {
    let _one = ONE_RUN.lock().unwrap_or_else(|e| e.into_inner());
    let barrier = Barrier::new(cores);
    let per_core: Vec<Vec<OpRecord>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cores)
            .map(|core| {
                let (barrier, setup, op, teardown) = (&barrier, &setup, &op, &teardown);
                s.spawn(move || {
                    let mut state = setup(core);
                    if barrier.wait().is_leader() {
                        set_round(0);
                        set_background(true);
                    }
                    barrier.wait();
                    let mut ops = Vec::with_capacity(rounds as usize);
                    for round in 0..rounds {
                        begin_op();
                        op(&mut state, core, round);
                        let accesses = end_op();
                        ops.push(OpRecord {
                            core,
                            round,
                            accesses,
                        });
                        if barrier.wait().is_leader() {
                            set_round(round + 1);
                            if round + 1 == rounds {
                                set_background(false);
                            }
                        }
                        barrier.wait();
                    }
                    teardown(state, core);
                    ops
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    if rounds == 0 {
        set_background(false);
    }
    Recorded {
        ops: per_core.into_iter().flatten().collect(),
        background: take_background(),
    }
}
