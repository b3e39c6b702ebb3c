//! Guest programs and the runs that check them: [`demo`], several guest threads that allocate,
//! fill, sum, protect, free and fault on memory in one shared address space, each result
//! checked against the host's own computation; and [`array_loop`], the benchmark's program (a
//! load, an add and a store per element of a 16-page array, forever).
//!
//! Register use: `r31` is zero (never written), `r11` the thread's id and `r12` the results
//! page (the host passes them in `r1`, `r2`).
//!
//! Not for: the interpreter (`machine.rs`).

use crate::isa::{Asm, Cond, Insn, Label, Reg, Width};
use crate::machine::{sys, Exit, Machine};
use crate::memory::{AspaceMemory, Memory};
use aspace_vm::{AddressSpace, Design, MapFlags, Prot, PAGE_SIZE};

const ZERO: u8 = 31;
const PROT_READ: u64 = 1;
const PROT_RW: u64 = 3;
const MAP_PRIVATE_ANONYMOUS: u64 = 0x22;
/// The multiplier of a thread's id in the values it writes.
const K: u64 = 1_000_003;

/// `r0 = nr; syscall`.
fn syscall(a: &mut Asm, nr: u64) {
    a.emit(Insn::Li { rd: 0, imm: nr }).emit(Insn::Syscall);
}

/// `rd = base + (index << shift)`, through `tmp`: the address of element `index` of an array
/// of `1 << shift`-byte elements at `base`.
fn element(a: &mut Asm, rd: Reg, base: Reg, index: Reg, shift: u8, tmp: Reg) -> &mut Asm {
    a.emit(Insn::Slli {
        rd: tmp,
        rs: index,
        sh: shift,
    })
    .emit(Insn::Add {
        rd,
        rs1: base,
        rs2: tmp,
    })
}

/// `r += 1`.
fn increment(r: Reg) -> Insn {
    Insn::Addi {
        rd: r,
        rs: r,
        imm: 1,
    }
}

/// Exits with the value of `r0` (a failed system call's `-errno`) if it is non-zero.
fn fail_unless_zero(a: &mut Asm, fail: Label) {
    a.branch(Cond::Ne, 0, ZERO, fail);
}

/// Where guest thread `tid` asks for its chunks: `HINT_BASE + tid * HINT_STRIDE` (16 TiB up, 4 GiB
/// apart), far below the top-down area that unhinted mappings take.
const HINT_BASE: u64 = 1 << 44;
const HINT_STRIDE: u64 = 1 << 32;

