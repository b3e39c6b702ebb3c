//! Tests of access sessions on every design: the typed and slice accesses against the
//! per-call path, faults inside a session, shootdowns taken at accesses and polls, leaked
//! sessions, and page slices.

use crate::types::{Access, MapFlags, Prot, PAGE_SIZE};
use crate::{AddressSpace, Design, Fault, SliceError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

fn space(design: Design) -> AddressSpace {
    AddressSpace::builder()
        .design(design)
        .memory(64 << 20)
        .build()
        .unwrap()
}

const RW: Prot = Prot::READ_WRITE;
const ANON: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

#[test]
fn session_accesses_agree_with_the_per_call_path_on_every_design() {
    for &d in Design::ALL {
        let s = space(d);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, 4 * PAGE_SIZE, RW, ANON).unwrap();
        {
            let mut se = h.session().unwrap();
            se.write_u64(a, 0x1122_3344_5566_7788).unwrap();
            se.write_u8(a + 9, 0xab).unwrap();
            se.write_u16(a + 11, 0xcdef).unwrap();
            se.write_u32(a + 13, 0x0102_0304).unwrap(); // spans two words
            se.write_u64(a + PAGE_SIZE - 4, u64::MAX - 1).unwrap(); // spans two pages
            let big: Vec<u8> = (0..3 * PAGE_SIZE as usize).map(|i| i as u8).collect();
            se.write(a + PAGE_SIZE + 100, &big[..2 * PAGE_SIZE as usize])
                .unwrap();
            assert_eq!(se.read_u64(a).unwrap(), 0x1122_3344_5566_7788, "{d:?}");
            assert_eq!(se.read_u8(a + 9).unwrap(), 0xab);
            assert_eq!(se.read_u16(a + 11).unwrap(), 0xcdef);
            assert_eq!(se.read_u32(a + 13).unwrap(), 0x0102_0304);
            assert_eq!(se.read_u64(a + PAGE_SIZE - 4).unwrap(), u64::MAX - 1);
            let mut back = vec![0; 2 * PAGE_SIZE as usize];
            se.read(a + PAGE_SIZE + 100, &mut back).unwrap();
            assert_eq!(back, &big[..2 * PAGE_SIZE as usize]);
        }
        let mut b = [0u8; 8];
        h.read(a, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), 0x1122_3344_5566_7788, "{d:?}");
        h.read(a + PAGE_SIZE - 4, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), u64::MAX - 1);
    }
}

#[test]
fn faults_inside_a_session_are_reported_and_the_session_goes_on() {
    for &d in Design::ALL {
        let s = space(d);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, 2 * PAGE_SIZE, RW, ANON).unwrap();
        h.mprotect(a + PAGE_SIZE, PAGE_SIZE, Prot::READ).unwrap();
        let mut se = h.session().unwrap();
        assert_eq!(
            se.read_u64(a + 2 * PAGE_SIZE),
            Err(Fault::Unmapped {
                addr: a + 2 * PAGE_SIZE
            }),
            "{d:?}"
        );
        assert_eq!(
            se.write_u64(a + PAGE_SIZE, 1),
            Err(Fault::Protection {
                addr: a + PAGE_SIZE
            })
        );
        // A write spanning into the read-only page writes nothing.
        assert!(se.write(a + PAGE_SIZE - 4, &[9; 8]).is_err());
        assert_eq!(se.read_u32(a + PAGE_SIZE - 4).unwrap(), 0);
        assert_eq!(se.read_u64(a + PAGE_SIZE).unwrap(), 0);
        se.write_u64(a, 5).unwrap();
        assert_eq!(se.read_u64(a).unwrap(), 5);
        assert_eq!(
            se.touch(a, Access::Exec),
            Err(Fault::Protection { addr: a })
        );
    }
}

/// A core runs a session that reads a page in a loop while another core unmaps it: the
/// `munmap` returns (the session took its request at an access) and every access the session
/// begins after seeing the `munmap` returned faults. Bounded: the reader stops at its first
/// fault, the unmapper after one munmap.
#[test]
fn munmap_returns_while_a_session_accesses_and_later_accesses_fault() {
    for &d in Design::ALL {
        let s = space(d);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
        h.write(a, &7u64.to_le_bytes()).unwrap();
        // Mapped (not touched) before the munmap, so that it cannot take `a`'s address.
        let b = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
        let returned = AtomicBool::new(false);
        let started = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let mut h2 = s.attach().unwrap();
                let mut se = h2.session().unwrap();
                loop {
                    // Acquire: pairs with the Release store after munmap returned.
                    let after = returned.load(Acquire);
                    match se.read_u64(a) {
                        Ok(v) => {
                            assert_eq!(v, 7, "{d:?}: read a reused frame");
                            assert!(!after, "{d:?}: an access after munmap returned succeeded");
                        }
                        Err(f) => {
                            assert_eq!(f, Fault::Unmapped { addr: a });
                            break;
                        }
                    }
                    started.store(true, Release);
                }
            });
            while !started.load(Acquire) {
                std::thread::yield_now();
            }
            h.munmap(a, PAGE_SIZE).unwrap();
            // Reuse the frame at once (the core's frame cache gives the freed frame back
            // first): a stale reader would see 0 or 99.
            h.write(b, &99u64.to_le_bytes()).unwrap();
            returned.store(true, Release);
        });
    }
}

