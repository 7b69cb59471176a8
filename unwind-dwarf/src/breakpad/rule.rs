//! A rule in the terms a `STACK CFI` record states it, before its registers are named: what an
//! architecture's [`crate::DwarfArch::stack_cfi`] gives the exporter.

/// How one rule is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackCfiRule {
    /// The CFA.
    pub cfa: StackCfiCfa,
    /// The return address (the caller's PC): [`StackCfiReg::Undefined`] is the end of the stack
    /// (a record without `.ra`); [`StackCfiReg::Same`] cannot be written.
    pub ra: StackCfiReg,
    /// The other registers' rules, in the order of
    /// [`crate::DwarfArch::BREAKPAD_OTHER_REGISTERS`]; `None` where the rule is what the walker
    /// assumes without one.
    pub others: Vec<Option<StackCfiReg>>,
    /// A signal frame's rule (Breakpad has no such flag; counted).
    pub signal_frame: bool,
    /// Starts a record of its own (an EHABI row, or a row read from instructions).
    pub own_record: bool,
}

/// How the CFA is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackCfiCfa {
    /// A register (by expression register number) plus an offset.
    RegOffset(u8, i32),
    /// The value of the module's expression `n`.
    Expr(u16),
}

/// How a register of the caller is recovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackCfiReg {
    /// Saved at `[CFA + offset]`.
    Offset(i32),
    /// Is `CFA + offset`.
    ValOffset(i32),
    /// No value.
    Undefined,
    /// Unchanged.
    Same,
    /// In another register (by expression register number).
    Register(u8),
    /// Saved at the address expression `n` computes.
    Expr(u16),
    /// Is the value of expression `n`.
    ValExpr(u16),
}
