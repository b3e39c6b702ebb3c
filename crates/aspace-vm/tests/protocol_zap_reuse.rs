//! Protocol test: `zap` (munmap, `MADV_DONTNEED`, a replacing mmap) frees a frame only after the
//! shootdown returned, so a core still writing through the old translation can never write into
//! the frame's next owner.
//!
//! A writer core sweeps the 16 pages of region `A` in descending order, writing each page full
//! of `0xA5` bytes (one access window per page, through its soft TLB). A zapper core, in a loop,
//! takes `A`'s frames while `A` stays mapped, alternately by a replacing `MAP_FIXED` mmap (the
//! zap that munmap shares) and by `MADV_DONTNEED`: the frames are zeroed (ascending) and go to
//! the zapper's own frame cache (`frame_batch(1)`, a pool of 256 frames, so they are reused at
//! once). It then maps a fresh region `B` of the same size, faults it in (taking exactly the
//! frames `A` just gave up) and reads it back several times: fresh anonymous memory must read
//! zero, every byte, every time.
//!
//! If frames were freed before the shootdown, the writer, still using its cached translations
//! (no flush was requested yet), would write into frames already zeroed, and `B` would read
//! `0xA5`. Mutation caught, every run: in `designs/syscalls.rs` `zap_locked`, `free_all` before
//! `shootdown` (40 of 40 runs failed, within the first 289 zaps of 2000; 40 of 40 under
//! `oversubscribed`). The same reordering in `MADV_DONTNEED`'s own zap is caught too (10 of 10).
//!
//! The run is bounded as `protocol/bounded_run.rs` describes (at most `ITERATIONS` zaps).
//!
//! Both shootdown policies run it: broadcast (the `coarse` design's own) and targeted (through
//! the builder's testing hook), where the zapper's shootdown reaches the writer only because the
//! writer's page-table walks recorded it in the leaf table (`page_table/users.rs`). Mutations
//! caught by the targeted run: the access path walking with plain `lookup` (nothing recorded:
//! the zaps send no shootdown at all), and `zap_locked` freeing the frames before its
//! targeted shootdown.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[path = "protocol/bounded_run.rs"]
mod bounded_run;
use bounded_run::{finish, Budget, StopOnDrop};

use aspace_vm::{AddressSpace, Advice, Builder, Design, MapFlags, Prot, PAGE_SIZE};

const PAGES: u64 = 16;
const LEN: u64 = PAGES * PAGE_SIZE;
const A: u64 = 0x1000_0000;
const ITERATIONS: u64 = 2000;
const PATTERN: u8 = 0xA5;

#[test]
fn a_writer_through_a_stale_translation_never_reaches_a_reused_frame() {
    writer_versus_zapper(AddressSpace::builder().design(Design::Coarse));
}

#[test]
fn a_writer_through_a_stale_translation_never_reaches_a_reused_frame_with_targeted_shootdown() {
    let space = writer_versus_zapper(
        AddressSpace::builder()
            .design(Design::Coarse)
            .targeted_shootdown_for_testing(),
    );
    let st = space.stats();
    // Each round reached one core, the writer: the zaps of A reach only the writer (the zapper
    // never walks A's leaf); the munmaps of B (a leaf near the top of the space, read only by
    // the zapper) send no round at all (the zapper flushes its own TLB); the final munmap
    // finds only detached cores. Broadcast would have targeted both attached cores in every
    // round. How many zaps found A's pages present again (and so sent a round) depends on the
    // scheduling; at least one did.
    assert!(st.shootdowns > 0, "the writer was never reached: {st:?}");
    assert_eq!(st.shootdown_targets, st.shootdowns, "{st:?}");
}

/// The test on a space of `builder`'s policy; returns the space.
fn writer_versus_zapper(builder: Builder) -> AddressSpace {
    let space = builder
        .memory(256 * PAGE_SIZE)
        .frame_batch(1)
        .max_cores(2)
        .build()
        .expect("build");
    let mut writer = space.attach().expect("attach writer");
    let mut zapper = space.attach().expect("attach zapper");
    let rw = Prot::READ_WRITE;
    let pa = MapFlags::PRIVATE_ANONYMOUS;
    writer
        .mmap(A, LEN, rw, pa | MapFlags::FIXED)
        .expect("map A");
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let budget = Budget::new(ITERATIONS);
    let (stop, writes) = (&stop, &writes);
    let zaps = std::thread::scope(|s| {
        s.spawn(move || {
            let buf = vec![PATTERN; PAGE_SIZE as usize];
            while !stop.load(Ordering::Relaxed) {
                // Pages in descending order: the zapper zeroes them ascending, so the two cross
                // inside every zap that overlaps a sweep.
                for p in (0..PAGES).rev() {
                    writer
                        .write(A + p * PAGE_SIZE, &buf)
                        .expect("A stays mapped and writable");
                }
                writes.fetch_add(1, Ordering::Relaxed);
            }
        });
        let zapper = s.spawn(move || {
            let _stop = StopOnDrop(stop);
            let mut buf = vec![0u8; LEN as usize];
            let mut zaps = 0u64;
            loop {
                if budget.done(zaps, writes) {
                    break Ok(zaps);
                }
                // Alternately the two ways to take A's frames while A stays mapped: a replacing
                // `MAP_FIXED` mmap (the zap shared with munmap) and `MADV_DONTNEED`.
                if zaps % 2 == 0 {
                    zapper
                        .mmap(A, LEN, rw, pa | MapFlags::FIXED)
                        .expect("replacing mmap over A");
                } else {
                    zapper
                        .madvise(A, LEN, Advice::DONTNEED)
                        .expect("DONTNEED over A");
                }
                zaps += 1;
                let b = zapper.mmap(0, LEN, rw, pa).expect("map B");
                let mut bad = None;
                for round in 0..4 {
                    zapper.read(b, &mut buf).expect("B reads");
                    if let Some(i) = buf.iter().position(|&x| x != 0) {
                        bad = Some(format!(
                            "zap {zaps}, read {round} of a fresh mapping: byte {i} (page {}) is \
                             {:#x}: a write through a stale translation reached a reused frame",
                            i as u64 / PAGE_SIZE,
                            buf[i]
                        ));
                        break;
                    }
                }
                zapper.munmap(b, LEN).expect("unmap B");
                if let Some(msg) = bad {
                    break Err(msg);
                }
            }
        });
        zapper.join().expect("zapper panicked")
    });
    finish(&space, zaps, writes, A, LEN);
    space
}
