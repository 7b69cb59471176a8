//! What every layer of a walk reports: why it ended ([`StopReason`]) and how each frame was
//! found ([`Trust`]). A leaf module: the architectures, the cache, the scan and the loop all
//! speak it.

/// Why the walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The return-address rule is "undefined": the outermost frame (`_start`, `clone`, a thread's
    /// start routine). This is the normal, complete end.
    EndOfStack,
    /// The caller's return address is 0 (another common marker of the outermost frame).
    ZeroReturnAddress,
    /// The output array is full; the stack may go on.
    BufferFull,
    /// No rule covers the PC and the frame-pointer fallback did not pass its sanity checks.
    NoRule,
    /// A read fell outside the permitted memory (for the live stack: the thread's stack above the
    /// interrupted stack pointer's red zone).
    ReadFailed,
    /// The caller's stack pointer was not above the callee's: the walk would loop or go astray.
    SpNotIncreasing,
    /// An expression failed (bad register, stack under- or overflow).
    ExpressionFailed,
    /// A rule that cannot produce a return address (for example "same value" for the PC).
    BadRule,
    /// The unwind tables say this function cannot be unwound through (ARM EHABI
    /// `EXIDX_CANTUNWIND`): the walk went as far as the tables allow. On ARM Linux this is how
    /// stacks end (glibc's `start_thread` and `__libc_start_main` are marked so), so it counts
    /// as complete; glibc also marks functions it built without unwind tables (its malloc
    /// family, for one), where a sample then stops at that function.
    CantUnwind,
    /// The caller's return address is in no module's code (a table's modules span their
    /// executable segments). It is not written as a frame: nothing shows that it is a caller.
    /// A stack word taken for a return address (a wrong rule, a smashed stack) ends here, and
    /// so does a walk into code the table does not know: generated at run time, or loaded after
    /// the table was built (counted by [`crate::Cache::outside_modules`]).
    OutsideModules,
    /// The frame's return address is no longer where its rule says, so its caller is not
    /// known. Either a rule says it is still in the link register at a frame that made a call,
    /// which wrote that register (compilers leave the link register unsaved in a function whose
    /// calls never return, `abort`, `exit`, and their CFI then says so at those calls); or the
    /// frame is an unwinder installing an exception handler's registers over its own saved ones
    /// (the end of libgcc's `_Unwind_RaiseException` and its siblings: the table's rule there is
    /// `Lost`, see `unwind_dwarf::eh_return`).
    ReturnAddressLost,
}

impl StopReason {
    /// Every reason, in a fixed order (to store a reason as its index, in signal handlers).
    pub const ALL: [StopReason; 11] = [
        StopReason::EndOfStack,
        StopReason::ZeroReturnAddress,
        StopReason::BufferFull,
        StopReason::NoRule,
        StopReason::ReadFailed,
        StopReason::SpNotIncreasing,
        StopReason::ExpressionFailed,
        StopReason::BadRule,
        StopReason::CantUnwind,
        StopReason::OutsideModules,
        StopReason::ReturnAddressLost,
    ];

    /// This reason's index in [`StopReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// True for the reasons that mean the whole stack was walked.
    pub fn is_complete(self) -> bool {
        matches!(
            self,
            StopReason::EndOfStack | StopReason::ZeroReturnAddress | StopReason::CantUnwind
        )
    }
}

/// How a frame's PC was obtained (ordered from most to least trustworthy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Trust {
    /// From the thread's registers (frame 0).
    #[default]
    Context,
    /// From the callee's CFI rule.
    Cfi,
    /// From the callee's frame pointer, because no rule described the callee.
    FramePointer,
    /// From the return address a call just left: an interrupted frame (frame 0, a signal
    /// frame's caller) had no rule and was assumed not to have saved it yet (the link register
    /// on ARM; on x86_64 the word at SP, where the PC is in the null page).
    LinkRegister,
    /// From a stack scan ([`crate::scan`]): a word above the callee's stack pointer that is
    /// the address just after a call instruction. Only a table built to scan gives it.
    Scan,
}

impl From<crate::expr::ExprError> for StopReason {
    /// A failed read ends the walk as any failed read does; other failures are the expression's.
    fn from(err: crate::expr::ExprError) -> Self {
        match err {
            crate::expr::ExprError::ReadFailed => StopReason::ReadFailed,
            _ => StopReason::ExpressionFailed,
        }
    }
}
