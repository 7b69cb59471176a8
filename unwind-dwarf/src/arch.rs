//! What differs between architectures: the one trait each implements ([`DwarfArch`]), and the
//! enum naming them for tools that meet them at run time ([`Architecture`]).

use std::fmt::Debug;

use gimli::{CommonInformationEntry, EndianSlice, LittleEndian, UnwindSection, UnwindTableRow};
use object::read::elf::FileHeader as _;
use object::Object as _;
use unwind_core::table::ModuleRulesBuilder;
use unwind_core::Arch;

use crate::breakpad::rule::StackCfiRule;
use crate::breakpad::SkipReason;
use crate::cfi::{CfiSections, Collected, DropReason};
use crate::plt::{PltKind, PltSection};
use crate::{DwarfError, UnreadableSection};

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// Only this crate's modules implement [`DwarfArch`] (its methods use the crate's internals).
pub(crate) mod sealed {
    /// The supertrait that seals [`super::DwarfArch`].
    pub trait Sealed {}
}

/// An architecture whose DWARF CFI this crate translates into `unwind-core` rules: everything the
/// loaders ([`crate::rules_from_sections`], [`crate::rules_from_elf`]) and the Breakpad exporter
/// ([`crate::breakpad::write_stack_cfi`]) need to know about it, and nothing they share.
///
/// Implemented by `unwind-core`'s architecture types ([`crate::X86_64`], [`crate::Arm`],
/// [`crate::Aarch64`]), so
/// that one type names an architecture in every layer: its rule type is
/// [`Arch::Rule`]. The crate documentation lists what a new one implements. Sealed: the
/// translation uses the crate's internal helpers.
pub trait DwarfArch: sealed::Sealed + Arch {
    /// Its variant of [`Architecture`].
    const ARCHITECTURE: Architecture;
    /// The `e_machine` of its ELF files.
    const ELF_MACHINE: object::elf::Machine;
    /// Its address (and word) size in bytes: of CFI pointers and of expression values.
    const ADDRESS_SIZE: u8;
    /// The vendor whose CFI instructions its sections may hold (AArch64's
    /// `DW_CFA_AARCH64_negate_ra_state`); [`gimli::Vendor::Default`] where none.
    const VENDOR: gimli::Vendor = gimli::Vendor::Default;

    /// What loading a module finds besides [`crate::CfiStats`] ([`crate::LoadStats::arch`]):
    /// ARM's EHABI index ([`crate::ArmStats`]); `()` where there is nothing more.
    type ArchStats: Clone + Debug + Default + PartialEq + Eq + Send + Sync + 'static;
    /// The sections of its own unwind tables, a rule source besides DWARF CFI (ARM:
    /// [`crate::ExidxSections`]); [`NoExtraSource`] where it has none.
    type ExtraSections<'a>;

    /// Whether `file` is one of its ELF files. The default: its `e_machine` is
    /// [`DwarfArch::ELF_MACHINE`] and it is little-endian (every table is read as little-endian).
    fn accepts_elf(file: &object::File<'_>) -> bool {
        is_elf_of::<Self>(file)
    }

    /// The expression register number (`Reg as u8` of its `unwind-core` module) of DWARF
    /// register `register`, if it is one of the registers it tracks.
    fn tracked(register: gimli::Register) -> Option<u8>;

    /// Translates one row gimli evaluated (the CFA and register rules at one address of an FDE)
    /// into a rule, or why it cannot be expressed; expressions are interned in `builder`.
    fn translate<'a, S: UnwindSection<Slice<'a>>>(
        row: &UnwindTableRow<usize>,
        cie: &CommonInformationEntry<Slice<'a>>,
        section: &S,
        builder: &mut ModuleRulesBuilder<Self::Rule>,
        signal_frame: bool,
    ) -> Result<Self::Rule, DropReason>;

    /// The forms of the kernel's signal return trampoline, where no unwind table describes
    /// them right: their rows replace the module's wherever their instructions are.
    const SIGNAL_TRAMPOLINES: &'static [crate::sigreturn::SignalTrampoline<Self::Rule>] = &[];

