//! The emulator-shaped example: the checked demo on every design, guest signals and the clean
//! errors, and the two memory backends agreeing on the benchmark's program.

use aspace_emu::guest::{array_loop, demo, expected_sum};
use aspace_emu::isa::{Asm, Insn, Width};
use aspace_emu::machine::{sys, Exit, Machine};
use aspace_emu::memory::{AspaceMemory, GuestFault, VecMemory};
use aspace_vm::{AddressSpace, Design};

#[test]
fn the_demo_is_correct_on_every_design() {
    for &design in Design::ALL {
        let report = demo(design, 3, 8, 700).unwrap_or_else(|e| panic!("{design:?}: {e}"));
        assert_eq!(report.threads.len(), 3);
        for (tid, (sum, faults, _)) in report.threads.iter().enumerate() {
            assert_eq!(*sum, expected_sum(tid as u64, 8, 700));
            assert_eq!(*faults, 3 * 8);
        }
        assert_eq!(report.frames_in_use, 1);
    }
}

fn space() -> AddressSpace {
    AddressSpace::builder().memory(8 << 20).build().unwrap()
}

#[test]
fn an_unhandled_fault_stops_the_thread_with_sigsegv() {
    let space = space();
    let mut a = Asm::new();
    a.emit(Insn::Li {
        rd: 5,
        imm: 0x1234_0000,
    })
    .emit(Insn::Load {
        width: Width::B8,
        rd: 6,
        base: 5,
        off: 8,
    });
    let program = a.finish();
    let mut m = Machine::new(
        &program,
        AspaceMemory {
            core: space.attach().unwrap(),
        },
    );
    assert_eq!(
        m.run_to_exit(),
        Exit::Signal {
            fault: GuestFault {
                addr: 0x1234_0008,
                si_code: 1
            },
            pc: 1
        }
    );
}

#[test]
fn a_fault_inside_the_handler_stops_the_thread() {
    let space = space();
    let mut a = Asm::new();
    let handler = a.label();
    a.li_label(1, handler);
    a.emit(Insn::Li {
        rd: 0,
        imm: sys::RT_SIGACTION,
    })
    .emit(Insn::Syscall)
    .emit(Insn::Store {
        width: Width::B1,
        rs: 0,
        base: 31,
        off: 0x5000,
    });
    a.bind(handler);
    a.emit(Insn::Store {
        width: Width::B1,
        rs: 0,
        base: 31,
        off: 0x6000,
    });
    let program = a.finish();
    let mut m = Machine::new(
        &program,
        AspaceMemory {
            core: space.attach().unwrap(),
        },
    );
    match m.run_to_exit() {
        Exit::Signal { fault, pc } => {
            assert_eq!(fault.addr, 0x6000);
            assert_eq!(pc, 4);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn system_calls_return_linux_values_and_bad_pcs_stop_cleanly() {
    let space = space();
    let mut a = Asm::new();
    // mmap with length 0: -EINVAL; an unknown call: -ENOSYS; then jump outside the program.
    a.emit(Insn::Li { rd: 2, imm: 0 })
        .emit(Insn::Li { rd: 3, imm: 3 })
        .emit(Insn::Li { rd: 4, imm: 0x22 })
        .emit(Insn::Li {
            rd: 0,
            imm: sys::MMAP,
        })
        .emit(Insn::Syscall)
        .emit(Insn::Addi {
            rd: 20,
            rs: 0,
            imm: 0,
        })
        .emit(Insn::Li { rd: 0, imm: 999 })
        .emit(Insn::Syscall)
        .emit(Insn::Li {
            rd: 9,
            imm: 1 << 40,
        })
        .emit(Insn::Jr { rs: 9 });
    let program = a.finish();
    let mut m = Machine::new(
        &program,
        AspaceMemory {
            core: space.attach().unwrap(),
        },
    );
    assert_eq!(m.run_to_exit(), Exit::BadPc(1 << 40));
    assert_eq!(m.regs[20] as i64, -i64::from(libc::EINVAL));
    assert_eq!(m.regs[0] as i64, -i64::from(libc::ENOSYS));
}

#[test]
fn both_backends_compute_the_same_array_loop() {
    let program = array_loop();
    let space = space();
    let mut on_aspace = Machine::new(
        &program,
        AspaceMemory {
            core: space.attach().unwrap(),
        },
    );
    let mut on_vec = Machine::new(&program, VecMemory::new(0x1000_0000, 1 << 20));
    for _ in 0..5 {
        assert_eq!(on_aspace.run(100_003), None);
        assert_eq!(on_vec.run(100_003), None);
        assert_eq!(on_aspace.regs[8], on_vec.regs[8]);
        assert_eq!(on_aspace.regs[6], on_vec.regs[6]);
    }
    assert!(on_aspace.regs[8] > 0);
}
