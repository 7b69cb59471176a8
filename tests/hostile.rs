//! The unwinder inside a hostile program (tests/hostile/hostile.c): a thread that smashes its own
//! return address while it runs, code in an executable page no module describes (with and
//! without a frame pointer), a signal handler on a sigaltstack, a coroutine on a malloc()ed
//! stack, a thread on a stack the program allocated, nested signal handlers, a library unloaded
//! while its code is on a stack, and threads exiting while they are sampled. The test agent
//! samples every thread at 5 kHz: natively on x86_64, and under qemu-arm on armv7.
//!
//! Checked, on each architecture:
//! - the program exits normally and prints the same checksums as without sampling;
//! - every sample ends with a stop reason, and the kinds of stops the scenarios cause occur
//!   (`ReadFailed` on the switched stacks, `OutsideModules` at smashed return addresses, and in
//!   the JIT page until a refresh makes it a module of the table);
//! - every frame after the first is in a module the process has loaded, except the PC a signal
//!   frame restores (exact, wherever it is), return addresses into the unloaded library (which
//!   the table still held when the sample was taken), and return addresses into the JIT page
//!   (a module of the table once a refresh found it, crossed by its frame pointer, as on every
//!   architecture a walk may rightly do; the program reports the page, as the library);
//! - every scenario was sampled.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use unwind_test_support::target::{self, Target};
use unwind_test_support::{build_agent, run, Checks};

const HZ: &str = "5000";

/// Functions that mark each scenario's samples (in their stacks).
const SCENARIOS: [(&str, &str); 6] = [
    ("smash", "smashed"),
    ("jit", "jit_callback"),
    ("nested", "nested_inner"),
    ("userstack", "user_stack_work"),
    ("unmap", "after_dlclose"),
    ("churn", "short_lived"),
];

/// glibc's signal return trampolines: the frame after one is the interrupted PC.
const TRAMPOLINES: [&str; 3] = [
    "__restore_rt",
    "__default_rt_sa_restorer",
    "__default_sa_restorer",
];

/// What one architecture needs: its row of the targets table, the agent, and how long to run
/// (under an emulator, a tenth of the rounds).
struct Arch {
    target: &'static Target,
    agent: PathBuf,
    rounds: &'static str,
}

impl Arch {
    fn command(&self, exe: &Path) -> Command {
        self.target.command(exe, &[])
    }

    fn name(&self) -> &'static str {
        self.target.name
    }
}

/// Builds the program and its library for `arch` into `out`.
fn build(arch: &Arch, src: &Path, out: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(out).expect("mkdir");
    let plugin = out.join("libhostile-plugin.so");
    run(Command::new(arch.target.cc())
        .args(["-O2", "-fPIC", "-shared", "-o"])
        .arg(&plugin)
        .arg(src.join("plugin.c")));
    let exe = out.join("hostile");
    run(Command::new(arch.target.cc())
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(src.join("hostile.c"))
        .arg(format!(
            "-I{}",
            src.parent().unwrap().join("programs").display()
        ))
        .arg(format!("-L{}", arch.agent.display()))
        .arg("-lunwind_agent")
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", arch.agent.display()))
        .args(["-lpthread", "-ldl"]));
    (exe, plugin)
}

/// One sample of the agent's report.
struct Sample<'a> {
    stop: &'a str,
    /// `(module, function)`, innermost first.
    frames: Vec<(&'a str, &'a str)>,
}

/// The samples of a report, and the address ranges it names (`# plugin LO HI`, `# jit LO HI`).
fn parse(report: &str) -> (Vec<Sample<'_>>, BTreeMap<&str, (u64, u64)>) {
    let mut samples = Vec::new();
    let mut ranges = BTreeMap::new();
    for line in report.lines() {
        for what in ["plugin", "jit"] {
            if let Some(range) = line.strip_prefix(&format!("# {what} ")) {
                let mut it = range
                    .split_whitespace()
                    .map(|v| u64::from_str_radix(v, 16).unwrap_or(0));
                ranges.insert(what, (it.next().unwrap_or(0), it.next().unwrap_or(0)));
            }
        }
        if line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(3, ' ');
        let stop = parts
            .next()
            .and_then(|s| s.strip_prefix("stop="))
            .unwrap_or("");
        let _frames = parts.next();
        let frames = parts
            .next()
            .unwrap_or("")
            .split(';')
            .filter(|f| !f.is_empty())
            .map(|f| f.split_once('!').unwrap_or(("?", f)))
            .collect();
        samples.push(Sample { stop, frames });
    }
    (samples, ranges)
}

/// The address of an unsymbolized frame (`?+0x...`).
fn address(function: &str) -> Option<u64> {
    u64::from_str_radix(function.strip_prefix("?+0x")?, 16).ok()
}

