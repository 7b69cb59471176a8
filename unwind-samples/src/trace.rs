//! Stack traces in the machine-readable shape of Breakpad's `minidump_stackwalk -m`
//! (`PrintProcessStateMachineReadable` in Breakpad's `stackwalk_common.cc`), so that the frames
//! our unwinder found and the frames another walker found for the same sample print the same
//! way and can be compared line by line:
//!
//! ```text
//! OS|Linux|6.1.0 Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 x86_64
//! CPU|amd64|family 6 model 85 stepping 7|2
//! GPU|||
//! Crash|No crash||
//! Module|workload|||workload|3F2A...0|0x55d0c0a00000|0x55d0c0a05fff|1
//! Module|libc.so.6|||libc.so.6|9C1B...0|0x7f3e1c000000|0x7f3e1c1d0fff|0
//!
//! 0|0|workload|leaf|||0x1a
//! 0|1|workload|middle|||0x2f
//! 0|2|libc.so.6||||0x29d8f
//! 0|3|||||0x7ffc1234
//! ```
//!
//! Frame lines are `thread|frame|module|function|source file|line|offset`. The offset is taken
//! from the function's start when the function is known, else from the module's base when the
//! module is known, else it is the absolute address. The address printed for frame 0 is its PC;
//! for callers it is the return address (Breakpad's `StackFrame::ReturnAddress`), while the module
//! and function are looked up at the call (`return address - 1`). No source lines are printed
//! (symbols come from ELF symbol tables, not line tables). `|` and newlines are removed from
//! names, as Breakpad does.

use std::fmt::Write as _;

use minidump_common::format as md;

use crate::minidump::{DumpModule, SystemInfo};
use crate::symbolize::Symbolizer;

/// The system lines (`OS|...` and `CPU|...`) as Breakpad's processor derives them from a
/// minidump's SystemInfo stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct System {
    /// The operating system's name (`Linux`).
    pub os: String,
    /// `major.minor.build`, then a space and the CSD version (on Linux, `uname -srvm`).
    pub os_version: String,
    /// Breakpad's CPU name: `amd64`, `arm`, ...
    pub cpu: String,
    /// The CPU description (`family 6 model 85 stepping 7`, `ARMv7 features: ...`); may be empty.
    pub cpu_info: String,
    /// Number of processors.
    pub cpu_count: u32,
}

impl System {
    /// The lines Breakpad's processor prints for a minidump whose SystemInfo stream is `raw`, its
    /// CSD version string `csd_version` (for a dump read back with the `minidump` crate: its
    /// `MinidumpSystemInfo::raw` and `csd_version()`).
    pub fn from_minidump(raw: &md::MINIDUMP_SYSTEM_INFO, csd_version: Option<&str>) -> System {
        use md::ProcessorArchitecture as A;
        let os = match raw.platform_id {
            x if x == md::PlatformId::VER_PLATFORM_WIN32_NT as u32
                || x == md::PlatformId::VER_PLATFORM_WIN32_WINDOWS as u32 =>
            {
                "Windows NT".to_string()
            }
            x if x == md::PlatformId::MacOs as u32 => "Mac OS X".to_string(),
            x if x == md::PlatformId::Ios as u32 => "iOS".to_string(),
            x if x == md::PlatformId::Linux as u32 => "Linux".to_string(),
            x if x == md::PlatformId::Solaris as u32 => "Solaris".to_string(),
            x if x == md::PlatformId::Android as u32 => "Android".to_string(),
            x => format!("0x{x:08x}"),
        };
        let mut os_version = format!(
            "{}.{}.{}",
            raw.major_version, raw.minor_version, raw.build_number
        );
        if let Some(csd) = csd_version {
            os_version.push(' ');
            os_version.push_str(csd);
        }
        let arch = raw.processor_architecture;
        let (cpu, cpu_info) = if arch == A::PROCESSOR_ARCHITECTURE_AMD64 as u16
            || arch == A::PROCESSOR_ARCHITECTURE_INTEL as u16
        {
            let mut info = String::new();
            if arch == A::PROCESSOR_ARCHITECTURE_INTEL as u16 {
                // The vendor string, only for 32-bit x86 (as Breakpad and rust-minidump).
                info.extend(raw.cpu.data[..12].iter().map(|&b| char::from(b)));
                info.push(' ');
            }
            let _ = write!(
                info,
                "family {} model {} stepping {}",
                raw.processor_level,
                (raw.processor_revision >> 8) & 0xff,
                raw.processor_revision & 0xff
            );
            let name = if arch == A::PROCESSOR_ARCHITECTURE_AMD64 as u16 {
                "amd64"
            } else {
                "x86"
            };
            (name.to_string(), info)
        } else if arch == A::PROCESSOR_ARCHITECTURE_ARM as u16 {
            ("arm".to_string(), arm_cpu_info(raw))
        } else if arch == A::PROCESSOR_ARCHITECTURE_ARM64 as u16
            || arch == A::PROCESSOR_ARCHITECTURE_ARM64_OLD as u16
        {
            ("arm64".to_string(), String::new())
        } else {
            (format!("0x{arch:04x}"), String::new())
        };
        System {
            os,
            os_version,
            cpu,
            cpu_info,
            cpu_count: u32::from(raw.number_of_processors),
        }
    }

