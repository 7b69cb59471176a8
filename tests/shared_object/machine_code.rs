//! What the machine code reachable from a function can do, read from `objdump -d`: the closure of
//! a shared object's entry point under direct calls and jumps, with every call that leaves the
//! object (through the PLT or the GOT), every indirect call, every system call instruction and
//! every function of Rust's panic machinery in it.
//!
//! A signal path whose closure calls nothing outside the object but `mem*` functions, makes no
//! indirect call, has no `syscall`/`svc` and reaches no panic function cannot allocate, take a
//! lock, make a system call, touch dynamic TLS (`__tls_get_addr` is an external call) or panic,
//! whatever the inputs. Indirect jumps (match jump tables) stay inside their function and are
//! only counted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use unwind_test_support::target::{self, Target};

/// The architecture of the object: how its instructions call and jump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    X86_64,
    Arm,
    Aarch64,
}

impl Isa {
    /// The instruction set of `t`'s code.
    pub fn of(t: &Target) -> Isa {
        match t.elf_machine {
            62 => Isa::X86_64,
            40 => Isa::Arm,
            183 => Isa::Aarch64,
            _ => panic!("machine_code: no instruction decoding for {}", t.name),
        }
    }
}

/// External functions a signal path may call: POSIX lists them as async-signal-safe (since
/// POSIX.1-2008 TC2), and glibc's take no lock and allocate nothing.
const ALLOWED_EXTERNAL: [&str; 5] = ["memset", "memcpy", "memmove", "memcmp", "bcmp"];

/// Functions reached only while unwinding from a panic: the abort landing pad of an `extern "C"`
/// function, and the resumption of unwinding after a cleanup (dropping a guard). A panic needs a
/// panic function in the closure, which is reported on its own.
const UNWINDING_ONLY: [&str; 2] = ["panic_cannot_unwind", "_Unwind_Resume"];

/// What the closure of an entry point holds.
#[derive(Debug, Default)]
pub struct Closure {
    /// Functions reached.
    pub functions: usize,
    /// Instructions in them.
    pub instructions: usize,
    /// External functions called, with the number of call sites.
    pub external: BTreeMap<String, usize>,
    /// Indirect jumps (jump tables).
    pub indirect_jumps: usize,
    /// Everything the signal path must not do, each with the call chain that reaches it.
    pub violations: Vec<String>,
}

struct Function {
    name: String,
    start: u64,
    /// `(address, mnemonic, operands)`.
    insns: Vec<(u64, String, String)>,
}

/// The `objdump` of the target whose instruction set is `isa`.
fn objdump(isa: Isa) -> String {
    target::all()
        .iter()
        .find(|t| Isa::of(t) == isa)
        .expect("a row of the targets table")
        .tool("objdump")
}

fn run(cmd: &str, args: &[&str], lib: &Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?} {}", lib.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Functions of the disassembly, sorted by address.
fn functions(text: &str) -> Vec<Function> {
    let mut out: Vec<Function> = Vec::new();
    for line in text.lines() {
        if let Some(head) = line.strip_suffix(">:") {
            if let Some((addr, name)) = head.split_once(" <") {
                if let Ok(start) = u64::from_str_radix(addr.trim(), 16) {
                    out.push(Function {
                        name: name.to_string(),
                        start,
                        insns: Vec::new(),
                    });
                }
            }
            continue;
        }
        let Some((addr, rest)) = line.split_once(":\t") else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        let rest = rest.trim();
        let (mnemonic, operands) = rest.split_once([' ', '\t']).unwrap_or((rest, ""));
        // x86 prefixes (`notrack jmp`, `bnd jmp`, `rep stos`) belong to the mnemonic.
        let (mnemonic, operands) = match mnemonic {
            "notrack" | "bnd" | "rep" | "lock" | "repz" | "repnz" | "data16" => {
                let o = operands.trim();
                let (m, rest) = o.split_once([' ', '\t']).unwrap_or((o, ""));
                (m, rest)
            }
            m => (m, operands),
        };
        if let Some(f) = out.last_mut() {
            f.insns
                .push((addr, mnemonic.to_string(), operands.trim().to_string()));
        }
    }
    out.sort_by_key(|f| f.start);
    out
}

/// `ADDR <sym>` operands: the address and the symbol.
fn direct_target(operands: &str) -> Option<(u64, &str)> {
    let (addr, sym) = operands.split_once(" <")?;
    let addr = u64::from_str_radix(addr.trim(), 16).ok()?;
    Some((addr, sym.strip_suffix('>').unwrap_or(sym)))
}

