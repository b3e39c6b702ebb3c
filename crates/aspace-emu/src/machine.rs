//! The interpreter: one guest thread ([`Machine`]) running a program over a [`Memory`].
//!
//! Each step fetches the instruction at `pc` from the host-side program, executes it, and
//! advances. Loads and stores go to the memory backend; a fault is delivered as the guest's
//! SIGSEGV: if the guest registered a handler (`rt_sigaction`), the machine saves the faulting
//! address in `r13`, the `si_code` in `r14` and the faulting instruction's index in `r15`, and
//! jumps to the handler, which returns with `rt_sigreturn(resume_pc)`; otherwise (or on a fault
//! inside the handler) the thread stops with [`Exit::Signal`], the clean error an emulator
//! reports for a guest killed by a signal.
//!
//! System calls (`Syscall`) take Linux x86-64's numbers in `r0` and arguments in `r1..=r4`,
//! and return in `r0` as the kernel does (a value or `-errno`): `mmap`, `mprotect`, `munmap`,
//! `madvise` are served by the memory backend (the address space), `rt_sigaction` sets the
//! SIGSEGV handler (an instruction index; `u64::MAX` removes it), `rt_sigreturn` resumes at
//! `r1`, `exit` stops the thread. Anything else returns `-ENOSYS`.
//!
//! A program cannot make the interpreter panic: register numbers are taken modulo 32, and a
//! `pc` outside the program stops the thread with [`Exit::BadPc`].
//!
//! Not for: building programs (`isa.rs`, `guest.rs`) or memory (`memory.rs`).

use crate::isa::{Cond, Insn, Reg, REGS};
use crate::memory::{GuestFault, Memory};

/// Linux x86-64 system call numbers the machine serves.
pub mod sys {
    pub const MMAP: u64 = 9;
    pub const MPROTECT: u64 = 10;
    pub const MUNMAP: u64 = 11;
    pub const RT_SIGACTION: u64 = 13;
    pub const RT_SIGRETURN: u64 = 15;
    pub const MADVISE: u64 = 28;
    pub const EXIT: u64 = 60;
}

/// Why a guest thread stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// `exit(code)`.
    Exited(u64),
    /// Killed by SIGSEGV: a fault with no handler, or a fault inside the handler.
    Signal { fault: GuestFault, pc: usize },
    /// Control reached an index outside the program.
    BadPc(usize),
}

/// One guest thread: registers, `pc`, its SIGSEGV disposition, and its memory.
#[derive(Debug)]
pub struct Machine<'p, M> {
    pub regs: [u64; REGS],
    pub pc: usize,
    program: &'p [Insn],
    pub mem: M,
    handler: Option<usize>,
    in_handler: bool,
    /// Instructions executed.
    pub steps: u64,
}