    /// What a minidump written with `info` ([`crate::minidump::write`]) says.
    pub fn from_system_info(info: &SystemInfo) -> System {
        System::from_minidump(&info.raw, Some(&info.csd_version))
    }
}

/// Breakpad's ARM CPU description: `ARMv<level>`, the vendor and part from the cpuid when it is
/// known, and the hardware capabilities.
fn arm_cpu_info(raw: &md::MINIDUMP_SYSTEM_INFO) -> String {
    const VENDORS: [(u32, &str); 4] = [
        (0x41, "ARM"),
        (0x51, "Qualcomm"),
        (0x56, "Marvell"),
        (0x69, "Intel/Marvell"),
    ];
    const PARTS: [(u32, &str); 15] = [
        (0x4100c050, "Cortex-A5"),
        (0x4100c080, "Cortex-A8"),
        (0x4100c090, "Cortex-A9"),
        (0x4100c0f0, "Cortex-A15"),
        (0x4100c140, "Cortex-R4"),
        (0x4100c150, "Cortex-R5"),
        (0x4100b360, "ARM1136"),
        (0x4100b560, "ARM1156"),
        (0x4100b760, "ARM1176"),
        (0x4100b020, "ARM11-MPCore"),
        (0x41009260, "ARM926"),
        (0x41009460, "ARM946"),
        (0x41009660, "ARM966"),
        (0x510006f0, "Krait"),
        (0x510000f0, "Scorpion"),
    ];
    // HWCAP bits in order, as the Linux kernel defines them for 32-bit ARM.
    const FEATURES: [&str; 19] = [
        "swp", "half", "thumb", "26bit", "fastmult", "fpa", "vfpv2", "edsp", "java", "iwmmxt",
        "crunch", "thumbee", "neon", "vfpv3", "vfpv3d16", "tls", "vfpv4", "idiva", "idivt",
    ];
    let word = |at: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&raw.cpu.data[at..at + 4]);
        u32::from_le_bytes(b)
    };
    let (cpuid, hwcaps) = (word(0), word(4));
    let mut info = format!("ARMv{}", raw.processor_level);
    if cpuid != 0 {
        let vendor = (cpuid >> 24) & 0xff;
        match VENDORS.iter().find(|v| v.0 == vendor) {
            Some((_, name)) => {
                let _ = write!(info, " {name}");
            }
            None => {
                let _ = write!(info, " vendor(0x{vendor:x})");
            }
        }
        let part = cpuid & 0xff00_fff0;
        match PARTS.iter().find(|p| p.0 == part) {
            Some((_, name)) => {
                let _ = write!(info, " {name}");
            }
            None => {
                let _ = write!(info, " part(0x{part:x})");
            }
        }
    }
    if hwcaps != 0 {
        let names: Vec<&str> = FEATURES
            .iter()
            .enumerate()
            .filter(|&(bit, _)| hwcaps & (1 << bit) != 0)
            .map(|(_, &name)| name)
            .collect();
        let _ = write!(info, " features: {}", names.join(","));
    }
    info
}

/// A module as the `Module|...` line and the frame lines name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceModule {
    /// The code file (a path: its basename is printed).
    pub code_file: String,
    /// The version (empty for ELF modules).
    pub version: String,
    /// The debug file (for ELF modules, the code file; its basename is printed).
    pub debug_file: String,
    /// The Breakpad debug identifier (33 uppercase hex digits for an ELF build id), computed by
    /// the caller.
    pub debug_id: String,
    /// The module's base address (for ELF modules, [`DumpModule::base`]).
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl TraceModule {
    /// The module of a minidump written by [`crate::minidump::write`], with its debug id.
    pub fn new(module: &DumpModule, debug_id: impl Into<String>) -> TraceModule {
        TraceModule {
            code_file: module.name.clone(),
            version: String::new(),
            debug_file: module.name.clone(),
            debug_id: debug_id.into(),
            base: module.base,
            size: module.size,
        }
    }

    /// The module of a minidump written by [`crate::minidump::write`], named as Breakpad names it:
    /// the debug id from its build id (`unwind_dwarf::breakpad::breakpad_id`), empty for a module
    /// without one.
    pub fn from_dump_module(module: &DumpModule) -> TraceModule {
        let id = if module.build_id.is_empty() {
            String::new()
        } else {
            unwind_dwarf::breakpad::breakpad_id(&module.build_id).debug_id
        };
        TraceModule::new(module, id)
    }

    fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.size
    }
}

