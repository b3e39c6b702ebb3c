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
    let got = f.read_at(offset, &mut buf).unwrap();
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
    assert_eq!(
        f.read_at(u64::MAX, &mut [0; 10]).unwrap_err().errno(),
        libc::EINVAL,
        "a negative offset to pread"
    );
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
fn sizes_past_the_largest_file_are_refused_and_change_nothing() {
    let m = memory(16);
    let e = File::create(&m, MAX_FILE_SIZE + 1).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "a negative length to ftruncate");
    let f = File::create(&m, MAX_FILE_SIZE).unwrap();
    assert_eq!(f.len(), MAX_FILE_SIZE);
    assert_eq!(
        f.set_len(MAX_FILE_SIZE + 1).unwrap_err().errno(),
        libc::EINVAL
    );
    let e = f.write_at(MAX_FILE_SIZE, b"x").unwrap_err();
    assert_eq!((e.errno(), e), (libc::EFBIG, VmError::FileTooLarge));
    assert_eq!(
        f.write_at(u64::MAX, b"x").unwrap_err().errno(),
        libc::EINVAL
    );
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
                let n = a.read_at(P, &mut buf).unwrap();
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

/// Runs `f(round)` on `threads` threads until `rounds` rounds or 3 seconds, whichever first.
fn race(threads: usize, rounds: u64, f: impl Fn(usize, u64) + Sync) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || {
                for round in 0..rounds {
                    if round % 64 == 0 && std::time::Instant::now() > deadline {
                        break;
                    }
                    f(t, round);
                }
            });
        }
    });
}

/// `set_len` takes the truncated pages out of the file's set under the file's lock but removes
/// them from the page cache only after dropping it (`release_pages`): a write of the same page
/// in that window finds the index absent, takes a new frame, and its `insert_unique` fails
/// silently (the old page is still cached; `debug_assert` only), so the new frame belongs to
/// nobody: the bytes written are lost and the frame never comes back. Every frame must be back
/// once the file is gone.
#[test]
fn a_write_racing_a_truncation_of_its_page_leaks_no_frame() {
    // The truncation removes pages 1..=LAST from the cache in index order, so the racing
    // writes of page LAST have the whole loop as their window.
    const LAST: u64 = 128;
    let m = memory(1024);
    let a = File::create(&m, 0).unwrap();
    let ours = vec![0xAA; P as usize];
    let fill = vec![0x11; (LAST * P) as usize];
    race(3, 200_000, |t, _| {
        if t == 0 {
            let _ = a.write_at(P, &fill);
            a.set_len(P).unwrap();
        } else {
            let _ = a.write_at(LAST * P, &ours);
        }
    });
    // Every page the file's set holds is in the cache, and nothing else.
    assert_eq!(
        a.cached_pages(),
        m.cached_pages(),
        "the file's set of pages and the page cache disagree"
    );
    drop(a);
    assert_eq!(
        (m.frames_in_use(), m.cached_pages()),
        (0, 0),
        "frames leaked by writes that raced truncations"
    );
}

/// The same window, worse: a second write of the page finds the index in the file's set, looks
/// it up in the cache and gets the OLD frame, which the truncation is about to free; the write
/// copies into it outside any read section, so the truncation's grace period does not wait for
/// it, and the frame may already belong to another file. File `b`'s owner writes, checks and
/// frees its one page in a loop (the I/O frames are a LIFO, so `b` takes the frames `a`
/// frees): it must never read `a`'s bytes.
#[test]
fn a_write_racing_a_truncation_never_writes_into_another_files_page() {
    const LAST: u64 = 128;
    let m = memory(1024);
    let a = File::create(&m, 0).unwrap();
    let b = File::create(&m, 0).unwrap();
    let ours = vec![0xAA; P as usize];
    let theirs = vec![0xBB; P as usize];
    let fill = vec![0x11; (LAST * P) as usize];
    let foreign = std::sync::atomic::AtomicU64::new(0);
    race(6, 200_000, |t, _| match t {
        0 => {
            let _ = a.write_at(P, &fill);
            a.set_len(P).unwrap();
        }
        1..=4 => {
            let _ = a.write_at(LAST * P, &ours);
        }
        _ => {
            // A page of `b` that is a hole but its first byte: its frame must read as zeros
            // past that byte, whenever `a`'s stray write landed in it (before or after `b`
            // took it).
            b.set_len(P).unwrap();
            if b.write_at(0, &theirs[..1]).is_err() {
                return;
            }
            let mut buf = vec![0u8; P as usize];
            let n = b.read_at(0, &mut buf).unwrap();
            if buf[0] != 0xBB || buf[1..n].iter().any(|&x| x != 0) {
                foreign.fetch_add(1, Ordering::Relaxed);
            }
            b.set_len(0).unwrap();
        }
    });
    assert_eq!(
        foreign.load(Ordering::Relaxed),
        0,
        "reads of b saw bytes that a's writes put into b's page"
    );
}