impl<'p, M: Memory> Machine<'p, M> {
    /// A thread at instruction 0 with zeroed registers.
    pub fn new(program: &'p [Insn], mem: M) -> Machine<'p, M> {
        Machine {
            regs: [0; REGS],
            pc: 0,
            program,
            mem,
            handler: None,
            in_handler: false,
            steps: 0,
        }
    }

    #[inline]
    fn r(&self, r: Reg) -> u64 {
        self.regs[usize::from(r) % REGS]
    }

    #[inline]
    fn set(&mut self, r: Reg, v: u64) {
        self.regs[usize::from(r) % REGS] = v;
    }

    /// Runs until the thread stops or `budget` instructions have run (`None`: call again).
    pub fn run(&mut self, budget: u64) -> Option<Exit> {
        for _ in 0..budget {
            if let Err(exit) = self.step() {
                return Some(exit);
            }
        }
        None
    }

    /// Runs until the thread stops.
    pub fn run_to_exit(&mut self) -> Exit {
        loop {
            if let Some(exit) = self.run(1 << 20) {
                return exit;
            }
        }
    }

    /// Delivers a fault at the current instruction: to the handler, or as the thread's end.
    fn fault(&mut self, fault: GuestFault) -> Result<(), Exit> {
        match self.handler {
            Some(handler) if !self.in_handler => {
                self.regs[13] = fault.addr;
                self.regs[14] = fault.si_code as u64;
                self.regs[15] = self.pc as u64;
                self.in_handler = true;
                self.pc = handler;
                Ok(())
            }
            _ => Err(Exit::Signal { fault, pc: self.pc }),
        }
    }

    #[inline]
    fn step(&mut self) -> Result<(), Exit> {
        let insn = *self.program.get(self.pc).ok_or(Exit::BadPc(self.pc))?;
        self.steps += 1;
        let mut next = self.pc + 1;
        match insn {
            Insn::Li { rd, imm } => self.set(rd, imm),
            Insn::Addi { rd, rs, imm } => self.set(rd, self.r(rs).wrapping_add(imm as u64)),
            Insn::Add { rd, rs1, rs2 } => self.set(rd, self.r(rs1).wrapping_add(self.r(rs2))),
            Insn::Sub { rd, rs1, rs2 } => self.set(rd, self.r(rs1).wrapping_sub(self.r(rs2))),
            Insn::Mul { rd, rs1, rs2 } => self.set(rd, self.r(rs1).wrapping_mul(self.r(rs2))),
            Insn::Xor { rd, rs1, rs2 } => self.set(rd, self.r(rs1) ^ self.r(rs2)),
            Insn::Slli { rd, rs, sh } => self.set(rd, self.r(rs) << (sh % 64)),
            Insn::Load {
                width,
                rd,
                base,
                off,
            } => match self.mem.load(self.r(base).wrapping_add(off as u64), width) {
                Ok(v) => self.set(rd, v),
                Err(f) => return self.fault(f),
            },
            Insn::Store {
                width,
                rs,
                base,
                off,
            } => {
                let addr = self.r(base).wrapping_add(off as u64);
                if let Err(f) = self.mem.store(addr, width, self.r(rs)) {
                    return self.fault(f);
                }
            }
            Insn::Branch {
                cond,
                rs1,
                rs2,
                target,
            } => {
                let (a, b) = (self.r(rs1), self.r(rs2));
                let taken = match cond {
                    Cond::Eq => a == b,
                    Cond::Ne => a != b,
                    Cond::Ltu => a < b,
                    Cond::Lt => (a as i64) < (b as i64),
                };
                if taken {
                    next = target;
                }
            }
            Insn::Jump { target } => next = target,
            Insn::Jr { rs } => next = usize::try_from(self.r(rs)).unwrap_or(usize::MAX),
            Insn::Syscall => {
                if let Some(pc) = self.syscall()? {
                    next = pc;
                }
            }
        }
        self.pc = next;
        Ok(())
    }

    /// Serves the system call in `r0`; `Some(pc)` when it transfers control.
    fn syscall(&mut self) -> Result<Option<usize>, Exit> {
        let [nr, a1, a2, a3, a4] = [0, 1, 2, 3, 4].map(|r| self.regs[r]);
        let ret = match nr {
            sys::MMAP => self.mem.mmap(a1, a2, a3, a4),
            sys::MUNMAP => self.mem.munmap(a1, a2),
            sys::MPROTECT => self.mem.mprotect(a1, a2, a3),
            sys::MADVISE => self.mem.madvise(a1, a2, a3),
            sys::RT_SIGACTION => {
                self.handler = usize::try_from(a1)
                    .ok()
                    .filter(|&h| a1 != u64::MAX && h < self.program.len());
                0
            }
            sys::RT_SIGRETURN => {
                self.in_handler = false;
                return Ok(Some(usize::try_from(a1).unwrap_or(usize::MAX)));
            }
            sys::EXIT => return Err(Exit::Exited(a1)),
            _ => -i64::from(libc::ENOSYS),
        };
        self.regs[0] = ret as u64;
        Ok(None)
    }
}