/// A session that only polls (no accesses) does not hold a shooter past its next poll.
#[test]
fn a_polling_session_lets_munmap_return() {
    let s = space(Design::Coarse);
    let mut h = s.attach().unwrap();
    let a = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
    let done = AtomicBool::new(false);
    let polls = AtomicU64::new(0);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut h2 = s.attach().unwrap();
            let mut se = h2.session().unwrap();
            se.read_u64(a).unwrap(); // the page is in its TLB: it is a target
            polls.store(1, Release);
            while !done.load(Acquire) {
                se.poll();
                std::hint::spin_loop();
            }
        });
        while polls.load(Acquire) == 0 {
            std::thread::yield_now();
        }
        h.munmap(a, PAGE_SIZE).unwrap();
        done.store(true, Release);
    });
}

#[test]
fn a_leaked_session_is_closed_by_the_handle_s_next_call() {
    for &d in Design::ALL {
        let s = space(d);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
        let mut se = h.session().unwrap();
        se.write_u64(a, 3).unwrap();
        std::mem::forget(se);
        // The handle's next call closes the leaked window; munmap by this core and by another
        // return.
        h.munmap(a, PAGE_SIZE).unwrap();
        let b = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
        std::mem::forget(h.session().unwrap());
        let mut b8 = [0; 8];
        h.read(b, &mut b8).unwrap();
        let mut other = s.attach().unwrap();
        other.munmap(b, PAGE_SIZE).unwrap();
        std::mem::forget(h.session().unwrap());
        drop(h); // detaching closes it too
        let mut h3 = s.attach().unwrap();
        h3.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
    }
}

#[test]
fn page_slices_move_bytes_and_check_bounds_and_rights() {
    for &d in Design::ALL {
        let s = space(d);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, 2 * PAGE_SIZE, RW, ANON).unwrap();
        h.mprotect(a + PAGE_SIZE, PAGE_SIZE, Prot::READ).unwrap();
        {
            let mut se = h.session().unwrap();
            let p = se.page_mut(a + 8).unwrap();
            assert_eq!(p.len(), PAGE_SIZE as usize - 8);
            p.store_u64(0, 42).unwrap();
            p.store_u64(3, 0x0807_0605_0403_0201).unwrap(); // unaligned
            p.write(100, b"hello").unwrap();
            p.fill(200, 50, 0x5a).unwrap();
            assert_eq!(p.load_u64(3).unwrap(), 0x0807_0605_0403_0201);
            assert_eq!(
                p.load_u64(p.len() - 7),
                Err(SliceError::OutOfBounds {
                    offset: p.len() - 7,
                    len: 8,
                    size: p.len()
                })
            );
            assert!(p.read(usize::MAX, &mut [0; 2]).is_err());
            let sub = p.subslice(100, 5).unwrap();
            let mut hello = [0; 5];
            sub.read(0, &mut hello).unwrap();
            assert_eq!(&hello, b"hello");
            assert!(sub.subslice(1, 5).is_err());
            let r = se.page(a + PAGE_SIZE).unwrap();
            assert!(!r.is_writable());
            assert_eq!(r.store_u64(0, 1), Err(SliceError::ReadOnly));
            assert_eq!(r.load_u64(0).unwrap(), 0);
            assert_eq!(
                se.page_mut(a + PAGE_SIZE).err(),
                Some(Fault::Protection {
                    addr: a + PAGE_SIZE
                })
            );
        }
        let mut b = [0u8; 5];
        h.read(a + 108, &mut b).unwrap();
        assert_eq!(&b, b"hello", "{d:?}");
        h.read(a + 208, &mut b).unwrap();
        assert_eq!(b, [0x5a; 5]);
    }
}

/// Two cores write disjoint words of one page through sessions while reading the other's:
/// every word read is one the other wrote whole.
#[test]
fn sessions_of_two_cores_share_a_page_word_by_word() {
    let s = space(Design::Hybrid);
    let mut h = s.attach().unwrap();
    let a = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            let s = &s;
            sc.spawn(move || {
                let mut hh = s.attach().unwrap();
                let mut se = hh.session().unwrap();
                for round in 1..=20_000u64 {
                    let v = round * 0x0001_0001_0001_0001;
                    se.write_u64(a + 8 * t, v).unwrap();
                    let w = se.read_u64(a + 8 * (1 - t)).unwrap();
                    assert_eq!(w % 0x0001_0001_0001_0001, 0, "torn word {w:#x}");
                }
            });
        }
    });
}

