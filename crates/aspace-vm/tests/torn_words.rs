//! Concurrent reads and writes of one page see whole aligned 8-byte words (README, hazards):
//! every word a reader gets is one a writer stored in full, never a mix of two stores' bytes.
//!
//! Regression test of the torn words the security test saw under CPU oversubscription while
//! frames were copied with plain `memcpy`: a writer core stores whole-page patterns A and B
//! alternately (and, between them, single words and unaligned runs of the same values), and
//! reader cores copy the page out concurrently; every word read must be 0 (the fresh page), A or
//! B. Bounded: stops after a fixed number of reads; more cores than CPUs by default.

#![cfg(not(loom))]

use aspace_vm::{AddressSpace, Design, MapFlags, Prot, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, Ordering};

const A: u64 = 0x0102_0304_0506_0708;
const B: u64 = 0xf0e0_d0c0_b0a0_9080;
const READS_PER_READER: usize = 30_000;
const READERS: usize = 3;

fn page_of(w: u64) -> Vec<u8> {
    w.to_ne_bytes()
        .iter()
        .copied()
        .cycle()
        .take(PAGE_SIZE as usize)
        .collect()
}

#[test]
fn concurrent_readers_see_whole_words_of_a_concurrent_writer() {
    let space = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(1 << 20)
        .max_cores(READERS + 1)
        .build()
        .unwrap();
    let mut w = space.attach().unwrap();
    let page = w
        .mmap(0, PAGE_SIZE, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
        .unwrap();
    let (pa, pb) = (page_of(A), page_of(B));
    let done = AtomicBool::new(false);
    let readers: Vec<_> = (0..READERS).map(|_| space.attach().unwrap()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = readers
            .into_iter()
            .map(|mut r| {
                let done = &done;
                s.spawn(move || {
                    let mut buf = vec![0u8; PAGE_SIZE as usize];
                    for _ in 0..READS_PER_READER {
                        r.read(page, &mut buf).unwrap();
                        for (i, w) in buf.chunks_exact(8).enumerate() {
                            let w = u64::from_ne_bytes(w.try_into().unwrap());
                            assert!(
                                w == 0 || w == A || w == B,
                                "word {i} is {w:#018x}: a mix of two stores (torn)"
                            );
                        }
                    }
                    done.store(true, Ordering::Relaxed);
                })
            })
            .collect();
        let mut i = 0u64;
        while !done.load(Ordering::Relaxed) {
            let (p, v) = if i % 2 == 0 { (&pa, A) } else { (&pb, B) };
            w.write(page, p).unwrap();
            // One word, then a run starting at an odd word: stores of whole aligned words too.
            let k = (i * 8 % PAGE_SIZE) & !7;
            w.write(page + k, &v.to_ne_bytes()).unwrap();
            w.write(page + 8 * 3, &p[..8 * 17]).unwrap();
            i += 1;
        }
        for h in handles {
            h.join().unwrap();
        }
    });
}