/// The name without `@plt`, a symbol version or an offset.
fn base_name(sym: &str) -> &str {
    let s = sym.split('+').next().unwrap_or(sym);
    let s = s.strip_suffix("@plt").unwrap_or(s);
    s.split('@').next().unwrap_or(s)
}

/// Dynamic relocations: GOT slot address to the symbol it is bound to, or, for a relative
/// relocation, the address it holds.
fn got_slots(lib: &Path, isa: Isa) -> HashMap<u64, Result<String, u64>> {
    let mut out = HashMap::new();
    for line in run(&objdump(isa), &["-R", "-w"], lib).lines() {
        let mut it = line.split_whitespace();
        let (Some(slot), Some(kind), Some(value)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let Ok(slot) = u64::from_str_radix(slot, 16) else {
            continue;
        };
        if kind.ends_with("_RELATIVE") {
            if let Some(hex) = value.strip_prefix("*ABS*+0x") {
                if let Ok(a) = u64::from_str_radix(hex, 16) {
                    out.insert(slot, Err(a));
                }
            }
        } else {
            out.insert(slot, Ok(value.to_string()));
        }
    }
    out
}

/// The sizes of the functions the symbol table gives one, by start address. What the
/// disassembly shows past a function's size before the next symbol is not its code: the
/// linker's own (aarch64's erratum 843419 veneers follow a function, with a branch over them to
/// the next input section, which would otherwise read as the function's call).
fn function_sizes(lib: &Path, isa: Isa) -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    for line in run(&objdump(isa), &["-t", "-w"], lib).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 5 || !fields.contains(&"F") {
            continue;
        }
        let (Ok(start), Ok(size)) = (
            u64::from_str_radix(fields[0], 16),
            u64::from_str_radix(fields[fields.len() - 2], 16),
        ) else {
            continue;
        };
        let e = out.entry(start).or_insert(0);
        *e = (*e).max(size);
    }
    out
}

/// Symbols the object defines (name to address).
fn defined(lib: &Path, isa: Isa) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for line in run(&objdump(isa), &["-T", "-w"], lib).lines() {
        if line.contains("*UND*") {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let (Some(addr), Some(name)) = (fields.first(), fields.last()) {
            if let Ok(a) = u64::from_str_radix(addr, 16) {
                out.insert(base_name(name).to_string(), a);
            }
        }
    }
    out
}

/// Where one instruction goes.
enum Flow {
    /// Falls through or branches inside the function.
    Local,
    /// A direct call or jump to this address.
    To(u64),
    /// A call through the GOT slot at this address.
    Got(u64),
    /// A call through a register (x86_64: `call *%r15`), resolved by [`register_calls`] where the
    /// register is known to hold a GOT slot's address.
    CallRegister,
    IndirectCall,
    IndirectJump,
    Syscall,
}

fn flow(isa: Isa, mnemonic: &str, operands: &str) -> Flow {
    match isa {
        Isa::X86_64 => {
            if mnemonic == "syscall" || mnemonic == "sysenter" || mnemonic == "int" {
                return Flow::Syscall;
            }
            let call = mnemonic.starts_with("call");
            let jump = mnemonic.starts_with('j');
            if !call && !jump {
                return Flow::Local;
            }
            if let Some(reg) = operands.strip_prefix("*%") {
                if call && reg.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Flow::CallRegister;
                }
            }
            if let Some(ind) = operands.strip_prefix('*') {
                // `*0x..(%rip)        # a52f8 <memset@GLIBC_2.2.5>`: a GOT slot.
                if ind.contains("(%rip)") {
                    if let Some((_, c)) = ind.split_once('#') {
                        if let Some(slot) = c
                            .split_whitespace()
                            .next()
                            .and_then(|a| u64::from_str_radix(a, 16).ok())
                        {
                            return Flow::Got(slot);
                        }
                    }
                }
                return if call {
                    Flow::IndirectCall
                } else {
                    Flow::IndirectJump
                };
            }
            direct_target(operands).map_or(Flow::Local, |(a, _)| Flow::To(a))
        }
        Isa::Arm => {
            if mnemonic.starts_with("svc") || mnemonic.starts_with("swi") {
                return Flow::Syscall;
            }
            let m = mnemonic.trim_end_matches(".n").trim_end_matches(".w");
            let conds = [
                "", "eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge",
                "lt", "gt", "le", "al",
            ];
            let is = |base: &str| conds.iter().any(|c| m == format!("{base}{c}"));
            if is("b") || is("bl") || is("blx") || m == "cbz" || m == "cbnz" {
                if let Some((a, _)) = direct_target(operands.rsplit(", ").next().unwrap_or("")) {
                    return Flow::To(a);
                }
                if is("blx") {
                    return Flow::IndirectCall;
                }
                return Flow::Local;
            }
            if is("bx") {
                return if operands == "lr" {
                    Flow::Local
                } else {
                    Flow::IndirectJump
                };
            }
            // `ldr pc, [...]`, `add pc, ...`, `mov pc, ...`: a jump table (returns pop into pc).
            if (m.starts_with("ldr") || m.starts_with("add") || m.starts_with("mov"))
                && operands.starts_with("pc,")
            {
                return Flow::IndirectJump;
            }
            Flow::Local
        }
        Isa::Aarch64 => {
            if mnemonic == "svc" {
                return Flow::Syscall;
            }
            // Direct branches: `b`, `b.cond`, `bl`, `cbz`/`cbnz` and `tbz`/`tbnz` (the target
            // their last operand).
            let direct = matches!(mnemonic, "b" | "bl" | "cbz" | "cbnz" | "tbz" | "tbnz")
                || mnemonic.starts_with("b.");
            if direct {
                return direct_target(operands.rsplit(", ").next().unwrap_or(""))
                    .map_or(Flow::Local, |(a, _)| Flow::To(a));
            }
            // Calls through a register (`blr`, and the authenticating `blraa` and kin), and
            // jumps through one (`br`: a jump table, or a tail call through a pointer).
            if mnemonic.starts_with("blr") {
                return Flow::IndirectCall;
            }
            if mnemonic.starts_with("br") {
                return Flow::IndirectJump;
            }
            Flow::Local
        }
    }
}

