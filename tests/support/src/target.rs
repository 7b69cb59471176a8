//! The architectures the tests build for and run, one row each of `tests/support/targets.tsv`:
//! the Rust target, the C toolchain, where the target's libraries are on this host and how its
//! programs run here (natively, or under qemu-user). Tests take a row ([`host`], [`cross`],
//! [`by_name`], [`by_elf_machine`]) instead of spelling out a toolchain; `scripts/targets` reads
//! the same file for the shell scripts.
//!
//! ```no_run
//! use unwind_test_support::target;
//! for t in target::all() {
//!     if !t.usable("the example", &[]) {
//!         continue;
//!     }
//!     let mut cmd = t.command(std::path::Path::new("./a.out"), &[("AGENT_CLOCK", "cpu")]);
//!     assert!(cmd.status().unwrap().success(), "{}", t.name);
//! }
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::{missing, tool_runs};

/// The table, read at build time so that a test binary carries it wherever it runs.
const TABLE: &str = include_str!("../targets.tsv");

/// One architecture: a row of `targets.tsv` (whose header documents each column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// What test output and file names call it (`x86_64`, `armv7`).
    pub name: &'static str,
    /// Rust's `target_arch` for it (`std::env::consts::ARCH`: `x86_64`, `arm`).
    pub rust_arch: &'static str,
    /// The Rust target triple.
    pub rust_target: &'static str,
    /// The ELF header's `e_machine`.
    pub elf_machine: u16,
    /// Prefix of the C toolchain's commands (empty for the host's own).
    pub tool_prefix: &'static str,
    /// The root of the target's libraries on this host, given to the emulator's `-L`.
    pub sysroot: Option<&'static str>,
    /// Debian's shared libraries for the target on this host (`libc.so.6`, `libstdc++.so.6`).
    pub libdir: &'static str,
    /// The emulator that runs the target's programs on this host (`None`: natively).
    pub runner: Option<&'static str>,
    /// What the C compiler needs for unwind tables in test libraries (armv7: gcc emits no
    /// `.ARM.exidx` for C without `-funwind-tables`).
    pub c_flags: Vec<&'static str>,
    /// Debian packages holding the toolchain, libraries and emulator.
    pub packages: Vec<&'static str>,
}

/// Every row, in the table's order (the host's first).
pub fn all() -> &'static [Target] {
    static TARGETS: OnceLock<Vec<Target>> = OnceLock::new();
    TARGETS.get_or_init(|| parse(TABLE))
}

/// The row of the architecture this test runs on.
pub fn host() -> &'static Target {
    all()
        .iter()
        .find(|t| t.rust_arch == std::env::consts::ARCH)
        .unwrap_or_else(|| {
            panic!(
                "no row of tests/support/targets.tsv for this host's architecture {}",
                std::env::consts::ARCH
            )
        })
}

/// Every row but the host's: the architectures whose programs this host cross-builds and
/// runs under an emulator.
pub fn cross() -> impl Iterator<Item = &'static Target> {
    all().iter().filter(|t| !t.is_host())
}

/// The row named `name` (`armv7`); panics naming the table if there is none.
pub fn by_name(name: &str) -> &'static Target {
    all()
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no target {name:?} in tests/support/targets.tsv"))
}

/// The row for ELF machine `machine` (`EM_ARM` = 40), if the tests know it.
pub fn by_elf_machine(machine: u16) -> Option<&'static Target> {
    all().iter().find(|t| t.elf_machine == machine)
}

impl Target {
    /// Whether this is the architecture the test runs on.
    pub fn is_host(&self) -> bool {
        self.rust_arch == std::env::consts::ARCH
    }

    /// The toolchain's command `tool` (`gcc`, `objdump`, `strip`) for this target.
    pub fn tool(&self, tool: &str) -> String {
        format!("{}{tool}", self.tool_prefix)
    }

    /// The C compiler.
    pub fn cc(&self) -> String {
        self.tool("gcc")
    }

    /// The C++ compiler.
    pub fn cxx(&self) -> String {
        self.tool("g++")
    }