    /// The PLT sections it synthesizes rows for, by name, and the shape of their stubs.
    const PLT_SECTIONS: &'static [(&'static str, PltKind)];

    /// Rows `(start, end, rule)` covering a PLT section (kept where no FDE describes them).
    fn plt_rows(
        plt: &PltSection,
        builder: &mut ModuleRulesBuilder<Self::Rule>,
    ) -> Result<Vec<(u64, u64, Self::Rule)>, DwarfError>;

    /// Reads its own unwind tables from `elf` and calls `with` with them: `None` (the default)
    /// where it has none. A section that cannot be read is left out and recorded in
    /// `unreadable`; `code_range` is the file's code (`[start, end)`), if known.
    fn with_extra_sections<T>(
        elf: &object::File<'_>,
        code_range: Option<(u64, u64)>,
        unreadable: &mut Vec<UnreadableSection>,
        with: impl FnOnce(Option<&Self::ExtraSections<'_>>) -> T,
    ) -> T {
        let _ = (elf, code_range, unreadable);
        with(None)
    }

    /// Adds the rows of its own unwind tables to `collected` (the module's DWARF and PLT rows)
    /// where those leave gaps, and says what it found. `only_source`: the module has nothing
    /// else, so an error reading `extra` is the module's. The default adds nothing.
    fn merge_extra(
        extra: &Self::ExtraSections<'_>,
        sections: &CfiSections<'_>,
        collected: &mut Collected<Self::Rule>,
        only_source: bool,
    ) -> Result<Self::ArchStats, DwarfError> {
        let _ = (extra, sections, collected, only_source);
        Ok(Self::ArchStats::default())
    }

    /// Appends to `out` the return sites (file addresses just after a call instruction) of
    /// `code`, at file address `svma`, for stack scanning ([`crate::return_sites()`]), each with
    /// its call's target if it is an immediate. Such calls count only if `is_code` accepts the
    /// target.
    fn return_sites(
        code: &[u8],
        svma: u64,
        is_code: &dyn Fn(u64) -> bool,
        out: &mut Vec<(u64, Option<u64>)>,
    );

    /// How functions that call GCC's `__builtin_eh_return` show in its code, where the
    /// stretch in which their save slots hold an exception handler's registers is looked for
    /// ([`crate::eh_return`]); `None` where it is not (ARM, whose libgcc unwinder is
    /// described by EXIDX).
    const EH_RETURN: Option<crate::eh_return::EhReturnCode> = None;

    /// `rule` with its return address [`Lost`](unwind_core::x86_64::RegRule::Lost) (the walk
    /// stops there with `ReturnAddressLost`); only called where [`DwarfArch::EH_RETURN`] is
    /// set.
    fn return_address_lost(rule: Self::Rule) -> Self::Rule {
        rule
    }

    /// Adjusts the rows of one function (an FDE's, in address order) where its CFI as a whole
    /// says something a row alone does not (aarch64: a function entered from the PLT's
    /// header). The default leaves them.
    fn adjust_function(_rows: &mut [(u64, u64, Self::Rule)]) {}

    /// The DWARF register the CFA of the dynamic linker's lazy-binding trampolines is on
    /// (x86_64: `rbx`), which the architecture's rules do not track; `None` where there is
    /// no such trampoline to cross (`lazy_binding`).
    const LAZY_BINDING_REGISTER: Option<u16> = None;

    /// The rule of a lazy-binding trampoline at its call's return site: the CFA read as
    /// `[sp + slot] + cfa_offset` (`lazy_binding`; the expression interned in
    /// `builder`), the return address and other registers as the trampoline leaves them.
    fn lazy_binding_rule(
        _slot: i64,
        _cfa_offset: i64,
        _builder: &mut ModuleRulesBuilder<Self::Rule>,
    ) -> Option<Self::Rule> {
        None
    }

    /// The rule of a Go function's row whose stack pointer is `delta` bytes below its value at
    /// the function's entry (the return address a call pushed not included), as Go's linker
    /// writes it into `.debug_frame` ([`crate::go`]); `None` where Go is not supported.
    fn go_frame_rule(_delta: i64) -> Option<Self::Rule> {
        None
    }

    /// How Go's `asmcgocall` keeps the goroutine's stack pointer in its frame on the system
    /// stack on this architecture ([`crate::go`]); `None` where that switch is not crossed.
    const GO_CGO_FRAME: Option<crate::go::CgoFrame> = None;

    /// `rule` with its CFA the value of expression `expr` (the rest as it says: where Go's
    /// `asmcgocall` returns, [`crate::go`]). The default leaves it.
    fn with_cfa_expression(rule: &Self::Rule, _expr: u16) -> Self::Rule {
        *rule
    }

    /// `rule` of Go's `asyncPreempt`, which Go's signal handler makes the interrupted function
    /// seem to call ([`crate::go`]): its caller's PC is the interrupted instruction, exact,
    /// and on a machine with a link register the frame holds the interrupted one 16 bytes
    /// above the entry's stack pointer. `None` where not described: the walk ends there.
    fn interrupted_caller(_rule: &Self::Rule) -> Option<Self::Rule> {
        None
    }

    /// `rule` with the return address undefined: the end of the stack. The default leaves it
    /// (where the architecture's rules cannot say so).
    fn end_of_stack(rule: &Self::Rule) -> Self::Rule {
        *rule
    }

    /// The CFA rule of `rule` as a DWARF register plus an offset, where it is one.
    fn cfa_register_offset(_rule: &Self::Rule) -> Option<(u16, i64)> {
        None
    }

    /// `rule` with the return address saved at the address expression `expr` gives and the
    /// caller's frame pointer undefined (where a handler's registers are being installed,
    /// [`crate::eh_return`]).
    fn return_address_at(rule: Self::Rule, _expr: u16) -> Self::Rule {
        rule
    }

    /// Its name on a Breakpad `MODULE` line (`x86_64`, `arm`).
    const BREAKPAD_NAME: &'static str;
    /// Breakpad names of its tracked registers, by expression register number.
    const BREAKPAD_REGISTERS: &'static [&'static str];
    /// The expression register numbers of the PC and the SP (a CFA expression reading the PC is
    /// expanded, address by address, into `SP + k`).
    const EXPRESSION_PC_SP: (u8, u8);
    /// The registers a `STACK CFI` record names besides `.cfa` and `.ra`, in the order written,
    /// each with the text of the rule a Breakpad walker assumes for it when a record does not
    /// name it (written where a rule returns to it inside a record).
    const BREAKPAD_OTHER_REGISTERS: &'static [(&'static str, &'static str)];

    /// `rule` in the terms a `STACK CFI` record states it (registers by number), or why it is
    /// not written.
    fn stack_cfi(rule: &Self::Rule) -> Result<StackCfiRule, SkipReason>;
}

