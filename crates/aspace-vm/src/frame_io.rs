//! Moving bytes between frames and callers' buffers: in aligned 64-bit atomic words (`Relaxed`),
//! never with plain `memcpy`.
//!
//! Frames are shared memory: two cores may read and write the same page at once through their
//! own translations, as threads do on real RAM. With plain copies such a pair is a data race,
//! undefined behaviour in Rust's memory model, and in practice a reader sees torn words (one
//! byte, or the high half, of a word being stored; the security test caught this under CPU
//! oversubscription). Here every access to frame memory is an atomic access of the aligned
//! 8-byte word that contains it, the rule rust-vmm's `vm-memory` follows for guest memory:
//!
//! - a whole aligned word inside the copied range is one `AtomicU64` load or store;
//! - a partial word at either end is read by loading the whole word and written by a
//!   compare-exchange loop that replaces only the caller's bytes, so the bytes around them,
//!   which another core may be writing, are never overwritten with stale values.
//!
//! **What a concurrent reader observes**: every aligned 8-byte word of a page is either its
//! value before a concurrent write or after it (per word; a multi-word write is not atomic as a
//! whole, exactly as on x86 hardware). Only one access size is ever used on frame memory, so no
//! mixed-size atomic accesses race. `Relaxed` suffices: these accesses publish nothing; the
//! ordering of a frame's contents with its translation comes from the page-table entry
//! (`Release` fill, `Acquire` walk) and the shootdown protocol.
//!
//! Not for: zeroing a frame (done when no translation to it exists, `frames.rs`).

use crate::sync::stat::AtomicU64;
use std::sync::atomic::Ordering;

/// Bytes per word.
const WORD: usize = 8;

/// The aligned word containing `p`, and `p`'s offset in it.
///
/// # Safety
/// The word containing `p` lies in frame memory the caller may access (a frame translated in
/// the current access window; frames are page aligned, so the word is inside the frame) and is
/// only ever accessed atomically by others.
unsafe fn word_of<'a>(p: *const u8) -> (&'a AtomicU64, usize) {
    let off = p as usize % WORD;
    // SAFETY: the caller's contract: the aligned word is in accessible frame memory, accessed
    // only atomically (8-byte aligned by construction).
    let w = unsafe { AtomicU64::from_ptr(p.sub(off) as *mut u64) };
    (w, off)
}

/// Copies `dst.len()` bytes of frame memory starting at `src` into `dst`.
///
/// # Safety
/// `src .. src + dst.len()` lies inside one frame the caller may access (translated in its
/// current access window), and every other access to that frame goes through this module.
pub(crate) unsafe fn read_from_frame(src: *const u8, dst: &mut [u8]) {
    let mut i = 0;
    while i < dst.len() {
        // SAFETY: `src + i` is inside the caller's frame range (i < len).
        let (w, off) = unsafe { word_of(src.add(i)) };
        let n = (WORD - off).min(dst.len() - i);
        let bytes = w.load(Ordering::Relaxed).to_ne_bytes();
        dst[i..i + n].copy_from_slice(&bytes[off..off + n]);
        i += n;
        if off + n == WORD {
            // Aligned now: the whole words in a tight loop of constant-size copies (one load
            // and one store each), not a `memcpy` call per word (which made a 4 KiB read 512
            // calls: `file-read`'s profile, 2026-11-28).
            let words = (dst.len() - i) / WORD;
            for (k, out) in dst[i..i + words * WORD].chunks_exact_mut(WORD).enumerate() {
                // SAFETY: `src + i` is 8-aligned here and the `words` words from it lie inside
                // the caller's frame range; accessed atomically as every access here.
                let v = unsafe { load_word(src.add(i + k * WORD)) };
                out.copy_from_slice(&v.to_ne_bytes());
            }
            i += words * WORD;
        }
    }
}

/// Copies `src` to frame memory starting at `dst`.
///
/// # Safety
/// As for [`read_from_frame`], and the frame's translation allows writes.
pub(crate) unsafe fn write_to_frame(src: &[u8], dst: *mut u8) {
    let mut i = 0;
    while i < src.len() {
        // SAFETY: `dst + i` is inside the caller's frame range (i < len).
        let (w, off) = unsafe { word_of(dst.add(i)) };
        let n = (WORD - off).min(src.len() - i);
        if n == WORD {
            let mut bytes = [0u8; WORD];
            bytes.copy_from_slice(&src[i..i + WORD]);
            w.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
        } else {
            // A partial word: replace only our bytes, keep the others' current values.
            let mut cur = w.load(Ordering::Relaxed);
            loop {
                let mut bytes = cur.to_ne_bytes();
                bytes[off..off + n].copy_from_slice(&src[i..i + n]);
                match w.compare_exchange_weak(
                    cur,
                    u64::from_ne_bytes(bytes),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => cur = now,
                }
            }
        }
        i += n;
    }
}

