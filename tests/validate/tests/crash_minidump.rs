//! A crash in a signal handler, written as a minidump by a crash handler and walked by our
//! unwinder and by rust-minidump's Breakpad-compatible walker, on x86_64 (natively) and armv7
//! (under qemu-arm).
//!
//! `tests/programs/crash.c`: `main` → `outer` → `inner` → `raise(SIGUSR1)`, and the SIGUSR1
//! handler `on_usr1` calls a null function pointer. The test agent's crash handler
//! (`agent_install_crash_handler`, tests/agent/src/crash.rs) unwinds the crashed thread in its
//! SIGSEGV handler and writes a minidump with those frames (`UNWOUND_STREAM`), then the process
//! dies of SIGSEGV. Checked:
//! - the process died of SIGSEGV and the minidump exists;
//! - our walk, named with the module files' symbols: frame 0 is PC 0, then `on_usr1`, the signal
//!   trampoline (glibc's restorer) and libc's `raise` frames, then `inner`, `outer`, `main`, and
//!   it ends where stacks end; unwinding the minidump's registers and stack copy again, offline,
//!   gives the same frames;
//! - Breakpad's walk (`minidump_processor::process_minidump`) reaches `main` with our exported
//!   STACK CFI, and its frames equal ours up to `main`, but for what follows.
//!
//! rust-minidump (0.27) has no rule for a frame 0 whose PC is in no module (a call through a null
//! pointer): its CFI step finds no module at PC 0, its frame-pointer step fails (x86_64: `rbp`
//! is no frame pointer here; 32-bit ARM: used on iOS only), so the caller comes from its stack
//! scan, which accepts a stack word only where the module's symbol file names a function
//! (`instruction_seems_valid_by_symbols`). Hence:
//! - With our exported files alone (`STACK CFI` only, no `FUNC`/`PUBLIC` names) the scan accepts
//!   nothing and the walk is frame 0 alone, on both architectures (printed, not asserted). The
//!   walk checked uses our `STACK` records with dump_syms's names
//!   (`Stores::named_ours_supplier`), as a symbol server would hold them.
//! - x86_64: the `call` pushed the return address, so the scan's first word (at `rsp`) is
//!   `on_usr1`'s: frame 1 is right (found by scanning), every later frame is found by CFI and
//!   the walk equals ours.
//! - 32-bit ARM: `blx` left the return address in LR only, which the scan never reads; the
//!   first word it accepts is `on_usr1`'s saved LR (the restorer's address, at the top of its
//!   frame, so the SP it infers is the right one), so Breakpad's walk has no `on_usr1` frame
//!   and from there on, by CFI, equals ours. The test asserts exactly that: Breakpad's frames
//!   are ours without frame 1.

use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use minidump_unwind::{FrameTrust, Symbolizer};
use unwind_dwarf::Architecture;
use unwind_test_support::target::Target;
use unwind_validate::programs::{available, target_of};
use unwind_validate::run::frame_names;
use unwind_validate::sample::Sample;
use unwind_validate::stores::{Stores, Symbols};
use unwind_validate::tools::{dump_syms, workspace_root};
use unwind_validate::traces::Traces;
use unwind_validate::walk::{breakpad_walk, BreakpadFrame, Tables};

/// Builds tests/programs/crash.c for `t` with `-O2 -g`, linked with the agent in `agent`.
fn build(t: &Target, agent: &Path, out: &Path) -> PathBuf {
    let src = workspace_root().join("tests").join("programs");
    let exe = out.join("crash");
    unwind_test_support::run(
        Command::new(t.cc())
            .args(["-O2", "-g", "-o"])
            .arg(&exe)
            .arg(src.join("crash.c"))
            .arg(format!("-I{}", src.display()))
            .arg(format!("-L{}", agent.display()))
            .arg("-lunwind_agent")
            // DT_RPATH, not RUNPATH: cargo test's LD_LIBRARY_PATH may name another agent build.
            .arg("-Wl,--disable-new-dtags")
            .arg(format!("-Wl,-rpath,{}", agent.display())),
    );
    exe
}

/// Runs `exe` (under its emulator) with the minidump's path `dump`, without a core file, and
/// checks that it died of SIGSEGV.
fn crash(t: &Target, exe: &Path, dump: &Path, out: &Path) {
    let _ = std::fs::remove_file(dump);
    let mut cmd = t.command(exe, &[]);
    cmd.arg(dump).current_dir(out);
    // SAFETY: the closure runs in the child between fork and exec and only calls setrlimit,
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    println!("{} crash: {} ({})", t.name, o.status, stderr.trim());
    // qemu-user dies of the signal its guest died of.
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGSEGV),
        "{}: the program did not die of SIGSEGV: {}\n{stderr}",
        t.name,
        o.status
    );
    assert!(
        dump.exists(),
        "{}: no minidump at {}\n{stderr}",
        t.name,
        dump.display()
    );
}

/// Frames as `module!function` (`?!0x...` for an address in no module).
fn named(names: &[(String, String)]) -> Vec<String> {
    names
        .iter()
        .map(|(m, f)| {
            if m == "?" {
                f.clone()
            } else {
                format!("{m}!{f}")
            }
        })
        .collect()
}

/// Prints a walk, one frame a line.
fn print_walk(title: &str, pcs: &[u64], names: &[String], trust: Option<&[BreakpadFrame]>) {
    println!("  {title}:");
    for (i, (pc, name)) in pcs.iter().zip(names).enumerate() {
        let how = trust
            .and_then(|t| t.get(i))
            .map_or_else(String::new, |f| format!(" ({:?})", f.trust));
        println!("    {i:2} {pc:#010x} {name}{how}");
    }
}

