//! What samples taken here need from this process and machine once sampling is over: the
//! modules and machine a minidump lists, and the symbols of the loaded modules. None of it is
//! async-signal-safe.

#[cfg(feature = "minidump")]
use unwind_samples::minidump::{DumpModule, SystemInfo};
use unwind_samples::offline::ModuleFile;
use unwind_samples::symbolize::Symbolizer;

/// A symbolizer for the modules of the published table (the vdso's symbols read from its
/// image in memory).
pub fn symbolizer() -> Symbolizer {
    let modules: Vec<ModuleFile> = crate::loaded_modules()
        .iter()
        .map(ModuleFile::from)
        .collect();
    Symbolizer::new(&modules, crate::vdso_image().as_deref())
}

/// The modules of the current process as minidump modules, in `dl_iterate_phdr` order (the
/// main program first), then the signal trampoline page the published table found outside them
/// (qemu-user's on aarch64, `[sigreturn]`), whose first byte is the return address of every
/// signal handler: a frame of the dump's walks, in a module of the dump. (Other executable
/// memory the loader does not list is left out: without symbols or rules there, Breakpad's
/// walker would scan on through it.) Not async-signal-safe: call it outside signal handlers.
#[cfg(feature = "minidump")]
pub fn dump_modules() -> Vec<DumpModule> {
    let mut out: Vec<DumpModule> = crate::modules::loaded_now()
        .iter()
        .map(DumpModule::from)
        .collect();
    out.extend(
        crate::loaded_modules()
            .iter()
            .filter(|m| {
                m.kind == crate::ModuleKind::Anonymous && m.name == crate::mappings::SIGRETURN
            })
            .map(DumpModule::from),
    );
    out
}

/// This machine as a minidump's SystemInfo stream describes it: the kernel (`uname -srvm` as
/// the CSD version, its version numbers), the number of processors and the CPU (x86_64: cpuid
/// family, model and stepping; ARM: the hardware capabilities). Not async-signal-safe (it
/// allocates): call it when writing minidumps, outside signal handlers.
#[cfg(feature = "minidump")]
pub fn system_info() -> SystemInfo {
    let uts = uname();
    let mut version = uts
        .release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse().unwrap_or(0));
    let kernel = [0; 3].map(|_| version.next().unwrap_or(0));
    let csd = [&uts.sysname, &uts.release, &uts.version, &uts.machine]
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let cpus = u8::try_from(cpus.max(1)).unwrap_or(u8::MAX);
    SystemInfo::linux(crate::arch::cpu_info(), cpus, kernel, csd)
}

#[cfg(feature = "minidump")]
struct Uname {
    sysname: String,
    release: String,
    version: String,
    machine: String,
}

#[cfg(feature = "minidump")]
fn uname() -> Uname {
    // SAFETY: utsname is plain data; uname fills it (or fails, leaving zeros).
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid utsname to write.
    let ok = unsafe { libc::uname(&mut uts) } == 0;
    let text = |field: &[libc::c_char]| -> String {
        if !ok {
            return String::new();
        }
        let bytes: Vec<u8> = field
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c.to_ne_bytes()[0])
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Uname {
        sysname: text(&uts.sysname),
        release: text(&uts.release),
        version: text(&uts.version),
        machine: text(&uts.machine),
    }
}
