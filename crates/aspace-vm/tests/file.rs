//! `File` and `Memory` (memfd-like files and their page cache): Linux's semantics for reads,
//! writes, holes, truncation and extension, the errno of each refusal, frame accounting, and
//! reads racing truncations and frame reuse.

use aspace_vm::{File, Memory, VmError, MAX_FILE_SIZE};
use std::sync::atomic::{AtomicBool, Ordering};

const P: u64 = 4096;

fn memory(pages: u64) -> Memory {
    Memory::new(pages * P).unwrap()
}

fn read(f: &File, offset: u64, n: usize) -> Vec<u8> {
    let mut buf = vec![0xEE; n];
    let got = f.read_at(offset, &mut buf);
    buf.truncate(got);
    buf
}

#[test]
fn a_new_file_is_a_hole_of_its_length() {
    let m = memory(16);
    let f = File::create(&m, 3 * P + 10).unwrap();
    assert_eq!(f.len(), 3 * P + 10);
    assert_eq!(read(&f, 0, 4 * P as usize), vec![0; 3 * P as usize + 10]);
    assert_eq!(f.cached_pages(), 0, "holes take no page");
    assert_eq!(m.frames_in_use(), 0);
    assert_eq!(f.id(), 1);
    assert_eq!(
        File::create(&m, 0).unwrap().id(),
        2,
        "files are numbered in order"
    );
}

#[test]
fn writes_read_back_across_pages_and_extend_the_file() {
    let m = memory(16);
    let f = File::create(&m, 0).unwrap();
    let data: Vec<u8> = (0..3 * P as usize).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(f.write_at(100, &data).unwrap(), data.len());
    assert_eq!(
        f.len(),
        100 + data.len() as u64,
        "a write past the end extends"
    );
    assert_eq!(f.cached_pages(), 4, "bytes 100..12388 touch pages 0..=3");
    assert_eq!(m.frames_in_use(), 4);
    let back = read(&f, 0, 8 * P as usize);
    assert_eq!(back.len() as u64, f.len(), "a read stops at the end");
    assert_eq!(
        &back[..100],
        &[0; 100][..],
        "the hole before the write reads as zeros"
    );
    assert_eq!(&back[100..], &data[..]);
    assert_eq!(
        read(&f, f.len(), 10),
        Vec::<u8>::new(),
        "at the end: 0 bytes"
    );
    assert_eq!(read(&f, u64::MAX, 10), Vec::<u8>::new());
    // An overwrite inside the file keeps the length and takes no page.
    assert_eq!(f.write_at(P - 2, &[1, 2, 3, 4]).unwrap(), 4);
    assert_eq!(read(&f, P - 2, 4), vec![1, 2, 3, 4]);
    assert_eq!(f.len(), 100 + data.len() as u64);
    assert_eq!(m.frames_in_use(), 4);
    // A write far past the end leaves a hole that takes no page.
    f.write_at(100 * P, b"end").unwrap();
    assert_eq!(f.len(), 100 * P + 3);
    assert_eq!(f.cached_pages(), 5);
    assert_eq!(read(&f, 50 * P, 8), vec![0; 8]);
}

#[test]
fn clones_are_one_file_and_files_do_not_share_pages() {
    let m = memory(16);
    let a = File::create(&m, 0).unwrap();
    let b = File::create(&m, 0).unwrap();
    let a2 = a.clone();
    a.write_at(0, b"aaaa").unwrap();
    b.write_at(0, b"bbbb").unwrap();
    assert_eq!(read(&a2, 0, 4), b"aaaa");
    assert_eq!(read(&b, 0, 4), b"bbbb");
    assert!(File::ptr_eq(&a, &a2) && !File::ptr_eq(&a, &b));
    assert!(Memory::ptr_eq(a.memory(), &m));
    assert_eq!(m.cached_pages(), 2);
}

#[test]
fn shrinking_frees_the_pages_past_the_end_and_zeroes_the_last_ones_tail() {
    let m = memory(16);
    let f = File::create(&m, 0).unwrap();
    f.write_at(0, &vec![0xAA; 4 * P as usize]).unwrap();
    assert_eq!(m.frames_in_use(), 4);
    f.set_len(P + 904).unwrap();
    assert_eq!(f.len(), P + 904);
    assert_eq!(f.cached_pages(), 2, "pages 2 and 3 are gone");
    assert_eq!(m.frames_in_use(), 2, "their frames went back to the memory");
    assert_eq!(m.cached_pages(), 2);
    // Extending again: the tail of page 1 and the pages past it read as zeros (Linux zeroes the
    // partial page at truncation).
    f.set_len(4 * P).unwrap();
    let back = read(&f, 0, 4 * P as usize);
    assert!(back[..(P + 904) as usize].iter().all(|&b| b == 0xAA));
    assert!(back[(P + 904) as usize..].iter().all(|&b| b == 0));
    assert_eq!(f.cached_pages(), 2, "an extension is a hole");
    f.set_len(0).unwrap();
    assert_eq!(
        (f.cached_pages(), m.frames_in_use(), m.cached_pages()),
        (0, 0, 0)
    );
    assert_eq!(read(&f, 0, 10), Vec::<u8>::new());
}