/// The extra rule source of an architecture without one ([`DwarfArch::ExtraSections`]): no
/// value exists, so only `None` can be passed where one is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoExtraSource {}

/// Whether `file` is a little-endian ELF file of `A`'s `e_machine` (the default
/// [`DwarfArch::accepts_elf`]).
pub(crate) fn is_elf_of<A: DwarfArch>(file: &object::File<'_>) -> bool {
    elf_machine(file) == Some(A::ELF_MACHINE) && file.is_little_endian()
}

/// The `e_machine` of an ELF file (`None` for another format).
fn elf_machine(file: &object::File<'_>) -> Option<object::elf::Machine> {
    match file {
        object::File::Elf32(f) => Some(f.elf_header().e_machine(f.endian())),
        object::File::Elf64(f) => Some(f.elf_header().e_machine(f.endian())),
        _ => None,
    }
}

/// The architectures this crate reads, for tools that meet them at run time (by an ELF file's
/// `e_machine`, a minidump's CPU): each variant stands for a [`DwarfArch`] type, which
/// [`Architecture::dispatch`] runs generic code with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Architecture {
    /// x86_64 ([`crate::X86_64`]).
    X86_64,
    /// 32-bit ARM, ARM and Thumb-2 code, little-endian ([`crate::Arm`]).
    Arm,
    /// 64-bit ARM, little-endian ([`crate::Aarch64`]).
    Aarch64,
}

/// Generic code that [`Architecture::dispatch`] runs with the [`DwarfArch`] type of an
/// architecture known only at run time.
pub trait ArchVisitor {
    /// What it gives.
    type Output;
    /// Runs it for architecture `A`.
    fn visit<A: DwarfArch>(self) -> Self::Output;
}

/// An architecture's constants, read through [`Architecture::dispatch`].
struct Info {
    name: &'static str,
    breakpad_name: &'static str,
    word_size: u8,
    elf_machine: object::elf::Machine,
    plt_sections: &'static [(&'static str, PltKind)],
}

struct InfoOf;

impl ArchVisitor for InfoOf {
    type Output = Info;
    fn visit<A: DwarfArch>(self) -> Info {
        Info {
            name: A::NAME,
            breakpad_name: A::BREAKPAD_NAME,
            word_size: A::ADDRESS_SIZE,
            elf_machine: A::ELF_MACHINE,
            plt_sections: A::PLT_SECTIONS,
        }
    }
}

/// Whether an ELF file is an architecture's ([`DwarfArch::accepts_elf`]).
struct Accepts<'f, 'd>(&'f object::File<'d>);

impl ArchVisitor for Accepts<'_, '_> {
    type Output = bool;
    fn visit<A: DwarfArch>(self) -> bool {
        A::accepts_elf(self.0)
    }
}