/// x86_64: the GOT slot each `call *%reg` of `f` calls through, where every path to the call
/// leaves the same slot's address in the register. A forward must-analysis over the function's
/// control flow (fallthrough and direct jumps, iterated to a fixpoint): `mov 0x..(%rip),%reg
/// # slot` loads a slot, `mov %a,%b` copies it, any other write to a register forgets it, a call
/// forgets the caller-saved registers, and where paths meet only what all of them agree on is
/// kept; nothing is known at the function's entry. The compiler keeps a GOT address it calls
/// several times in a register, also across the iterations of a loop.
fn register_calls(f: &Function) -> HashMap<u64, u64> {
    // The 64-bit register an operand names (`%r15d` and `%ebx` are r15 and rbx).
    let full = |r: &str| -> String {
        let r = r.trim().trim_start_matches('%');
        let legacy = match r {
            "eax" | "ax" | "al" => "rax",
            "ebx" | "bx" | "bl" => "rbx",
            "ecx" | "cx" | "cl" => "rcx",
            "edx" | "dx" | "dl" => "rdx",
            "esi" | "si" | "sil" => "rsi",
            "edi" | "di" | "dil" => "rdi",
            "ebp" | "bp" | "bpl" => "rbp",
            "esp" | "sp" | "spl" => "rsp",
            r => r,
        };
        if legacy.starts_with('r') && legacy.len() > 2 && legacy[1..].starts_with(char::is_numeric)
        {
            legacy.trim_end_matches(['d', 'w', 'b']).to_string()
        } else {
            legacy.to_string()
        }
    };
    type Known = HashMap<String, u64>;
    let caller_saved = ["rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"];
    let insns = &f.insns;
    let index: HashMap<u64, usize> = insns.iter().enumerate().map(|(i, x)| (x.0, i)).collect();
    // What each instruction does to the known registers.
    let transfer = |i: usize, known: &mut Known| {
        let (_, mnemonic, operands) = &insns[i];
        let ops = operands.split('#').next().unwrap_or("").trim();
        if mnemonic.starts_with("call") {
            for r in caller_saved {
                known.remove(r);
            }
            return;
        }
        let dest = match mnemonic.as_str() {
            m if m.starts_with("cmp") || m.starts_with("test") || m.starts_with("push") => None,
            m if m.starts_with('j') || m == "ret" || m.starts_with("nop") => None,
            "pop" => Some(ops),
            _ => ops.rsplit(',').next().filter(|d| d.starts_with('%')),
        };
        let Some(dest) = dest else { return };
        let dest = full(dest);
        let value = if mnemonic == "mov" && ops.contains("(%rip)") {
            operands
                .split_once('#')
                .and_then(|(_, c)| c.split_whitespace().next())
                .and_then(|a| u64::from_str_radix(a, 16).ok())
        } else if mnemonic == "mov" && ops.starts_with('%') && !ops.contains('(') {
            ops.split(',')
                .next()
                .and_then(|src| known.get(&full(src)).copied())
        } else {
            None
        };
        match value {
            Some(slot) => known.insert(dest, slot),
            None => known.remove(&dest),
        };
    };
    // Successors: the next instruction unless the flow never falls through, and a direct jump's
    // target inside the function.
    let successors = |i: usize| -> Vec<usize> {
        let (_, mnemonic, operands) = &insns[i];
        let mut out = Vec::new();
        let ends = mnemonic.starts_with("ret")
            || mnemonic.starts_with("jmp")
            || mnemonic.starts_with("ud");
        if !ends && i + 1 < insns.len() {
            out.push(i + 1);
        }
        if mnemonic.starts_with('j') {
            if let Some(&t) = direct_target(operands).and_then(|(a, _)| index.get(&a)) {
                out.push(t);
            }
        }
        out
    };
    // `None`: not reached yet (agrees with everything).
    let mut before: Vec<Option<Known>> = vec![None; insns.len()];
    if !insns.is_empty() {
        before[0] = Some(Known::new());
    }
    let mut work: Vec<usize> = if insns.is_empty() {
        Vec::new()
    } else {
        vec![0]
    };
    loop {
        while let Some(i) = work.pop() {
            let Some(mut known) = before[i].clone() else {
                continue;
            };
            transfer(i, &mut known);
            for s in successors(i) {
                let merged = match &before[s] {
                    None => known.clone(),
                    Some(old) => old
                        .iter()
                        .filter(|(r, slot)| known.get(*r) == Some(slot))
                        .map(|(r, slot)| (r.clone(), *slot))
                        .collect(),
                };
                if before[s].as_ref() != Some(&merged) {
                    before[s] = Some(merged);
                    work.push(s);
                }
            }
        }
        // Code reached only through an indirect jump (a jump table): nothing known there.
        match before.iter().position(Option::is_none) {
            Some(i) => {
                before[i] = Some(Known::new());
                work.push(i);
            }
            None => break,
        }
    }
    let mut out = HashMap::new();
    for (i, (addr, mnemonic, operands)) in insns.iter().enumerate() {
        if !mnemonic.starts_with("call") {
            continue;
        }
        let ops = operands.split('#').next().unwrap_or("").trim();
        let (Some(reg), Some(known)) = (ops.strip_prefix("*%"), &before[i]) else {
            continue;
        };
        if let Some(&slot) = known.get(&full(reg)) {
            out.insert(*addr, slot);
        }
    }
    out
}