#[test]
fn the_last_handle_frees_the_files_pages() {
    let m = memory(16);
    let f = File::create(&m, 0).unwrap();
    f.write_at(0, &vec![1; 3 * P as usize]).unwrap();
    let g = f.clone();
    drop(f);
    assert_eq!(m.frames_in_use(), 3, "a handle is left");
    drop(g);
    assert_eq!((m.frames_in_use(), m.cached_pages()), (0, 0));
}

#[test]
fn sizes_past_the_largest_file_are_efbig_and_change_nothing() {
    let m = memory(16);
    let e = File::create(&m, MAX_FILE_SIZE + 1).unwrap_err();
    assert_eq!((e.errno(), e), (libc::EFBIG, VmError::FileTooLarge));
    let f = File::create(&m, MAX_FILE_SIZE).unwrap();
    assert_eq!(f.len(), MAX_FILE_SIZE);
    assert_eq!(f.set_len(MAX_FILE_SIZE + 1), Err(VmError::FileTooLarge));
    assert_eq!(f.write_at(MAX_FILE_SIZE, b"x"), Err(VmError::FileTooLarge));
    assert_eq!(f.write_at(u64::MAX, b"x"), Err(VmError::FileTooLarge));
    assert_eq!(f.len(), MAX_FILE_SIZE);
    // A write crossing the limit writes up to it.
    assert_eq!(f.write_at(MAX_FILE_SIZE - 2, b"abcd").unwrap(), 2);
    assert_eq!(read(&f, MAX_FILE_SIZE - 2, 4), b"ab");
    assert_eq!(f.len(), MAX_FILE_SIZE);
    assert_eq!(f.write_at(5, b""), Ok(0));
}

#[test]
fn a_full_memory_is_enospc_after_a_short_write() {
    let m = memory(4);
    let f = File::create(&m, 0).unwrap();
    let n = f.write_at(0, &vec![9; 5 * P as usize]).unwrap();
    assert_eq!(
        n,
        4 * P as usize,
        "a short write: the bytes that had a page"
    );
    assert_eq!(f.len(), 4 * P);
    let e = f.write_at(4 * P, b"x").unwrap_err();
    assert_eq!((e.errno(), e), (libc::ENOSPC, VmError::NoSpace));
    assert_eq!(f.len(), 4 * P, "the refused write changed nothing");
    // Overwrites need no new page.
    assert_eq!(f.write_at(10, b"ok").unwrap(), 2);
    f.set_len(P).unwrap();
    assert_eq!(
        f.write_at(P, &vec![3; 3 * P as usize]).unwrap(),
        3 * P as usize
    );
}

/// Reads of file `a`'s last page race its truncation and rewrite (length 2 pages -> 1 -> 2),
/// and between the two, file `b` takes the frame that `a` freed (the I/O frames are a LIFO) and
/// fills it with its own pattern, keeping it until `a` has its second page again:
/// a read must return `a`'s bytes or zeros, never `b`'s, which it would copy if the truncated
/// frame were freed and reused while the read still copied from it. Fails with `set_len`'s
/// wait for the page cache's grace period removed (`PageCache::synchronize` in
/// `release_pages`).
#[test]
fn a_read_racing_truncation_never_sees_another_files_bytes() {
    const ROUNDS: usize = 20_000;
    let m = memory(16);
    let a = File::create(&m, 0).unwrap();
    let b = File::create(&m, 0).unwrap();
    a.write_at(0, &vec![0xAA; 2 * P as usize]).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut buf = vec![0u8; P as usize];
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) || reads == 0 {
                let n = a.read_at(P, &mut buf);
                for (i, &byte) in buf[..n].iter().enumerate() {
                    assert!(byte == 0xAA || byte == 0, "byte {i} of a read: {byte:#x}");
                }
                reads += 1;
            }
        });
        let ours = vec![0xAA; P as usize];
        let theirs = vec![0xBB; P as usize];
        for _ in 0..ROUNDS {
            if reader.is_finished() {
                break;
            }
            a.set_len(P).unwrap();
            b.write_at(0, &theirs).unwrap();
            a.write_at(P, &ours).unwrap();
            b.set_len(0).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    a.set_len(0).unwrap();
    assert_eq!((a.len(), b.len()), (0, 0));
    assert_eq!(
        (m.frames_in_use(), m.cached_pages()),
        (0, 0),
        "no frame leaked"
    );
}

/// Writers of different pages and readers of one file: every page ends as its last writer left
/// it and the accounting is exact.
#[test]
fn concurrent_writers_of_one_file_each_keep_their_pages() {
    let m = memory(64);
    let f = File::create(&m, 0).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let f = f.clone();
            s.spawn(move || {
                for round in 0..200u64 {
                    let page = u64::from(t) * 8 + round % 8;
                    f.write_at(page * P, &vec![t + 1; P as usize]).unwrap();
                }
            });
        }
    });
    assert_eq!(f.len(), 32 * P);
    assert_eq!(f.cached_pages(), 32);
    assert_eq!(m.frames_in_use(), 32);
    for page in 0..32u64 {
        let want = (page / 8) as u8 + 1;
        assert!(
            read(&f, page * P, P as usize).iter().all(|&b| b == want),
            "page {page}"
        );
    }
}
