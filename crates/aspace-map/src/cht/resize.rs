//! The resize driver: the steps of `raw.rs` in order, with the grace periods between them
//! (thesis §5.1.2, "Resizing algorithm", steps 1-5).
//!
//! Grow: (1) new array of INVALID heads, linked from the old one, grace period (every updater
//! that starts later sees it); (2) every head moved (Click); (3a-c) every bucket split
//! (JOIN_FOLLOWS on the split link, JOIN on the first upper node F, the upper head pointed at
//! F); grace period: no walker still takes an unsplit list for the upper half's or splits;
//! (3d) every split link cut; grace period: no walker still reaches F through the lower list;
//! (3e) the JOIN marks cleared; (4) grace period; (5) the new array becomes current and the old
//! one is freed a grace period later. Shrink: (1), (2) the even heads moved with a pending-join
//! mark, (3) every odd list joined behind its even partner's, grace period, JOIN marks
//! cleared, (4), (5). Updaters help (2), (3a-c) and the join; the waits are the resizer's alone.
//!
//! The resizer holds a reader of the domain and takes a read section around each step (it
//! walks lists that updaters unlink from), never across a grace period.

use super::raw::{Direction, RawCht};
use aspace_rcu::Reader;

/// Runs one whole resize in direction `dir` if none is in progress and the order stays within
/// `[min, max]`; returns whether it ran. The caller makes sure it is the only resizer.
pub(crate) fn resize<K: Send + 'static, V: Send + 'static>(
    raw: &RawCht<K, V>,
    reader: &Reader,
    dir: Direction,
    min: u32,
    max: u32,
) -> bool {
    if raw.begin(dir, min, max).is_none() {
        return false;
    }
    let domain = raw.domain();
    domain.synchronize();
    raw.move_heads(&reader.read());
    raw.split_or_join_all(&reader.read());
    domain.synchronize();
    if dir == Direction::Grow {
        raw.cut_all(&reader.read());
        domain.synchronize();
    }
    raw.clear_joins(&reader.read());
    domain.synchronize();
    raw.finish();
    true
}