/// The demo's guest program: `rounds` times, `mmap` a chunk of `words` 8-byte words at the
/// thread's own hint, write
/// `tid * K + round * words + i` to word `i`, sum the chunk back, `mprotect` it read-only and
/// store to it (SEGV_ACCERR, handled), `munmap` it and load from it (SEGV_MAPERR, handled).
/// The SIGSEGV handler adds each fault's `si_code` to `r10`. At the end the thread stores its
/// sum and its `r10` at `results + tid * 16` and exits 0; a failed system call exits with its
/// `-errno`.
pub fn demo_program(rounds: u64, words: u64) -> Vec<Insn> {
    let chunk = (words * 8).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let mut a = Asm::new();
    let (round, fill, sum, fail, handler) = (a.label(), a.label(), a.label(), a.label(), a.label());
    a.emit(Insn::Addi {
        rd: 11,
        rs: 1,
        imm: 0,
    })
    .emit(Insn::Addi {
        rd: 12,
        rs: 2,
        imm: 0,
    })
    .emit(Insn::Li {
        rd: 19,
        imm: rounds,
    })
    .emit(Insn::Li { rd: 18, imm: words })
    .emit(Insn::Li { rd: 16, imm: 0 })
    .emit(Insn::Li { rd: 10, imm: 0 })
    .emit(Insn::Li { rd: 8, imm: 0 });
    a.li_label(1, handler);
    syscall(&mut a, sys::RT_SIGACTION);
    // round:
    a.bind(round);
    // r1 = the thread's own hint, HINT_BASE + tid * HINT_STRIDE: no other thread's mapping is
    // placed there, so the chunk's address is not reused between its `munmap` and the load
    // that must fault (with `mmap(NULL)`, Linux's top-down placement may hand the freed range
    // to another thread in between, as the kernel would: that load then succeeds).
    a.emit(Insn::Li {
        rd: 1,
        imm: HINT_STRIDE,
    })
    .emit(Insn::Mul {
        rd: 1,
        rs1: 11,
        rs2: 1,
    })
    .emit(Insn::Li {
        rd: 7,
        imm: HINT_BASE,
    })
    .emit(Insn::Add {
        rd: 1,
        rs1: 1,
        rs2: 7,
    })
    .emit(Insn::Li { rd: 2, imm: chunk })
    .emit(Insn::Li {
        rd: 3,
        imm: PROT_RW,
    })
    .emit(Insn::Li {
        rd: 4,
        imm: MAP_PRIVATE_ANONYMOUS,
    });
    syscall(&mut a, sys::MMAP);
    a.branch(Cond::Lt, 0, ZERO, fail);
    a.emit(Insn::Addi {
        rd: 5,
        rs: 0,
        imm: 0,
    })
    // r9 = tid * K + round * words
    .emit(Insn::Li { rd: 7, imm: K })
    .emit(Insn::Mul {
        rd: 9,
        rs1: 11,
        rs2: 7,
    })
    .emit(Insn::Mul {
        rd: 7,
        rs1: 16,
        rs2: 18,
    })
    .emit(Insn::Add {
        rd: 9,
        rs1: 9,
        rs2: 7,
    })
    .emit(Insn::Li { rd: 6, imm: 0 });
    a.bind(fill);
    element(&mut a, 17, 5, 6, 3, 7)
        .emit(Insn::Add {
            rd: 7,
            rs1: 9,
            rs2: 6,
        })
        .emit(Insn::Store {
            width: Width::B8,
            rs: 7,
            base: 17,
            off: 0,
        })
        .emit(increment(6));
    a.branch(Cond::Ltu, 6, 18, fill);
    a.emit(Insn::Li { rd: 6, imm: 0 });
    a.bind(sum);
    element(&mut a, 17, 5, 6, 3, 7)
        .emit(Insn::Load {
            width: Width::B8,
            rd: 7,
            base: 17,
            off: 0,
        })
        .emit(Insn::Add {
            rd: 8,
            rs1: 8,
            rs2: 7,
        })
        .emit(increment(6));
    a.branch(Cond::Ltu, 6, 18, sum);
    // Read-only, then a store: SEGV_ACCERR.
    a.emit(Insn::Addi {
        rd: 1,
        rs: 5,
        imm: 0,
    })
    .emit(Insn::Li { rd: 2, imm: chunk })
    .emit(Insn::Li {
        rd: 3,
        imm: PROT_READ,
    });
    syscall(&mut a, sys::MPROTECT);
    fail_unless_zero(&mut a, fail);
    a.emit(Insn::Store {
        width: Width::B8,
        rs: 6,
        base: 5,
        off: 8,
    });
    // Unmapped, then a load: SEGV_MAPERR.
    a.emit(Insn::Addi {
        rd: 1,
        rs: 5,
        imm: 0,
    })
    .emit(Insn::Li { rd: 2, imm: chunk });
    syscall(&mut a, sys::MUNMAP);
    fail_unless_zero(&mut a, fail);
    a.emit(Insn::Load {
        width: Width::B4,
        rd: 7,
        base: 5,
        off: 16,
    })
    .emit(increment(16));
    a.branch(Cond::Ltu, 16, 19, round);
    // Results at results + tid * 16.
    element(&mut a, 17, 12, 11, 4, 7)
        .emit(Insn::Store {
            width: Width::B8,
            rs: 8,
            base: 17,
            off: 0,
        })
        .emit(Insn::Store {
            width: Width::B8,
            rs: 10,
            base: 17,
            off: 8,
        })
        .emit(Insn::Li { rd: 1, imm: 0 });
    syscall(&mut a, sys::EXIT);
    a.bind(fail);
    a.emit(Insn::Addi {
        rd: 1,
        rs: 0,
        imm: 0,
    });
    syscall(&mut a, sys::EXIT);
    // The SIGSEGV handler: r10 += si_code; resume after the faulting instruction.
    a.bind(handler);
    a.emit(Insn::Add {
        rd: 10,
        rs1: 10,
        rs2: 14,
    })
    .emit(Insn::Addi {
        rd: 1,
        rs: 15,
        imm: 1,
    });
    syscall(&mut a, sys::RT_SIGRETURN);
    a.finish()
}

/// What thread `tid`'s sum should be, computed by the host.
pub fn expected_sum(tid: u64, rounds: u64, words: u64) -> u64 {
    let mut sum = 0u64;
    for round in 0..rounds {
        for i in 0..words {
            sum = sum.wrapping_add(tid.wrapping_mul(K) + round * words + i);
        }
    }
    sum
}

/// The outcome of one [`demo`] run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoReport {
    /// Per thread: (sum, fault `si_code` total, instructions executed).
    pub threads: Vec<(u64, u64, u64)>,
    /// Frames in use at the end (the results page only).
    pub frames_in_use: u64,
}

