//! The real programs the validation samples: built, run under the test agent (natively on
//! x86_64, under qemu-user for armv7 and aarch64), each leaving minidumps of its samples.
//!
//! The agent (tests/agent) unwinds every sample in its SIGPROF handler; with
//! `AGENT_SAMPLES_DIR` it also copies the registers and stack of every `AGENT_SAMPLES_EVERY`-th
//! sample, up to `AGENT_SAMPLES_MAX`, and writes each as a minidump holding the frames it
//! found (`unwind_samples::minidump::UNWOUND_STREAM`).

use std::path::{Path, PathBuf};
use std::process::Command;

use unwind_dwarf::Architecture;
use unwind_test_support::call_graph::{self, Graph};
use unwind_test_support::target::{self, Target};

use crate::tools::workspace_root;

/// `arch`'s row of the targets table (`tests/support/targets.tsv`): its toolchain and how its
/// programs run here (x86_64 natively; armv7 under `qemu-arm -L` its sysroot).
pub fn target_of(arch: Architecture) -> &'static Target {
    target::by_elf_machine(arch.elf_machine().0)
        .unwrap_or_else(|| panic!("no row of the targets table for {}", arch.name()))
}

/// Where the sampled process's library paths are found on this host, for `arch`'s programs
/// (its sysroot when run under an emulator).
pub fn sysroot(arch: Architecture) -> Option<&'static Path> {
    target_of(arch).sysroot.map(Path::new)
}

/// One program's samples.
#[derive(Clone, Debug)]
pub struct ProgramRun {
    /// Architecture.
    pub arch: Architecture,
    /// A short name (`C -O2`, `Rust release`, ...).
    pub name: String,
    /// The directory holding its `NNNN.dmp` files.
    pub samples: PathBuf,
    /// Its known call graph, if it has one: where the two walks differ, it says which is
    /// wrong.
    pub known: Option<KnownGraph>,
}

/// A program's call graph and how its frames are named for it.
#[derive(Clone, Debug)]
pub struct KnownGraph {
    /// The graph.
    pub graph: Graph,
    /// The file names of the program's own modules (the others are `[ext]`).
    pub own: Vec<String>,
    /// How its function names map to the graph's.
    pub names: Names,
}

/// How a program's function names map to its graph's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// As they are (C).
    C,
    /// By [`call_graph::cpp_name`].
    Cpp,
    /// By [`call_graph::rust_name`].
    Rust,
}

impl KnownGraph {
    /// The graph's tokens for a stack given innermost first as `(module file name, function)`.
    pub fn tokens(&self, frames: &[(&str, &str)]) -> Vec<String> {
        let own = |m: &str| self.own.iter().any(|o| o == m);
        let name = |f: &str| match self.names {
            Names::C => f.to_string(),
            Names::Cpp => call_graph::cpp_name(f),
            Names::Rust => call_graph::rust_name(f),
        };
        call_graph::tokens(frames, &own, &name)
    }
}

/// How many samples to take and how long to run.
#[derive(Clone, Debug)]
pub struct Sampling {
    /// Minidumps per program.
    pub per_program: usize,
    /// Keep every n-th sample, so that the kept ones spread over the run.
    pub every: usize,
    /// Run time of each program, seconds.
    pub seconds: f64,
    /// Sampling rate per thread.
    pub hz: u32,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            per_program: 400,
            every: 4,
            seconds: 2.0,
            hz: 1000,
        }
    }
}

/// Runs `cmd`, failing with its output if it fails.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Whether `arch`'s compilers (and emulator) are installed, reporting the missing ones
/// ([`unwind_test_support::missing`]: a failure under CI) for `purpose`. scripts/setup
/// installs them.
pub fn available(arch: Architecture, purpose: &str) -> bool {
    target_of(arch).usable(purpose, &[])
}

/// Builds the agent and the Rust workload in release mode for `arch` in the workspace
/// ([`Target::release_build`]); returns the directory holding them.
fn build_agent(arch: Architecture) -> Result<PathBuf, String> {
    let (mut cmd, dir) = target_of(arch).release_build(&workspace_root(), "unwind-test-agent");
    run(&mut cmd)?;
    Ok(dir)
}

