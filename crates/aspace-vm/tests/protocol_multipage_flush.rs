//! Protocol test: an access spanning several pages (`read`/`write` across page boundaries)
//! never keeps a translation from before a TLB flush.
//!
//! The access path translates every page of an access inside one access window; when a page is
//! missing it leaves the window, faults, and starts again. If the next window begins with a flush
//! (a shootdown ran meanwhile), the translations collected so far are stale and must be dropped:
//! their frames may already be zeroed and reused.
//!
//! A writer core writes all 16 pages of region `A` (`0xA5` bytes) in ONE `write` call, in a loop.
//! A zapper core, in a loop, takes `A`'s frames twice back to back while `A` stays mapped (a
//! replacing `MAP_FIXED` mmap, the zap munmap shares, then `MADV_DONTNEED`); after the first
//! the writer's access faults `A` back in page by page, with the pages before the missing one
//! already translated, and the second zap often lands between two of those windows. The zapper
//! then maps a fresh region `B` that takes every frame the zaps freed (its frame cache is LIFO
//! and, with `frame_batch(64)`, keeps them all), reads it, waits (a bounded progress handshake,
//! not a sleep) until the write that ran during the zaps has returned, and reads `B` again:
//! fresh anonymous memory must read zero, every byte, every time. A write that kept a
//! translation across the flush has written `0xA5` into `B`.
//!
//! Mutation caught, every run: in `handle.rs` `access_pages`, not clearing `pages` when
//! `begin_access` reports a flush (50 of 50 runs failed, within the first 1200 iterations; 40 of
//! 40 under `oversubscribed`, within the first 200).
//!
//! The run is bounded as `protocol/bounded_run.rs` describes (at most `ITERATIONS` zaps).
//! It runs under both shootdown policies (broadcast, and targeted through the builder's testing
//! hook): a multi-page access keeps translations only from walks that recorded it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[path = "protocol/bounded_run.rs"]
mod bounded_run;
use bounded_run::{finish, Budget, StopOnDrop};

use aspace_vm::{AddressSpace, Advice, Builder, CoreHandle, Design, MapFlags, Prot, PAGE_SIZE};

const PAGES: u64 = 16;
const LEN: u64 = PAGES * PAGE_SIZE;
/// Pages of `B`: enough to take every frame the two zaps of an iteration freed (the zapper's
/// frame cache is LIFO and holds them all: `frame_batch(64)`).
const B_PAGES: u64 = 2 * PAGES;
const B_LEN: u64 = B_PAGES * PAGE_SIZE;
const A: u64 = 0x1000_0000;
const ITERATIONS: u64 = 4000;
const PATTERN: u8 = 0xA5;

#[test]
fn a_multi_page_write_never_keeps_a_translation_across_a_flush() {
    multi_page_writer_versus_zapper(AddressSpace::builder().design(Design::Coarse));
}

#[test]
fn a_multi_page_write_never_keeps_a_translation_across_a_flush_with_targeted_shootdown() {
    multi_page_writer_versus_zapper(
        AddressSpace::builder()
            .design(Design::Coarse)
            .targeted_shootdown_for_testing(),
    );
}

/// The test on a space of `builder`'s shootdown policy.
fn multi_page_writer_versus_zapper(builder: Builder) {
    let space = builder
        .memory(1024 * PAGE_SIZE)
        .frame_batch(64)
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
            let buf = vec![PATTERN; LEN as usize];
            while !stop.load(Ordering::Relaxed) {
                // One access over all of A's pages.
                writer.write(A, &buf).expect("A stays mapped and writable");
                // Release: pairs with the zapper's Acquire load (this write's bytes, wherever
                // they went, precede the zapper's check of B).
                writes.fetch_add(1, Ordering::Release);
            }
        });
        let zapper = s.spawn(move || {
            let _stop = StopOnDrop(stop);
            let mut buf = vec![0u8; B_LEN as usize];
            let mut zaps = 0u64;
            loop {
                if budget.done(zaps, writes) {
                    break Ok(zaps);
                }
                // Acquire: pairs with the writer's Release increment.
                let before = writes.load(Ordering::Acquire);
                // Both ways to take A's frames while A stays mapped, back to back: a replacing
                // `MAP_FIXED` mmap (the zap shared with munmap), then `MADV_DONTNEED`, which
                // lands while the writer is faulting A back in page by page.
                zapper
                    .mmap(A, LEN, rw, pa | MapFlags::FIXED)
                    .expect("replacing mmap over A");
                zapper
                    .madvise(A, LEN, Advice::DONTNEED)
                    .expect("DONTNEED over A");
                zaps += 1;
                // B takes the frames A just gave up (and keeps them until it is checked).
                let b = zapper.mmap(0, B_LEN, rw, pa).expect("map B");
                let mut bad = check_zero(&mut zapper, b, &mut buf, zaps, 0);
                // Wait (boundedly: a progress handshake, not a sleep) until the write that was
                // running during the zaps has returned, so that a stale translation it kept has
                // been written through before B is read again.
                for _ in 0..1_000_000 {
                    if writes.load(Ordering::Acquire) >= before + 2 {
                        break;
                    }
                    std::thread::yield_now();
                }
                for round in 1..3 {
                    if bad.is_none() {
                        bad = check_zero(&mut zapper, b, &mut buf, zaps, round);
                    }
                }
                zapper.munmap(b, B_LEN).expect("unmap B");
                if let Some(msg) = bad {
                    break Err(msg);
                }
            }
        });
        zapper.join().expect("zapper panicked")
    });
    finish(&space, zaps, writes, A, LEN);
}

/// Reads B (fresh anonymous memory): `Some(message)` if any byte is not zero.
fn check_zero(
    core: &mut CoreHandle,
    b: u64,
    buf: &mut [u8],
    zaps: u64,
    round: u32,
) -> Option<String> {
    core.read(b, buf).expect("B reads");
    buf.iter().position(|&x| x != 0).map(|i| {
        format!(
            "zap {zaps}, read {round} of a fresh mapping: byte {i} (page {}) is {:#x}: a \
             multi-page write kept a translation across a flush",
            i as u64 / PAGE_SIZE,
            buf[i]
        )
    })
}