/// Loads the aligned 8-byte word at `p` (one atomic load, as every access here).
///
/// # Safety
/// `p` is 8-byte aligned and lies in frame memory the caller may read (a frame translated in
/// its current access window); every other access to that frame goes through this module.
#[inline(always)]
pub(crate) unsafe fn load_word(p: *const u8) -> u64 {
    debug_assert!(p as usize % WORD == 0);
    // SAFETY: the caller's contract (aligned, accessible, accessed only atomically).
    unsafe { AtomicU64::from_ptr(p as *mut u64) }.load(Ordering::Relaxed)
}

/// Stores `v` into the aligned 8-byte word at `p` (one atomic store).
///
/// # Safety
/// As for [`load_word`], and the frame's translation allows writes.
#[inline(always)]
pub(crate) unsafe fn store_word(p: *mut u8, v: u64) {
    debug_assert!(p as usize % WORD == 0);
    // SAFETY: the caller's contract (aligned, accessible, writable, accessed only atomically).
    unsafe { AtomicU64::from_ptr(p as *mut u64) }.store(v, Ordering::Relaxed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A 4 KiB, 8-byte aligned buffer standing in for a frame.
    fn frame() -> Box<[u64; 512]> {
        Box::new([0; 512])
    }

    #[test]
    fn copies_round_trip_at_every_alignment_and_length() {
        let mut f = frame();
        let base = f.as_mut_ptr() as *mut u8;
        for start in 0..17usize {
            for len in 0..40usize {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + start + 1) as u8).collect();
                // Fill with a known background so we can check neighbours are untouched.
                f.iter_mut().for_each(|w| *w = 0xa5a5_a5a5_a5a5_a5a5);
                // SAFETY: start + len <= 57 < 4096: inside the buffer, accessed only here.
                unsafe { write_to_frame(&data, base.add(start)) };
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { read_from_frame(base.add(start), &mut back) };
                assert_eq!(back, data, "start {start} len {len}");
                let mut all = vec![0u8; 64];
                // SAFETY: the first 64 bytes of the buffer.
                unsafe { read_from_frame(base, &mut all) };
                for (i, &b) in all.iter().enumerate() {
                    if i < start || i >= start + len {
                        assert_eq!(
                            b, 0xa5,
                            "byte {i} outside the write (start {start} len {len})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_whole_page_round_trips() {
        let mut f = frame();
        let base = f.as_mut_ptr() as *mut u8;
        let data: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
        // SAFETY: the whole buffer.
        unsafe { write_to_frame(&data, base) };
        let mut back = vec![0u8; 4096];
        // SAFETY: the whole buffer.
        unsafe { read_from_frame(base, &mut back) };
        assert_eq!(back, data);
    }

    /// Under Miri (`MIRIFLAGS=-Zmiri-permissive-provenance cargo +nightly miri test -p aspace-vm
    /// --lib frame_io::tests::a_reader`) this is the
    /// regression test of the torn words: with plain `copy_nonoverlapping` copies Miri reports a
    /// data race here (undefined behaviour); with word atomics it does not, and every word read
    /// is whole. Natively it checks the words.
    #[test]
    fn a_reader_racing_a_writer_sees_whole_words_and_is_no_data_race() {
        let mut f = frame();
        let base = f.as_mut_ptr() as usize;
        const A: u64 = 0x0102_0304_0506_0708;
        let pattern: Vec<u8> = A.to_ne_bytes().iter().copied().cycle().take(64).collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: the first 64 bytes of the buffer, accessed only through this module.
                unsafe { write_to_frame(&pattern, base as *mut u8) };
            });
            let mut back = [0u8; 64];
            // SAFETY: as above.
            unsafe { read_from_frame(base as *const u8, &mut back) };
            for w in back.chunks_exact(8) {
                let w = u64::from_ne_bytes(w.try_into().unwrap());
                assert!(w == 0 || w == A, "torn word {w:#x}");
            }
        });
    }

    #[test]
    fn concurrent_partial_writes_to_one_word_keep_each_others_bytes() {
        // Two threads write alternating bytes of the same words; plain read-modify-write of the
        // whole word would lose some of them.
        let mut f = frame();
        let base = f.as_mut_ptr() as usize;
        std::thread::scope(|s| {
            for t in 0..2usize {
                s.spawn(move || {
                    for round in 0..2000u32 {
                        for i in (t..64).step_by(2) {
                            let v = [(round as u8).wrapping_add(i as u8) | 1];
                            // SAFETY: byte i < 64 of the buffer, accessed only through this
                            // module by both threads.
                            unsafe { write_to_frame(&v, (base + i) as *mut u8) };
                        }
                    }
                });
            }
        });
        let mut all = [0u8; 64];
        // SAFETY: the first 64 bytes; the writers have joined.
        unsafe { read_from_frame(base as *const u8, &mut all) };
        for (i, &b) in all.iter().enumerate() {
            assert_eq!(b, (1999u32 as u8).wrapping_add(i as u8) | 1, "byte {i}");
        }
    }
}