/// Cases of [`register_calls`] on hand-written x86_64 code; the failures, if any.
pub fn register_calls_self_test() -> Vec<String> {
    let func = |lines: &[(u64, &str, &str)]| Function {
        name: "t".into(),
        start: lines[0].0,
        insns: lines
            .iter()
            .map(|&(a, m, o)| (a, m.to_string(), o.to_string()))
            .collect(),
    };
    let load = "0x100(%rip),%r9        # 2000 <x>";
    let mut failures = Vec::new();
    // The slot loaded before a loop and reloaded after each call (as rustc keeps `Cache::fill`'s
    // GOT address): the call at 0x14 goes through slot 0x2000 on every path.
    let looped = func(&[
        (0x10, "mov", load),
        (0x12, "jmp", "18 <t+0x8>"),
        (0x14, "call", "*%r9"),
        (0x16, "mov", load),
        (0x18, "test", "%rax,%rax"),
        (0x1a, "jne", "14 <t+0x4>"),
        (0x1c, "ret", ""),
    ]);
    if register_calls(&looped).get(&0x14) != Some(&0x2000) {
        failures.push("a GOT address kept in a register across a loop is not resolved".into());
    }
    // One path reaches the call without the load (r9 is an argument there): not resolved.
    let one_path = func(&[
        (0x10, "test", "%rdi,%rdi"),
        (0x12, "je", "18 <t+0x8>"),
        (0x14, "mov", load),
        (0x18, "call", "*%r9"),
        (0x1a, "ret", ""),
    ]);
    if register_calls(&one_path).contains_key(&0x18) {
        failures.push("a register loaded on only one path is taken for a GOT slot".into());
    }
    // Overwritten after the load: not resolved.
    let clobbered = func(&[
        (0x10, "mov", load),
        (0x14, "add", "$0x8,%r9"),
        (0x18, "call", "*%r9"),
        (0x1a, "ret", ""),
    ]);
    if register_calls(&clobbered).contains_key(&0x18) {
        failures.push("a register changed after its load is taken for a GOT slot".into());
    }
    failures
}