/// Review (issue 24): a panic in the fault handler while a session has stepped out of its
/// window (here injected at `STAGE1_BEFORE_FILL`) unwinds through `Session::drop`, which ended
/// the window a second time: the core's `access` counter was left odd while idle (every later
/// shooter that targets the core waits forever) and even inside its next windows (shooters do
/// not wait for them): a `munmap` on another core returned while this core held a page slice
/// of the page, whose frame could then be reused under it.
#[test]
fn a_panic_in_a_session_s_fault_does_not_end_its_window_twice() {
    use std::time::Duration;
    let mut unwound = 0;
    for &d in Design::ALL {
        let s = space(d);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut se = h.session().unwrap();
            crate::fault_inject::STAGE1_BEFORE_FILL.arm(|| panic!("injected panic in a fault"));
            let _ = se.read_u64(a);
        }));
        // Disarms the point where this design's fault does not reach it.
        crate::fault_inject::STAGE1_BEFORE_FILL.arm(|| {});
        if r.is_ok() {
            continue;
        }
        unwound += 1;
        h.write(a, &7u64.to_le_bytes()).unwrap();
        std::thread::scope(|sc| {
            let mut se = h.session().unwrap();
            let p = se.page(a).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let waits = tx.clone();
            let s = &s;
            sc.spawn(move || {
                let mut h2 = s.attach().unwrap();
                // The munmap's shooter reports when it starts waiting for a core's window
                // (this core's: no other is inside one).
                crate::fault_inject::SHOOTER_WAITS.arm(move || {
                    let _ = waits.send("waits");
                });
                h2.munmap(a, PAGE_SIZE).unwrap();
                let _ = tx.send("returned");
            });
            // Deterministic: the first report is the shooter's wait when this core is still
            // inside its window, the munmap's return when it is not.
            let first = rx.recv().unwrap();
            let v = p.load_u64(0).unwrap();
            drop(se);
            assert_eq!(
                first, "waits",
                "{d:?}: munmap returned while this core held a page slice of the page"
            );
            assert_eq!(v, 7, "{d:?}");
        });
        // The core is idle again: a shooter that targets it returns.
        let b = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
        h.write(b, &1u64.to_le_bytes()).unwrap();
        let done = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let mut h2 = s.attach().unwrap();
                h2.munmap(b, PAGE_SIZE).unwrap();
                done.store(true, Release);
            });
            for _ in 0..200 {
                if done.load(Acquire) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let ok = done.load(Acquire);
            // Lets a shooter held by the odd counter go (a window begun and ended moves it on),
            // so that a failing run ends instead of hanging in the scope's join.
            let _ = h.read(b.wrapping_add(PAGE_SIZE * 1000), &mut [0; 1]);
            assert!(ok, "{d:?}: munmap waited for an idle core");
        });
    }
    assert!(
        unwound > 0,
        "the injected panic did not happen on any design"
    );
}

/// Review (issue 24): a panic in the fault handler caught *inside* a session (safe code:
/// `catch_unwind(AssertUnwindSafe(..))` around one access) left the session running with its
/// window ended and never begun again: its later TLB hits and page slices ran outside any
/// window, so a `munmap` on another core did not wait for them and the frame could be reused
/// under them.
#[test]
fn a_session_that_caught_a_panic_in_its_fault_is_still_inside_its_window() {
    let mut unwound = 0;
    for &d in Design::ALL {
        let s = space(d);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
        let c = h.mmap(0, PAGE_SIZE, RW, ANON).unwrap();
        h.write(a, &7u64.to_le_bytes()).unwrap();
        let mut se = h.session().unwrap();
        assert_eq!(se.read_u64(a).unwrap(), 7); // `a` is in the TLB
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::fault_inject::STAGE1_BEFORE_FILL.arm(|| panic!("injected panic in a fault"));
            let _ = se.read_u64(c);
        }));
        crate::fault_inject::STAGE1_BEFORE_FILL.arm(|| {});
        if r.is_ok() {
            continue;
        }
        unwound += 1;
        std::thread::scope(|sc| {
            let p = se.page(a).unwrap(); // a TLB hit
            let (tx, rx) = std::sync::mpsc::channel();
            let waits = tx.clone();
            let s = &s;
            sc.spawn(move || {
                let mut h2 = s.attach().unwrap();
                // The munmap's shooter reports when it starts waiting for a core's window
                // (this core's: no other is inside one).
                crate::fault_inject::SHOOTER_WAITS.arm(move || {
                    let _ = waits.send("waits");
                });
                h2.munmap(a, PAGE_SIZE).unwrap();
                let _ = tx.send("returned");
            });
            // Deterministic: the first report is the shooter's wait when this core is still
            // inside its window, the munmap's return when it is not.
            let first = rx.recv().unwrap();
            let v = p.load_u64(0).unwrap();
            drop(se);
            assert_eq!(
                first, "waits",
                "{d:?}: munmap returned while this core held a page slice of the page"
            );
            assert_eq!(v, 7, "{d:?}");
        });
    }
    assert!(
        unwound > 0,
        "the injected panic did not happen on any design"
    );
}
