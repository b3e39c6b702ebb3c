//! A device model written against rust-vmm's `Bytes` only, run over an aspace.

use super::GuestBytes;
use crate::types::{MapFlags, Prot, PAGE_SIZE};
use crate::AddressSpace;
use std::sync::atomic::Ordering;
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemoryError};

/// A virtio-style descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Desc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

// SAFETY: plain old data, no padding (8 + 4 + 2 + 2 bytes), any bit pattern valid.
unsafe impl ByteValued for Desc {}

/// The device: for each of `n` descriptors in the table at `table`, reads the buffer it names,
/// writes its bytes reversed to `out` (consecutively), and publishes the count of processed
/// descriptors at `used` with a Release store. Generic over `Bytes`: what a rust-vmm device
/// sees.
fn device<M: Bytes<GuestAddress, E = GuestMemoryError>>(
    mem: &M,
    table: u64,
    n: u16,
    out: u64,
    used: u64,
) -> Result<u64, GuestMemoryError> {
    let mut at = out;
    for i in 0..n {
        let d: Desc = mem.read_obj(GuestAddress(table + 16 * u64::from(i)))?;
        let mut buf = vec![0u8; d.len as usize];
        mem.read_slice(&mut buf, GuestAddress(d.addr))?;
        buf.reverse();
        mem.write_slice(&buf, GuestAddress(at))?;
        at += u64::from(d.len);
        mem.store(u32::from(i) + 1, GuestAddress(used), Ordering::Release)?;
    }
    Ok(at - out)
}

#[test]
fn a_device_model_runs_over_an_aspace_through_bytes() {
    let s = AddressSpace::builder().memory(16 << 20).build().unwrap();
    let mut h = s.attach().unwrap();
    let base = h
        .mmap(
            0,
            16 * PAGE_SIZE,
            Prot::READ_WRITE,
            MapFlags::PRIVATE_ANONYMOUS,
        )
        .unwrap();
    let mem = GuestBytes::new(h.session().unwrap());
    let (table, data, out, used) = (base, base + PAGE_SIZE, base + 8 * PAGE_SIZE, base + 64);
    // The driver's side: buffers (one spans a page boundary) and descriptors.
    let bufs: [(u64, Vec<u8>); 3] = [
        (data, b"hello".to_vec()),
        (
            data + PAGE_SIZE - 3,
            (0..5000u32).map(|i| i as u8).collect(),
        ),
        (data + 3 * PAGE_SIZE + 1, b"aspace".to_vec()),
    ];
    for (i, (addr, bytes)) in bufs.iter().enumerate() {
        mem.write_slice(bytes, GuestAddress(*addr)).unwrap();
        let d = Desc {
            addr: *addr,
            len: bytes.len() as u32,
            flags: 1,
            next: i as u16 + 1,
        };
        mem.write_obj(d, GuestAddress(table + 16 * i as u64))
            .unwrap();
        assert_eq!(
            mem.read_obj::<Desc>(GuestAddress(table + 16 * i as u64))
                .unwrap(),
            d
        );
    }
    let n = device(&mem, table, 3, out, used).unwrap();
    assert_eq!(n, 5 + 5000 + 6);
    assert_eq!(
        mem.load::<u32>(GuestAddress(used), Ordering::Acquire)
            .unwrap(),
        3
    );
    let mut all = vec![0u8; n as usize];
    mem.read_slice(&mut all, GuestAddress(out)).unwrap();
    let mut expect = Vec::new();
    for (_, b) in &bufs {
        expect.extend(b.iter().rev());
    }
    assert_eq!(all, expect);
    // A descriptor naming unmapped memory is the device's error, not a crash.
    let bad = Desc {
        addr: base + 100 * PAGE_SIZE,
        len: 8,
        flags: 0,
        next: 0,
    };
    mem.write_obj(bad, GuestAddress(table)).unwrap();
    assert!(matches!(
        device(&mem, table, 1, out, used),
        Err(GuestMemoryError::InvalidGuestAddress(GuestAddress(a))) if a == base + 100 * PAGE_SIZE
    ));
    // `read` returns the prefix before an unmapped page; misaligned atomics are refused.
    let mut tail = [0u8; 16];
    assert_eq!(
        mem.read(&mut tail, GuestAddress(base + 16 * PAGE_SIZE - 8))
            .unwrap(),
        8
    );
    assert!(mem
        .load::<u64>(GuestAddress(base + 4), Ordering::Relaxed)
        .is_err());
    mem.poll();
    drop(mem.into_inner());
    h.munmap(base, 16 * PAGE_SIZE).unwrap();
}