/// Many threads create the first files of a fresh memory at once (the page cache is made by
/// the first `File::create`, `OnceLock`): every create succeeds, numbers are unique, and
/// every file works.
#[test]
fn first_creates_from_many_threads_share_one_page_cache() {
    for _ in 0..20 {
        let m = memory(64);
        let files: Vec<File> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| File::create(&m, 0).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut ids: Vec<u64> = files.iter().map(File::id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=8).collect::<Vec<_>>());
        for (i, f) in files.iter().enumerate() {
            f.write_at(0, &[i as u8 + 1; 10]).unwrap();
        }
        for (i, f) in files.iter().enumerate() {
            assert_eq!(read(f, 0, 10), vec![i as u8 + 1; 10]);
        }
        assert_eq!(m.cached_pages(), 8);
        drop(files);
        assert_eq!(m.frames_in_use(), 0);
    }
}

/// Offsets and lengths at the edges, and a memory of one frame: no panic, Linux's answers.
#[test]
fn edge_offsets_and_a_one_frame_memory_do_not_panic() {
    let m = memory(1);
    let f = File::create(&m, MAX_FILE_SIZE).unwrap();
    let mut big = vec![0xEE; 3 * P as usize + 7];
    assert_eq!(f.read_at(MAX_FILE_SIZE - 5, &mut big), Ok(5));
    assert!(matches!(
        f.read_at(u64::MAX, &mut big),
        Err(VmError::InvalidArgument(_))
    ));
    assert_eq!(f.read_at(MAX_FILE_SIZE, &mut big), Ok(0));
    assert_eq!(f.write_at(MAX_FILE_SIZE - 1, b"xy").unwrap(), 1);
    assert_eq!(f.write_at(MAX_FILE_SIZE, b"x"), Err(VmError::FileTooLarge));
    assert!(matches!(
        f.write_at(u64::MAX, b"x"),
        Err(VmError::InvalidArgument(_))
    ));
    assert_eq!(
        f.write_at(0, b"x"),
        Err(VmError::NoSpace),
        "the one frame is taken"
    );
    assert!(matches!(
        f.set_len(u64::MAX),
        Err(VmError::InvalidArgument(_))
    ));
    f.set_len(MAX_FILE_SIZE - P).unwrap();
    assert_eq!(m.frames_in_use(), 0, "the last page went with the shrink");
    assert_eq!(
        f.write_at(1, &vec![5; 2 * P as usize]).unwrap(),
        P as usize - 1
    );
    f.set_len(3).unwrap();
    f.set_len(2 * P).unwrap();
    assert_eq!(read(&f, 0, 8), vec![0, 5, 5, 0, 0, 0, 0, 0]);
    drop(f);
    assert_eq!(m.frames_in_use(), 0);
}

/// Offsets and lengths of 2^63 and more are negative as Linux's `loff_t`: `pwrite64` and
/// `ftruncate` refuse them with `EINVAL` (`ksys_pwrite64`, `do_sys_ftruncate`: `pos < 0`,
/// `length < 0`) before any `EFBIG` check; `EFBIG` is for `MAX_LFS_FILESIZE` itself (2^63 - 1).
/// (`pread64` is `EINVAL` too.)
#[test]
fn offsets_of_2_pow_63_and_more_are_einval_like_a_negative_loff_t() {
    let m = memory(4);
    let f = File::create(&m, 0).unwrap();
    assert_eq!(
        f.write_at(MAX_FILE_SIZE, b"x").unwrap_err().errno(),
        libc::EFBIG
    );
    assert_eq!(f.set_len(MAX_FILE_SIZE), Ok(()));
    for bad in [1u64 << 63, u64::MAX] {
        assert_eq!(
            f.write_at(bad, b"x").unwrap_err().errno(),
            libc::EINVAL,
            "pwrite at {bad:#x}"
        );
        assert_eq!(
            f.set_len(bad).unwrap_err().errno(),
            libc::EINVAL,
            "ftruncate to {bad:#x}"
        );
    }
}
