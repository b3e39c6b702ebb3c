//! The single-thread cycle of issue 22, for instruction counts under callgrind:
//! `valgrind --tool=callgrind target/release/examples/cycle local 100000` (or `fault`), then
//! divide the program's instructions by the iterations (setup is the same at any count: run
//! two counts and take the difference for the per-iteration figure).
//!
//! - `local`: `mmap` 4 KiB at a hint, write one byte, `munmap` (the `local` workload on
//!   `coarse`, with an anchor page keeping the leaf table alive);
//! - `fault`: one write fault per iteration on a fresh page of a 512-page mapping, re-mapped
//!   (`madvise(DONTNEED)`) every 512 faults.
//!
//! An optional third argument `attached` attaches a second, idle core first (the lock upgraded).

use aspace_vm::{AddressSpace, Advice, Design, MapFlags, Prot, PAGE_SIZE};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("local", String::as_str);
    let iters: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let space = AddressSpace::builder()
        .design(Design::Coarse)
        .memory(64 << 20)
        .build()
        .expect("space");
    let _idle = (args.get(3).map(String::as_str) == Some("attached"))
        .then(|| space.attach().expect("second core"));
    let mut core = space.attach().expect("core");
    let pa = MapFlags::PRIVATE_ANONYMOUS;
    let hint = 0x4000_0000u64;
    let anchor = hint + (2 << 20) - PAGE_SIZE;
    core.mmap(anchor, PAGE_SIZE, Prot::READ_WRITE, pa | MapFlags::FIXED)
        .expect("anchor");
    core.write(anchor, &[1]).expect("anchor write");
    match mode {
        "local" => {
            for _ in 0..iters {
                let p = core
                    .mmap(hint, PAGE_SIZE, Prot::READ_WRITE, pa)
                    .expect("mmap");
                core.write(p, &[1]).expect("write");
                core.munmap(p, PAGE_SIZE).expect("munmap");
            }
        }
        "fault" => {
            let n = 512u64;
            let a = core
                .mmap(hint, n * PAGE_SIZE, Prot::READ_WRITE, pa)
                .expect("mmap");
            for i in 0..iters {
                let k = i % n;
                if k == 0 && i > 0 {
                    core.madvise(a, n * PAGE_SIZE, Advice::DONTNEED)
                        .expect("madvise");
                }
                core.write(a + k * PAGE_SIZE, &[1]).expect("write");
            }
        }
        other => panic!("unknown mode {other} (local, fault)"),
    }
    println!("{mode}: {iters} iterations, {:?}", space.stats().faults);
}