    /// `cargo --target`'s argument for it: `None` for the host (whose builds go to
    /// `target/release`, not `target/<triple>/release`).
    pub fn cargo_target(&self) -> Option<&'static str> {
        (!self.is_host()).then_some(self.rust_target)
    }

    /// Where `cargo build --release` [`--target`](Self::cargo_target) puts its outputs in the
    /// target directory `target_dir`.
    pub fn release_dir(&self, target_dir: &Path) -> PathBuf {
        match self.cargo_target() {
            Some(t) => target_dir.join(t).join("release"),
            None => target_dir.join("release"),
        }
    }

    /// `cargo build --release -p package` for this target, from and into the workspace `root`
    /// (its own target directory: cargo holds no lock on it while tests run, so a test's nested
    /// build shares what the other release builds compiled; tried with cargo 1.88 and 1.95), and
    /// the directory the outputs go to.
    pub fn release_build(&self, root: &Path, package: &str) -> (Command, PathBuf) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let target_dir = root.join("target");
        let mut cmd = Command::new(cargo);
        cmd.current_dir(root)
            .args(["build", "--release", "-p", package]);
        if let Some(t) = self.cargo_target() {
            cmd.args(["--target", t]);
        }
        cmd.arg("--target-dir").arg(&target_dir);
        (cmd, self.release_dir(&target_dir))
    }

    /// What goes before a program of this target on a command line to run it here: nothing on
    /// the host, else the emulator with the target's libraries (`qemu-arm -L <sysroot>`).
    pub fn launcher(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.runner.into_iter().collect();
        if let (Some(_), Some(root)) = (self.runner, self.sysroot) {
            v.extend(["-L", root]);
        }
        v
    }

    /// A command that runs the program `exe` of this target with the environment variables
    /// `env` set for the program only: directly on the host, else under the emulator
    /// ([`launcher`](Self::launcher), `-E K=V exe`: a variable of the emulator's own environment
    /// would reach the host's emulator too, an armv7 `LD_PRELOAD` say). The program's arguments
    /// are added by the caller. cargo test's `LD_LIBRARY_PATH` (which names the host's target
    /// directory) is removed.
    pub fn command(&self, exe: &Path, env: &[(&str, &str)]) -> Command {
        let mut cmd = match self.launcher().split_first() {
            Some((runner, args)) => {
                let mut c = Command::new(runner);
                c.args(args);
                for (k, v) in env {
                    c.arg("-E").arg(format!("{k}={v}"));
                }
                c.arg(exe);
                c
            }
            None => {
                let mut c = Command::new(exe);
                c.envs(env.iter().copied());
                c
            }
        };
        cmd.env_remove("LD_LIBRARY_PATH");
        cmd
    }

    /// The commands a test of this target needs, `extra` toolchain commands (`objdump`) and
    /// those always needed (the C and C++ compilers, the emulator), that do not run here.
    pub fn missing_tools(&self, extra: &[&str]) -> Vec<String> {
        let mut tools = vec![self.cc(), self.cxx()];
        tools.extend(extra.iter().map(|t| self.tool(t)));
        tools.extend(self.runner.map(str::to_string));
        tools.into_iter().filter(|t| !tool_runs(t)).collect()
    }

    /// Whether the tools of [`missing_tools`](Self::missing_tools) all run; if not, reports
    /// them as [`missing`] for `purpose` (a failure under CI) and returns false.
    #[track_caller]
    pub fn usable(&self, purpose: &str, extra: &[&str]) -> bool {
        let absent = self.missing_tools(extra);
        if absent.is_empty() {
            return true;
        }
        missing(&format!(
            "{} for {purpose} on {} (packages {})",
            absent.join(", "),
            self.name,
            self.packages.join(", ")
        ));
        false
    }
}