fn check(arch: Architecture) {
    let t = target_of(arch);
    let root = workspace_root();
    let agent = unwind_test_support::build_agent(&root, t);
    let out = root.join("target").join("crash-minidump").join(t.name);
    std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let exe = build(t, &agent, &out);
    let dump = out.join("crash.dmp");
    crash(t, &exe, &dump, &out);

    let s = Sample::load(&dump).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.arch, arch);
    let mut traces = Traces::default();
    let sym = traces.symbolizer(&s);
    let ours = named(&frame_names(&s, sym, &s.ours));
    println!("{}: {}", t.name, dump.display());
    print_walk(
        &format!("ours, in the crash handler (stop {:?})", s.stop),
        &s.ours,
        &ours,
        None,
    );

    // Our walk: PC 0, on_usr1, the restorer, libc's raise, inner, outer, main, to the end.
    let pc0 = s.ours.first().map(|pc| pc & !1);
    assert_eq!(pc0, Some(0), "{}: frame 0 is not PC 0: {ours:?}", t.name);
    assert_eq!(
        ours.get(1).map(String::as_str),
        Some("crash!on_usr1"),
        "{}: frame 1: {ours:?}",
        t.name
    );
    let inner = ours
        .iter()
        .position(|f| f == "crash!inner")
        .unwrap_or_else(|| panic!("{}: no inner in {ours:?}", t.name));
    assert_eq!(
        ours.get(inner..inner + 3),
        Some(
            &[
                "crash!inner".to_string(),
                "crash!outer".into(),
                "crash!main".into()
            ][..]
        ),
        "{}: {ours:?}",
        t.name
    );
    let main = inner + 2;
    // Between on_usr1 and inner: the signal trampoline and raise's frames, all in libc.
    assert!(
        ours.get(2)
            .is_some_and(|f| f.starts_with("libc.so.6!") && f.contains("restore")),
        "{}: frame 2 is not glibc's signal restorer: {ours:?}",
        t.name
    );
    assert!(
        inner > 3 && ours[2..inner].iter().all(|f| f.starts_with("libc.so.6!")),
        "{}: not libc's frames between the restorer and inner: {ours:?}",
        t.name
    );
    assert!(
        s.stop.is_complete(),
        "{}: our walk ended with {:?}",
        t.name,
        s.stop
    );
    // The minidump holds what the walk needs: our unwinder over its registers and stack copy.
    let offline = Tables::default()
        .walk(&s)
        .unwrap_or_else(|| panic!("{}: no offline walk", t.name));
    assert_eq!(
        (&offline.frames, offline.stop),
        (&s.ours, s.stop),
        "{}: the offline walk of the minidump differs from the handler's",
        t.name
    );

    // Breakpad's walk.
    let dump_syms = dump_syms();
    if !unwind_test_support::tool_runs(&dump_syms.to_string_lossy()) {
        unwind_test_support::missing(&format!(
            "Mozilla's dump_syms ({}) for Breakpad's walk of the crash on {}",
            dump_syms.display(),
            t.name
        ));
        return;
    }
    let stores = Stores::build(&out.join("symbols"), &s.modules, arch, &dump_syms);
    for m in stores.modules.values() {
        for n in &m.notes {
            println!("  symbol files of {}: {n}", m.module.name());
        }
    }
    let walk =
        |supplier| breakpad_walk(&s, &Symbolizer::new(supplier)).unwrap_or_else(|e| panic!("{e}"));
    let alone = walk(stores.supplier(Symbols::Ours));
    let pcs: Vec<u64> = alone.iter().map(|f| f.address).collect();
    print_walk(
        "Breakpad, our STACK CFI files alone (no names: its scan accepts nothing)",
        &pcs,
        &named(&frame_names(&s, sym, &pcs)),
        Some(&alone),
    );
    let theirs = walk(stores.named_ours_supplier(&out.join("symbols").join("named")));
    let pcs: Vec<u64> = theirs.iter().map(|f| f.address).collect();
    let names = named(&frame_names(&s, sym, &pcs));
    print_walk(
        "Breakpad, our STACK CFI with dump_syms's names",
        &pcs,
        &names,
        Some(&theirs),
    );
    // What Breakpad's walk must be up to main: ours, but on ARM without on_usr1 (its return
    // address is only in LR; see the file's documentation).
    let mut want: Vec<(u64, String)> = s.ours.iter().copied().zip(ours.clone()).collect();
    want.truncate(main + 1);
    if arch == Architecture::Arm {
        want.remove(1);
    }
    let got: Vec<(u64, String)> = pcs.iter().copied().zip(names.clone()).collect();
    assert_eq!(
        got.get(..want.len()),
        Some(&want[..]),
        "{}: Breakpad's walk up to main differs from ours (Breakpad {names:?}, ours {ours:?})",
        t.name
    );
    // Frame 1 by scanning (nothing else is possible from PC 0), every other by our CFI.
    let trusts: Vec<FrameTrust> = theirs.iter().take(want.len()).map(|f| f.trust).collect();
    let mut want_trust = vec![FrameTrust::Context, FrameTrust::Scan];
    want_trust.resize(want.len(), FrameTrust::CallFrameInfo);
    assert_eq!(
        trusts, want_trust,
        "{}: how Breakpad found its frames",
        t.name
    );
}

#[test]
fn x86_64_crash_in_a_signal_handler_walks_to_main() {
    if !available(Architecture::X86_64, "the x86_64 crash test") {
        return;
    }
    check(Architecture::X86_64);
}

#[test]
fn armv7_crash_in_a_signal_handler_walks_to_main() {
    if !available(Architecture::Arm, "the armv7 crash test") {
        return;
    }
    check(Architecture::Arm);
}