/// Runs [`demo_program`] on `threads` guest threads, each an OS thread with its own core of one
/// `design` space, and checks every result: each thread exited 0, its sum is
/// [`expected_sum`], its handler saw one SEGV_ACCERR (2) and one SEGV_MAPERR (1) per round,
/// and the space holds only the results page at the end.
///
/// # Errors
/// A description of the first wrong result.
pub fn demo(design: Design, threads: u64, rounds: u64, words: u64) -> Result<DemoReport, String> {
    let space = AddressSpace::builder()
        .design(design)
        .memory(64 << 20)
        .build()
        .map_err(|e| format!("build: {e}"))?;
    let mut main = space.attach().map_err(|e| format!("attach: {e}"))?;
    let results_len = (threads * 16).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let results = main
        .mmap(
            0,
            results_len,
            Prot::READ_WRITE,
            MapFlags::PRIVATE_ANONYMOUS,
        )
        .map_err(|e| format!("mmap results: {e}"))?;
    let program = demo_program(rounds, words);
    let exits: Vec<(Exit, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|tid| {
                let core = space.attach().expect("a core per guest thread");
                let program = &program;
                s.spawn(move || {
                    let mut m = Machine::new(program, AspaceMemory { core });
                    m.regs[1] = tid;
                    m.regs[2] = results;
                    (m.run_to_exit(), m.steps)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a guest thread"))
            .collect()
    });
    let mut mem = AspaceMemory { core: main };
    let mut report = DemoReport {
        threads: Vec::new(),
        frames_in_use: 0,
    };
    for (tid, (exit, steps)) in (0..threads).zip(exits) {
        if exit != Exit::Exited(0) {
            return Err(format!("guest thread {tid} stopped with {exit:?}"));
        }
        let load = |mem: &mut AspaceMemory, off: u64| {
            mem.load(results + tid * 16 + off, Width::B8)
                .map_err(|f| format!("host read of the results: {f:?}"))
        };
        let (sum, faults) = (load(&mut mem, 0)?, load(&mut mem, 8)?);
        let want = expected_sum(tid, rounds, words);
        if sum != want {
            return Err(format!("thread {tid}: sum {sum}, expected {want}"));
        }
        if faults != 3 * rounds {
            return Err(format!(
                "thread {tid}: handled fault codes add up to {faults}, expected {}",
                3 * rounds
            ));
        }
        report.threads.push((sum, faults, steps));
    }
    let frames = space.stats().frames_in_use;
    let regions = space.maps().len();
    if frames != 1 || regions != 1 {
        return Err(format!(
            "after the guests: {frames} frames in use and {regions} regions, expected 1 and 1"
        ));
    }
    report.frames_in_use = frames;
    Ok(report)
}

/// The benchmark's program: `mmap` 16 pages, then forever: for each 8-byte element, load it,
/// add one, store it back, and add it to `r8`. Eight instructions per element, one load and one
/// store among them.
pub fn array_loop() -> Vec<Insn> {
    const WORDS: u64 = 16 * PAGE_SIZE / 8;
    let mut a = Asm::new();
    let (outer, inner, fail) = (a.label(), a.label(), a.label());
    a.emit(Insn::Li { rd: 1, imm: 0 })
        .emit(Insn::Li {
            rd: 2,
            imm: WORDS * 8,
        })
        .emit(Insn::Li {
            rd: 3,
            imm: PROT_RW,
        })
        .emit(Insn::Li {
            rd: 4,
            imm: MAP_PRIVATE_ANONYMOUS,
        });
    syscall(&mut a, sys::MMAP);
    a.branch(Cond::Lt, 0, ZERO, fail);
    a.emit(Insn::Addi {
        rd: 5,
        rs: 0,
        imm: 0,
    })
    .emit(Insn::Li { rd: 18, imm: WORDS });
    a.bind(outer);
    a.emit(Insn::Li { rd: 6, imm: 0 });
    a.bind(inner);
    element(&mut a, 17, 5, 6, 3, 7)
        .emit(Insn::Load {
            width: Width::B8,
            rd: 7,
            base: 17,
            off: 0,
        })
        .emit(increment(7))
        .emit(Insn::Store {
            width: Width::B8,
            rs: 7,
            base: 17,
            off: 0,
        })
        .emit(Insn::Add {
            rd: 8,
            rs1: 8,
            rs2: 7,
        })
        .emit(increment(6));
    a.branch(Cond::Ltu, 6, 18, inner);
    a.jump(outer);
    a.bind(fail);
    a.emit(Insn::Addi {
        rd: 1,
        rs: 0,
        imm: 0,
    });
    syscall(&mut a, sys::EXIT);
    a.finish()
}
