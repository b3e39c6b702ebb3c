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
