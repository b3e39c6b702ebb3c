//! The guest's instruction set: a compact register machine (32 registers of 64 bits, RISC-V's
//! shape without its encoding), and a small assembler with labels to write guest programs in.
//!
//! Programs are host-side vectors of decoded [`Insn`]s, like an emulator's translation cache:
//! only data lives in guest memory (instruction fetch is not emulated; `PROT_EXEC` is not
//! checked). Registers are numbered 0..32; by convention (`machine.rs`) `r0` carries a system
//! call's number and result, `r1..=r4` its arguments, and a fault handler gets the faulting
//! address in `r13`, the `si_code` in `r14` and the faulting instruction's index in `r15`.
//!
//! Not for: execution (`machine.rs`) or memory (`memory.rs`).

/// A register's number, `0..32`.
pub type Reg = u8;

/// Registers of a guest thread.
pub const REGS: usize = 32;

/// The width of a load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    B1 = 1,
    B2 = 2,
    B4 = 4,
    B8 = 8,
}

impl Width {
    /// Bytes moved.
    pub const fn bytes(self) -> usize {
        self as usize
    }
}

/// A branch condition on two registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    Eq,
    Ne,
    /// Unsigned less-than.
    Ltu,
    /// Signed less-than.
    Lt,
}

/// One instruction. Branch and jump targets are instruction indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insn {
    /// `rd = imm`
    Li { rd: Reg, imm: u64 },
    /// `rd = rs + imm` (wrapping)
    Addi { rd: Reg, rs: Reg, imm: i64 },
    /// `rd = rs1 + rs2` (wrapping)
    Add { rd: Reg, rs1: Reg, rs2: Reg },
    /// `rd = rs1 - rs2` (wrapping)
    Sub { rd: Reg, rs1: Reg, rs2: Reg },
    /// `rd = rs1 * rs2` (wrapping)
    Mul { rd: Reg, rs1: Reg, rs2: Reg },
    /// `rd = rs1 ^ rs2`
    Xor { rd: Reg, rs1: Reg, rs2: Reg },
    /// `rd = rs << sh`
    Slli { rd: Reg, rs: Reg, sh: u8 },
    /// `rd = zero-extended load of width at rs + off`
    Load {
        width: Width,
        rd: Reg,
        base: Reg,
        off: i64,
    },
    /// `store the low bytes of rs at base + off`
    Store {
        width: Width,
        rs: Reg,
        base: Reg,
        off: i64,
    },
    /// `if cond(rs1, rs2) goto target`
    Branch {
        cond: Cond,
        rs1: Reg,
        rs2: Reg,
        target: usize,
    },
    /// `goto target`
    Jump { target: usize },
    /// `goto rs` (an instruction index in a register)
    Jr { rs: Reg },
    /// A system call: number in `r0`, arguments in `r1..=r4`, result in `r0`.
    Syscall,
}

/// Builds a program with forward and backward labels.
#[derive(Debug, Default)]
pub struct Asm {
    code: Vec<Insn>,
    /// Label -> instruction index, once bound.
    labels: Vec<Option<usize>>,
    /// (instruction index, label) of branches and jumps to patch.
    fixups: Vec<(usize, Label)>,
}

/// A position in a program, bound with [`Asm::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

impl Asm {
    pub fn new() -> Asm {
        Asm::default()
    }

    /// A new, unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `label` to the next instruction.
    pub fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.code.len());
    }

    /// The index the next instruction will have.
    pub fn here(&self) -> usize {
        self.code.len()
    }

    /// Appends an instruction.
    pub fn emit(&mut self, insn: Insn) -> &mut Asm {
        self.code.push(insn);
        self
    }

    /// Appends a branch to `label`.
    pub fn branch(&mut self, cond: Cond, rs1: Reg, rs2: Reg, label: Label) -> &mut Asm {
        self.fixups.push((self.code.len(), label));
        self.emit(Insn::Branch {
            cond,
            rs1,
            rs2,
            target: usize::MAX,
        })
    }

    /// Appends a jump to `label`.
    pub fn jump(&mut self, label: Label) -> &mut Asm {
        self.fixups.push((self.code.len(), label));
        self.emit(Insn::Jump { target: usize::MAX })
    }

    /// `rd = the index label is bound to` (for a fault handler's address).
    pub fn li_label(&mut self, rd: Reg, label: Label) -> &mut Asm {
        self.fixups.push((self.code.len(), label));
        self.emit(Insn::Li { rd, imm: u64::MAX })
    }

    /// The program, every label resolved.
    ///
    /// # Panics
    /// If a label used is never bound (a bug in the guest program's builder).
    pub fn finish(mut self) -> Vec<Insn> {
        for (at, label) in std::mem::take(&mut self.fixups) {
            let target = self.labels[label.0].expect("every label used is bound");
            match &mut self.code[at] {
                Insn::Branch { target: t, .. } | Insn::Jump { target: t } => *t = target,
                Insn::Li { imm, .. } => *imm = target as u64,
                other => unreachable!("fixup on {other:?}"),
            }
        }
        self.code
    }
}