/// Parses the table: `#` lines are comments; each other line has the ten tab-separated columns.
fn parse(table: &'static str) -> Vec<Target> {
    let opt = |s: &'static str| (s != "-").then_some(s);
    let list = |s: &'static str| -> Vec<&'static str> {
        opt(s).map_or_else(Vec::new, |s| s.split([',', ' ']).collect())
    };
    table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let c: Vec<&'static str> = line.split('\t').collect();
            assert_eq!(c.len(), 10, "targets.tsv: not ten columns: {line:?}");
            Target {
                name: c[0],
                rust_arch: c[1],
                rust_target: c[2],
                elf_machine: c[3]
                    .parse()
                    .unwrap_or_else(|e| panic!("targets.tsv: elf_machine {:?}: {e}", c[3])),
                tool_prefix: opt(c[4]).unwrap_or(""),
                sysroot: opt(c[5]),
                libdir: c[6],
                runner: opt(c[7]),
                c_flags: list(c[8]),
                packages: list(c[9]),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_the_host_and_the_cross_targets() {
        let names: Vec<_> = all().iter().map(|t| t.name).collect();
        assert!(
            names.contains(&"x86_64") && names.contains(&"armv7"),
            "{names:?}"
        );
        let host = host();
        assert!(host.is_host() && host.runner.is_none() && host.cargo_target().is_none());
        for t in cross() {
            assert!(t.runner.is_some() && t.sysroot.is_some(), "{t:?}");
            assert_eq!(t.cargo_target(), Some(t.rust_target));
            assert!(!t.packages.is_empty(), "{t:?}");
        }
        let arm = by_name("armv7");
        assert_eq!(by_elf_machine(40), Some(arm));
        assert_eq!(arm.cc(), "arm-linux-gnueabihf-gcc");
        assert_eq!(arm.c_flags, ["-funwind-tables"]);
    }

    /// The shell scripts' reader of the table (`scripts/targets`) gives every row's fields as
    /// this one does.
    #[test]
    fn scripts_read_the_table_the_same_way() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/targets");
        let run = |args: &[&str]| {
            let out = Command::new("bash")
                .arg(&script)
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
            assert!(out.status.success(), "scripts/targets {args:?}: {out:?}");
            String::from_utf8(out.stdout)
                .unwrap()
                .trim_end()
                .to_string()
        };
        let names: Vec<&str> = all().iter().map(|t| t.name).collect();
        assert_eq!(run(&["names"]), names.join("\n"));
        let cross: Vec<&str> = cross().map(|t| t.name).collect();
        assert_eq!(run(&["cross"]), cross.join("\n"));
        for t in all() {
            let get = |column: &str| run(&["get", t.name, column]);
            assert_eq!(get("rust_arch"), t.rust_arch);
            assert_eq!(get("rust_target"), t.rust_target);
            assert_eq!(get("elf_machine"), t.elf_machine.to_string());
            assert_eq!(get("tool_prefix"), t.tool_prefix);
            assert_eq!(get("sysroot"), t.sysroot.unwrap_or(""));
            assert_eq!(get("libdir"), t.libdir);
            assert_eq!(get("runner"), t.runner.unwrap_or(""));
            assert_eq!(get("c_flags"), t.c_flags.join(","));
            assert_eq!(get("packages"), t.packages.join(","));
        }
    }

    #[test]
    fn an_emulated_program_gets_its_variables_from_the_emulator() {
        let arm = by_name("armv7");
        let cmd = arm.command(Path::new("/x/prog"), &[("LD_PRELOAD", "/x/lib.so")]);
        assert_eq!(cmd.get_program(), "qemu-arm");
        let args: Vec<_> = cmd.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "-L",
                "/usr/arm-linux-gnueabihf",
                "-E",
                "LD_PRELOAD=/x/lib.so",
                "/x/prog"
            ]
        );
        assert_eq!(
            arm.launcher(),
            ["qemu-arm", "-L", "/usr/arm-linux-gnueabihf"]
        );
        assert!(host().launcher().is_empty());
        let cmd = host().command(Path::new("/x/prog"), &[("K", "V")]);
        assert_eq!(cmd.get_program(), "/x/prog");
        assert!(cmd
            .get_envs()
            .any(|(k, v)| k == "K" && v == Some("V".as_ref())));
    }
}