/// What Breakpad's `PathnameStripper::File` keeps: the part after the last `/` (or `\`).
fn basename(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// Breakpad's `StripSeparator`: `|` and newlines removed.
fn strip(s: &str) -> String {
    s.chars().filter(|&c| c != '|' && c != '\n').collect()
}

/// The whole `minidump_stackwalk -m` output for `threads` (each a list of frame addresses: frame
/// 0's PC, then return addresses), thread numbers being positions in `threads`. The first module
/// is the main one (Breakpad's `GetMainModule`). `lookup(address, is_caller)` names the function
/// at a frame and gives its start address (absolute): for a caller, `address` is the return
/// address, and the function to name is the one holding the call (see [`symbolizer_lookup`]).
/// No requesting thread and no crash (a sample, not a crash): `Crash|No crash||`.
pub fn machine_readable<F>(
    system: &System,
    modules: &[TraceModule],
    threads: &[&[u64]],
    lookup: F,
) -> String
where
    F: Fn(u64, bool) -> Option<(String, u64)>,
{
    let mut out = String::new();
    let _ = writeln!(
        out,
        "OS|{}|{}",
        strip(&system.os),
        strip(&system.os_version)
    );
    let _ = writeln!(
        out,
        "CPU|{}|{}|{}",
        strip(&system.cpu),
        strip(&system.cpu_info),
        system.cpu_count
    );
    out.push_str("GPU|||\n");
    out.push_str("Crash|No crash||\n");
    let main = modules.first().map(|m| m.base);
    for m in modules {
        let _ = writeln!(
            out,
            "Module|{}|{}|{}|{}|0x{:08x}|0x{:08x}|{}",
            strip(basename(&m.code_file)),
            strip(&m.version),
            strip(basename(&m.debug_file)),
            strip(&m.debug_id),
            m.base,
            m.base.wrapping_add(m.size).wrapping_sub(1),
            u8::from(Some(m.base) == main)
        );
    }
    out.push('\n');
    for (thread, frames) in threads.iter().enumerate() {
        for (index, &addr) in frames.iter().enumerate() {
            out.push_str(&frame_line(thread, index, addr, modules, &lookup));
            out.push('\n');
        }
    }
    out
}

/// One frame line, `thread|frame|module|function|source file|line|offset` (without the newline),
/// as [`machine_readable`] prints it: frame 0's address is its PC, a caller's is its return
/// address.
pub fn frame_line<F>(
    thread: usize,
    index: usize,
    addr: u64,
    modules: &[TraceModule],
    lookup: F,
) -> String
where
    F: Fn(u64, bool) -> Option<(String, u64)>,
{
    let caller = index > 0;
    let at = if caller { addr.wrapping_sub(1) } else { addr };
    let Some(module) = modules.iter().find(|m| m.contains(at)) else {
        return format!("{thread}|{index}|||||0x{addr:x}");
    };
    let name = strip(basename(&module.code_file));
    match lookup(addr, caller).filter(|(f, _)| !f.is_empty()) {
        Some((function, start)) => format!(
            "{thread}|{index}|{name}|{}|||0x{:x}",
            strip(&function),
            addr.wrapping_sub(start)
        ),
        None => format!(
            "{thread}|{index}|{name}||||0x{:x}",
            addr.wrapping_sub(module.base)
        ),
    }
}

/// A `lookup` for [`machine_readable`] backed by a [`Symbolizer`]: frame 0 at its address; a
/// caller at `return address - 1` (the call), or at the return address itself when no function
/// covers the byte before it (a signal trampoline, as in
/// [`Symbolizer::lookup_return_address`]).
pub fn symbolizer_lookup(sym: &Symbolizer) -> impl Fn(u64, bool) -> Option<(String, u64)> + '_ {
    move |addr, caller| {
        let probe = |a: u64| {
            let s = sym.lookup(a)?;
            Some((s.function?.to_string(), a.wrapping_sub(s.offset)))
        };
        if caller {
            probe(addr.wrapping_sub(1)).or_else(|| probe(addr))
        } else {
            probe(addr)
        }
    }
}