/// Builds the C workload (tests/programs: workload.c, its shared library, and on x86_64 the
/// hand-written CFI of frames.S) with `flags`; returns the executable.
fn build_c(
    arch: Architecture,
    flags: &[&str],
    tag: &str,
    agent: &Path,
    out: &Path,
) -> Result<PathBuf, String> {
    let src = workspace_root().join("tests").join("programs");
    let gcc = target_of(arch).cc();
    let lib = format!("validate-{tag}");
    run(Command::new(&gcc)
        .args(flags)
        .args(["-fPIC", "-shared", "-o"])
        .arg(out.join(format!("lib{lib}.so")))
        .arg(src.join("shlib.c")))?;
    let exe = out.join(format!("validate-workload-{tag}"));
    let mut cmd = Command::new(&gcc);
    cmd.args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(src.join("workload.c"));
    if arch == Architecture::X86_64 {
        cmd.arg(src.join("frames.S"));
    }
    run(cmd
        .arg(format!("-I{}", src.display()))
        .arg(format!("-L{}", out.display()))
        .arg(format!("-l{lib}"))
        .arg(format!("-L{}", agent.display()))
        .arg("-lunwind_agent")
        // DT_RPATH, not RUNPATH: cargo test's LD_LIBRARY_PATH may name another agent build.
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}:{}", out.display(), agent.display()))
        .arg("-lpthread"))?;
    Ok(exe)
}

/// Builds the C++ workload (tests/programs/workload.cpp: std::thread, std::sort, std::function,
/// iostreams, exceptions) at -O2 with -fomit-frame-pointer; returns the executable.
fn build_cpp(arch: Architecture, agent: &Path, out: &Path) -> Result<PathBuf, String> {
    let src = workspace_root().join("tests").join("programs");
    let gxx = target_of(arch).cxx();
    let exe = out.join("validate-workload-cpp");
    run(Command::new(gxx)
        .args(["-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o"])
        .arg(&exe)
        .arg(src.join("workload.cpp"))
        .arg(format!("-I{}", src.display()))
        .arg(format!("-L{}", agent.display()))
        .arg("-lunwind_agent")
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", agent.display())))?;
    Ok(exe)
}

/// Runs `exe` (under its emulator for a cross target) with the agent capturing minidumps into
/// `samples`.
fn sample(arch: Architecture, exe: &Path, samples: &Path, s: &Sampling) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(samples);
    std::fs::create_dir_all(samples).map_err(|e| format!("{}: {e}", samples.display()))?;
    let mut cmd = target_of(arch).command(exe, &[]);
    run(cmd
        .env("AGENT_SAMPLES_DIR", samples)
        .env("AGENT_SAMPLES_MAX", s.per_program.to_string())
        .env("AGENT_SAMPLES_EVERY", s.every.to_string())
        .arg(samples.join("report.txt"))
        .arg(s.seconds.to_string())
        .arg(s.hz.to_string()))?;
    // The vdso image (one per boot and architecture), where `host_path` looks for it.
    let vdso = samples.join(VDSO);
    if vdso.exists() {
        std::fs::copy(&vdso, arch_dir(arch).join(VDSO)).map_err(|e| format!("{VDSO}: {e}"))?;
    }
    Ok(())
}

/// The vdso's name in module lists, and the file its image is saved as.
const VDSO: &str = "linux-vdso.so.1";