/// The volatile I/O helpers go page by page: a huge `count` is not allocated up front, a range
/// that runs into a hole stops at the hole without consuming the source's bytes beyond it, and
/// the exact variants fail before touching the source when the range has a hole.
#[test]
fn volatile_io_stops_at_a_hole_and_takes_no_byte_it_cannot_store() {
    let s = AddressSpace::builder().memory(16 << 20).build().unwrap();
    let mut h = s.attach().unwrap();
    let base = h
        .mmap(
            0,
            3 * PAGE_SIZE,
            Prot::READ_WRITE,
            MapFlags::PRIVATE_ANONYMOUS,
        )
        .unwrap();
    // A hole after the range.
    h.munmap(base + 2 * PAGE_SIZE, PAGE_SIZE).unwrap();
    let mem = GuestBytes::new(h.session().unwrap());
    let data: Vec<u8> = (0..3 * PAGE_SIZE as usize)
        .map(|i| (i % 251) as u8)
        .collect();
    // From 100 bytes into the first page, with a count that could never be allocated.
    let start = base + 100;
    let mut src: &[u8] = &data;
    let n = mem
        .read_volatile_from(GuestAddress(start), &mut src, usize::MAX)
        .unwrap();
    let fits = (2 * PAGE_SIZE - 100) as usize;
    assert_eq!(n, fits, "stops at the hole");
    assert_eq!(
        src.len(),
        data.len() - fits,
        "no byte taken beyond the hole"
    );
    let mut back = vec![0u8; fits];
    mem.read_slice(&mut back, GuestAddress(start)).unwrap();
    assert_eq!(back, data[..fits]);
    // A source shorter than the range: what it has.
    let mut short: &[u8] = &data[..10];
    assert_eq!(
        mem.read_volatile_from(GuestAddress(base), &mut short, 5000)
            .unwrap(),
        10
    );
    // The exact variant fails before reading the source when the range has a hole.
    let mut src: &[u8] = &data;
    assert!(matches!(
        mem.read_exact_volatile_from(GuestAddress(start), &mut src, 2 * PAGE_SIZE as usize),
        Err(GuestMemoryError::InvalidGuestAddress(GuestAddress(a))) if a == base + 2 * PAGE_SIZE
    ));
    assert_eq!(src.len(), data.len(), "the source is untouched");
    // Out: up to the hole; the exact variant writes nothing when the range has a hole.
    let mut out: Vec<u8> = Vec::new();
    assert_eq!(
        mem.write_volatile_to(GuestAddress(start), &mut out, usize::MAX)
            .unwrap(),
        fits
    );
    assert_eq!(out, data[..fits]);
    let mut out: Vec<u8> = Vec::new();
    assert!(mem
        .write_all_volatile_to(GuestAddress(start), &mut out, 2 * PAGE_SIZE as usize)
        .is_err());
    assert!(out.is_empty(), "nothing written before the hole was found");
    let mut out: Vec<u8> = Vec::new();
    mem.write_all_volatile_to(GuestAddress(start), &mut out, fits)
        .unwrap();
    assert_eq!(out, data[..fits]);
    // A range past the end of the address space is an error, not an overflow.
    let mut src: &[u8] = &data;
    assert!(mem
        .read_volatile_from(GuestAddress(u64::MAX - 3), &mut src, 100)
        .is_err());
    drop(mem.into_inner());
    h.munmap(base, 2 * PAGE_SIZE).unwrap();
}

/// A source that stores one byte and claims to have read more than it was given (a buggy
/// `ReadVolatile`, safe code: `Read::read`'s contract only asks for `n <= buf.len()`).
struct Overclaims;

impl vm_memory::ReadVolatile for Overclaims {
    fn read_volatile<B: vm_memory::bitmap::BitmapSlice>(
        &mut self,
        buf: &mut vm_memory::VolatileSlice<B>,
    ) -> Result<usize, vm_memory::VolatileMemoryError> {
        buf.write_obj(1u8, 0)?;
        Ok(buf.len() + 8)
    }
}

/// A destination that claims to have written more than it was given.
struct OverclaimsWrites;

impl vm_memory::WriteVolatile for OverclaimsWrites {
    fn write_volatile<B: vm_memory::bitmap::BitmapSlice>(
        &mut self,
        buf: &vm_memory::VolatileSlice<B>,
    ) -> Result<usize, vm_memory::VolatileMemoryError> {
        Ok(buf.len() + 8)
    }
}

/// Review of issue 24: the bounce buffer's bytes past what the source filled (and past
/// `count`) must never reach guest memory, whatever count a buggy source returns; a count
/// larger than the page's buffer must not panic.
#[test]
fn volatile_read_from_an_overclaiming_source_writes_nothing_past_count() {
    let s = AddressSpace::builder().memory(1 << 20).build().unwrap();
    let mut h = s.attach().unwrap();
    let flags = MapFlags::PRIVATE_ANONYMOUS;
    let base = h.mmap(0, 2 * PAGE_SIZE, Prot::READ_WRITE, flags).unwrap();
    let mem = GuestBytes::new(h.session().unwrap());
    mem.write_slice(&[0x77; 64], GuestAddress(base)).unwrap();
    let r = mem.read_volatile_from(GuestAddress(base), &mut Overclaims, 16);
    assert!(matches!(r, Ok(n) if n <= 16) || r.is_err(), "{r:?}");
    let mut after = [0u8; 48];
    mem.read_slice(&mut after, GuestAddress(base + 16)).unwrap();
    assert_eq!(after, [0x77; 48], "bytes past count were overwritten");
    // A whole page claimed as more than a page: no panic.
    let r = mem.read_volatile_from(GuestAddress(base), &mut Overclaims, PAGE_SIZE as usize);
    assert!(
        matches!(r, Ok(n) if n <= PAGE_SIZE as usize) || r.is_err(),
        "{r:?}"
    );
    // The other way: never more than `count` reported.
    let r = mem.write_volatile_to(GuestAddress(base), &mut OverclaimsWrites, 16);
    assert!(matches!(r, Ok(n) if n <= 16) || r.is_err(), "{r:?}");
}