impl Architecture {
    /// Every architecture.
    pub const ALL: [Architecture; 3] = [
        Architecture::X86_64,
        Architecture::Arm,
        Architecture::Aarch64,
    ];

    /// Runs `visitor` with this architecture's [`DwarfArch`] type.
    pub fn dispatch<V: ArchVisitor>(self, visitor: V) -> V::Output {
        match self {
            Architecture::X86_64 => visitor.visit::<crate::X86_64>(),
            Architecture::Arm => visitor.visit::<crate::Arm>(),
            Architecture::Aarch64 => visitor.visit::<crate::Aarch64>(),
        }
    }

    fn info(self) -> Info {
        self.dispatch(InfoOf)
    }

    /// The architecture of ELF files with `e_machine` `machine`, if this crate reads it.
    pub fn from_elf_machine(machine: object::elf::Machine) -> Option<Architecture> {
        Self::ALL.into_iter().find(|a| a.elf_machine() == machine)
    }

    /// The architecture of an ELF file ([`DwarfArch::accepts_elf`]: its `e_machine`, and its
    /// byte order and class where the architecture requires them), or
    /// [`DwarfError::UnsupportedArchitecture`].
    pub fn of_elf(file: &object::File<'_>) -> Result<Architecture, DwarfError> {
        Self::ALL
            .into_iter()
            .find(|a| a.dispatch(Accepts(file)))
            .ok_or(DwarfError::UnsupportedArchitecture(file.architecture()))
    }

    /// Its name in reports and paths (`x86_64`, `arm`, `aarch64`).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Its name on a Breakpad `MODULE` line (`x86_64`, `arm`, `arm64`).
    pub fn breakpad_name(self) -> &'static str {
        self.info().breakpad_name
    }

    /// Its word (and address) size in bytes: 8 on x86_64 and aarch64, 4 on 32-bit ARM.
    pub fn word_size(self) -> u8 {
        self.info().word_size
    }

    /// The `e_machine` of its ELF files.
    pub fn elf_machine(self) -> object::elf::Machine {
        self.info().elf_machine
    }

    /// The PLT sections it synthesizes rows for, by name ([`DwarfArch::PLT_SECTIONS`]).
    pub(crate) fn plt_sections(self) -> &'static [(&'static str, PltKind)] {
        self.info().plt_sections
    }
}

impl std::fmt::Display for Architecture {
    /// Its [`Architecture::name`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The architecture a visitor is run for.
    struct Which;

    impl ArchVisitor for Which {
        type Output = Architecture;
        fn visit<A: DwarfArch>(self) -> Architecture {
            A::ARCHITECTURE
        }
    }

    #[test]
    fn every_variant_dispatches_to_its_own_type() {
        for a in Architecture::ALL {
            assert_eq!(a.dispatch(Which), a);
            assert_eq!(Architecture::from_elf_machine(a.elf_machine()), Some(a));
        }
        assert_eq!(Architecture::from_elf_machine(object::elf::EM_RISCV), None);
        let x86 = Architecture::X86_64;
        assert_eq!(
            (x86.name(), x86.breakpad_name(), x86.word_size()),
            ("x86_64", "x86_64", 8)
        );
        let arm = Architecture::Arm;
        assert_eq!(
            (arm.name(), arm.breakpad_name(), arm.word_size()),
            ("arm", "arm", 4)
        );
        let a64 = Architecture::Aarch64;
        assert_eq!(
            (a64.name(), a64.breakpad_name(), a64.word_size()),
            ("aarch64", "arm64", 8)
        );
    }

    #[test]
    fn the_running_program_is_of_its_target_architecture() {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let expected = if cfg!(target_arch = "arm") {
            Architecture::Arm
        } else if cfg!(target_arch = "aarch64") {
            Architecture::Aarch64
        } else {
            Architecture::X86_64
        };
        assert_eq!(Architecture::of_elf(&file).unwrap(), expected);
    }

    /// The Breakpad register tables agree with the rule types' expression registers.
    #[test]
    fn breakpad_registers_name_every_expression_register() {
        fn check<A: DwarfArch>(pc: &str, sp: &str) {
            let (p, s) = A::EXPRESSION_PC_SP;
            let name = |r: u8| A::BREAKPAD_REGISTERS[usize::from(r)];
            assert_eq!((name(p), name(s)), (pc, sp), "{}", A::NAME);
        }
        check::<crate::X86_64>("$rip", "$rsp");
        check::<crate::Arm>("pc", "sp");
        check::<crate::Aarch64>("pc", "sp");
    }
}