/// Builds and samples the programs of `arch`: the C workload at -O0 and -O2 (on armv7, -O2 as
/// ARM and as Thumb code) with -g and -fomit-frame-pointer, and built the ordinary way (-O2
/// alone, and with -fno-omit-frame-pointer; on armv7 as ARM and as Thumb code; on aarch64 with
/// -mbranch-protection too), the C++ workload at -O2 with -fomit-frame-pointer, and the Rust
/// release workload.
pub fn sample_programs(arch: Architecture, s: &Sampling) -> Result<Vec<ProgramRun>, String> {
    let agent = build_agent(arch)?;
    let out = arch_dir(arch);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let variants: &[(&str, &[&str])] = match arch {
        Architecture::X86_64 => &[
            ("O0", &["-O0", "-g", "-fomit-frame-pointer"]),
            ("O2", &["-O2", "-g", "-fomit-frame-pointer"]),
            // Built the ordinary way: the distribution's defaults, no -g.
            ("ordinary", &["-O2"]),
            ("ordinary-fp", &["-O2", "-fno-omit-frame-pointer"]),
        ],
        Architecture::Arm => &[
            (
                "arm-O2",
                &[
                    "-O2",
                    "-marm",
                    "-g",
                    "-fomit-frame-pointer",
                    "-funwind-tables",
                ],
            ),
            (
                "thumb-O2",
                &[
                    "-O2",
                    "-mthumb",
                    "-g",
                    "-fomit-frame-pointer",
                    "-funwind-tables",
                ],
            ),
            // Built the ordinary way: Debian's armhf defaults, no -funwind-tables, no -g (the
            // program's own functions have no unwind tables; their rules come from their
            // instructions).
            ("ordinary-arm", &["-O2", "-marm"]),
            ("ordinary-thumb", &["-O2", "-mthumb"]),
            (
                "ordinary-arm-fp",
                &["-O2", "-marm", "-fno-omit-frame-pointer"],
            ),
            (
                "ordinary-thumb-fp",
                &["-O2", "-mthumb", "-fno-omit-frame-pointer"],
            ),
        ],
        Architecture::Aarch64 => &[
            ("a64-O0", &["-O0", "-g", "-fomit-frame-pointer"]),
            ("a64-O2", &["-O2", "-g", "-fomit-frame-pointer"]),
            // Built the ordinary way (Debian's arm64 defaults), with frame pointers, and with
            // return addresses signed (qemu-aarch64's default CPU implements pointer
            // authentication).
            ("ordinary-a64", &["-O2"]),
            ("ordinary-a64-fp", &["-O2", "-fno-omit-frame-pointer"]),
            ("a64-pac", &["-O2", "-mbranch-protection=standard"]),
        ],
    };
    let mut runs = Vec::new();
    let (c_graph, rust_graph) = match arch {
        Architecture::X86_64 => (call_graph::c_graph(), call_graph::rust_graph()),
        Architecture::Arm => (call_graph::c_graph_arm(), call_graph::rust_graph_arm()),
        Architecture::Aarch64 => (call_graph::c_graph_arm(), call_graph::rust_graph_arm()),
    };
    for (tag, flags) in variants {
        let exe = build_c(arch, flags, tag, &agent, &out)?;
        let dir = out.join(format!("c-{tag}"));
        sample(arch, &exe, &dir, s)?;
        runs.push(ProgramRun {
            arch,
            name: format!("C workload {tag}"),
            samples: dir,
            known: Some(KnownGraph {
                graph: c_graph.clone(),
                own: vec![
                    format!("validate-workload-{tag}"),
                    format!("libvalidate-{tag}.so"),
                ],
                names: Names::C,
            }),
        });
    }
    let exe = build_cpp(arch, &agent, &out)?;
    let dir = out.join("cpp");
    sample(arch, &exe, &dir, s)?;
    runs.push(ProgramRun {
        arch,
        name: "C++ workload -O2".into(),
        samples: dir,
        known: Some(KnownGraph {
            graph: call_graph::cpp_graph(),
            own: vec!["validate-workload-cpp".into()],
            names: Names::Cpp,
        }),
    });
    let dir = out.join("rust");
    sample(arch, &agent.join("rust-workload"), &dir, s)?;
    runs.push(ProgramRun {
        arch,
        name: "Rust workload (release)".into(),
        samples: dir,
        known: Some(KnownGraph {
            graph: rust_graph,
            own: vec!["rust-workload".into()],
            names: Names::Rust,
        }),
    });
    Ok(runs)
}

/// The minidumps in `dir`, sorted.
pub fn minidumps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "dmp"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The file on this host for a module path recorded by the sampled process: under the
/// sysroot first (a process under `qemu-arm -L` names its libraries as the guest sees them);
/// for the vdso (a name, not a path), the image the agent saved with the samples.
pub fn host_path(recorded: &str, arch: Architecture) -> PathBuf {
    if !recorded.contains('/') {
        return arch_dir(arch).join(recorded);
    }
    let recorded = PathBuf::from(recorded);
    if let Some(root) = sysroot(arch) {
        let p = root.join(recorded.strip_prefix("/").unwrap_or(&recorded));
        if p.exists() {
            return p;
        }
        if let Some(name) = recorded.file_name() {
            let p = root.join("lib").join(name);
            if p.exists() {
                return p;
            }
        }
    }
    recorded
}

/// Where `arch`'s programs and samples go.
pub fn arch_dir(arch: Architecture) -> PathBuf {
    workspace_root()
        .join("target")
        .join("validation")
        .join(arch.name())
}