/// The closure of `entry` in the shared object `lib` (a symbol, or a Rust function's mangled
/// path without its hash).
pub fn closure(lib: &Path, isa: Isa, entry: &str) -> Closure {
    let text = run(&objdump(isa), &["-d", "--no-show-raw-insn", "-w"], lib);
    let funcs = functions(&text);
    let slots = got_slots(lib, isa);
    let defs = defined(lib, isa);
    let sizes = function_sizes(lib, isa);
    let starts: Vec<u64> = funcs.iter().map(|f| f.start).collect();
    let containing = |a: u64| starts.partition_point(|&s| s <= a).checked_sub(1);
    // A Rust function is named by its mangled path without the hash (`_ZN...17h<hash>E`).
    let named = |f: &Function| {
        f.name == entry
            || f.name
                .strip_prefix(entry)
                .is_some_and(|h| h.starts_with("17h"))
    };
    let Some(first) = funcs.iter().position(named) else {
        panic!("{}: no function {entry}", lib.display());
    };
    let mut c = Closure::default();
    let mut parent: HashMap<usize, usize> = HashMap::new();
    let mut seen = BTreeSet::from([first]);
    let mut work = vec![first];
    let chain = |parent: &HashMap<usize, usize>, mut i: usize| {
        let mut names = vec![funcs[i].name.clone()];
        while let Some(&p) = parent.get(&i) {
            names.push(funcs[p].name.clone());
            i = p;
        }
        names.reverse();
        names.join(" -> ")
    };
    while let Some(i) = work.pop() {
        let f = &funcs[i];
        c.functions += 1;
        c.instructions += f.insns.len();
        if f.name.contains("panicking") || f.name.contains("panic_") {
            if !UNWINDING_ONLY.iter().any(|u| f.name.contains(u)) {
                c.violations.push(format!(
                    "reaches the panic machinery: {}",
                    chain(&parent, i)
                ));
            }
            continue;
        }
        let end = funcs.get(i + 1).map_or(u64::MAX, |n| n.start);
        let code_end = sizes
            .get(&f.start)
            .filter(|&&s| s > 0)
            .map_or(end, |&s| end.min(f.start + s));
        let held = register_calls(f);
        for (addr, mnemonic, operands) in f.insns.iter().filter(|(a, _, _)| *a < code_end) {
            let external = |name: &str, c: &mut Closure| {
                let name = base_name(name).to_string();
                if !ALLOWED_EXTERNAL.contains(&name.as_str())
                    && !UNWINDING_ONLY.contains(&name.as_str())
                {
                    c.violations.push(format!(
                        "calls {name} outside the object at {addr:#x}: {}",
                        chain(&parent, i)
                    ));
                }
                *c.external.entry(name).or_default() += 1;
            };
            let flow = match flow(isa, mnemonic, operands) {
                Flow::CallRegister => match held.get(addr) {
                    Some(&slot) => Flow::Got(slot),
                    None => Flow::IndirectCall,
                },
                other => other,
            };
            let target = match flow {
                Flow::Local | Flow::CallRegister => continue,
                Flow::Syscall => {
                    c.violations.push(format!(
                        "system call instruction at {addr:#x}: {}",
                        chain(&parent, i)
                    ));
                    continue;
                }
                Flow::IndirectCall => {
                    c.violations.push(format!(
                        "indirect call `{mnemonic} {operands}` at {addr:#x}: {}",
                        chain(&parent, i)
                    ));
                    continue;
                }
                Flow::IndirectJump => {
                    c.indirect_jumps += 1;
                    continue;
                }
                Flow::Got(slot) => match slots.get(&slot) {
                    Some(Err(a)) => *a,
                    Some(Ok(sym)) => match defs.get(base_name(sym)) {
                        Some(&a) => a,
                        None => {
                            external(sym, &mut c);
                            continue;
                        }
                    },
                    None => {
                        c.violations.push(format!(
                            "call through unrelocated slot {slot:#x} at {addr:#x}: {}",
                            chain(&parent, i)
                        ));
                        continue;
                    }
                },
                Flow::To(a) => a,
            };
            if (f.start..end).contains(&target) {
                continue;
            }
            let Some(j) = containing(target) else {
                c.violations
                    .push(format!("branch to {target:#x} outside any function"));
                continue;
            };
            if funcs[j].name.ends_with("@plt") {
                external(&funcs[j].name, &mut c);
                continue;
            }
            if seen.insert(j) {
                parent.insert(j, i);
                work.push(j);
            }
        }
    }
    c
}