fn check_arch(checks: &mut Checks, arch: &Arch, src: &Path, out: &Path) {
    println!("{}:", arch.name());
    let (exe, plugin) = build(arch, src, out);
    let reference = out.join("reference.txt");
    let unsampled = arch
        .command(&exe)
        .arg(&reference)
        .args([arch.rounds, "0"])
        .arg(&plugin)
        .output()
        .expect("run the program");
    checks.check(
        unsampled.status.success(),
        format!(
            "{}: the program runs unsampled ({})",
            arch.name(),
            unsampled.status
        ),
    );
    let report_path = out.join("report.txt");
    let sampled = arch
        .command(&exe)
        .arg(&report_path)
        .args([arch.rounds, HZ])
        .arg(&plugin)
        .output()
        .expect("run the program");
    checks.check(
        sampled.status.success(),
        format!(
            "{}: the program runs sampled at {HZ} Hz ({}; {})",
            arch.name(),
            sampled.status,
            String::from_utf8_lossy(&sampled.stderr).trim()
        ),
    );
    checks.check(
        !unsampled.stdout.is_empty() && sampled.stdout == unsampled.stdout,
        format!(
            "{}: the same output sampled and not: {:?} / {:?}",
            arch.name(),
            String::from_utf8_lossy(&sampled.stdout),
            String::from_utf8_lossy(&unsampled.stdout)
        ),
    );
    let report = std::fs::read_to_string(&report_path).unwrap_or_default();
    let (samples, ranges) = parse(&report);
    let trailer = report.lines().rev().find(|l| l.starts_with("# signals"));
    println!(
        "  {} samples; {}",
        samples.len(),
        trailer.unwrap_or("no trailer")
    );
    let mut stops: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &samples {
        *stops.entry(s.stop).or_default() += 1;
    }
    println!("  stops: {stops:?}");
    let known = unwind_in_process::StopReason::ALL.map(|r| format!("{r:?}"));
    checks.check(
        !samples.is_empty() && samples.iter().all(|s| known.iter().any(|k| k == s.stop)),
        format!("{}: every sample ends with a stop reason", arch.name()),
    );
    for expected in ["ReadFailed", "OutsideModules"] {
        checks.check(
            stops.contains_key(expected),
            format!("{}: some walks stop with {expected}", arch.name()),
        );
    }
    let in_range = |what: &str, a: u64| {
        ranges
            .get(what)
            .is_some_and(|&(lo, hi)| (lo..hi).contains(&a))
    };
    let mut outside = Vec::new();
    for s in &samples {
        for (i, w) in s.frames.windows(2).enumerate() {
            let ((_, callee), (module, function)) = (w[0], w[1]);
            if module != "?" || TRAMPOLINES.contains(&callee) {
                continue;
            }
            if address(function).is_some_and(|a| in_range("plugin", a) || in_range("jit", a)) {
                continue;
            }
            outside.push(format!(
                "frame {}: {}",
                i + 1,
                s.frames
                    .iter()
                    .map(|f| format!("{}!{}", f.0, f.1))
                    .collect::<Vec<_>>()
                    .join(";")
            ));
        }
    }
    checks.check(
        outside.is_empty(),
        format!(
            "{}: no frame after the first in no module (but a signal frame's PC, the unloaded library's code or the JIT page's): {:#?}",
            arch.name(),
            &outside[..outside.len().min(5)]
        ),
    );
    for (scenario, marker) in SCENARIOS {
        let n = samples
            .iter()
            .filter(|s| s.frames.iter().any(|f| f.1 == marker))
            .count();
        // The JIT page's own loop: frame 0 in no module.
        let n = n + match scenario {
            "jit" => samples
                .iter()
                .filter(|s| s.frames.first().is_some_and(|f| f.0 == "?"))
                .count(),
            _ => 0,
        };
        checks.check(
            n > 0,
            format!(
                "{}: the {scenario} scenario was sampled ({n} samples in {marker}{})",
                arch.name(),
                if scenario == "jit" {
                    " or the page"
                } else {
                    ""
                }
            ),
        );
    }
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let programs = root.join("target").join("test-programs");
    let src = root.join("tests").join("hostile");
    let mut checks = Checks::new();
    for t in target::all() {
        if !t.usable("the hostile program", &[]) {
            continue;
        }
        let arch = Arch {
            target: t,
            agent: build_agent(&root, t),
            rounds: if t.runner.is_some() { "100" } else { "1000" },
        };
        let out = programs.join(format!("hostile-{}", t.name));
        check_arch(&mut checks, &arch, &src, &out);
    }
    checks.finish("hostile");
}
