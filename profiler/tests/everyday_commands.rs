//! Everyday commands under `unwind-profiler record`, each ending its own way, each giving one
//! set of output files that every reader takes: `go tool pprof` reads the pprof file and counts
//! as many samples as the folded stacks hold, the flame graph is well-formed SVG, and the
//! Firefox profile has the structure the Firefox Profiler reads, with the same samples.
//!
//! - **python3** as the user's shell finds it (through pyenv's shim, a chain of about a dozen
//!   processes, where pyenv is installed): the interpreter's samples are most of the profile.
//! - **`gcc -O2 -c`**: the driver and cc1 in one profile, told apart.
//! - **`xz -9`** stopped by Ctrl-C after 3 s: exit status 130, the profile of those 3 s kept.
//! - **`sh -c 'CMD; exit 0'`** with dash (whose `exit` is an `_exit`: nothing runs at exit).
//! - **A process killed by `SIGKILL`** (perl killing itself): exit status 137, its profile kept.
//! - **perl**, allocation-heavy: glibc's malloc keeps its single-thread path (no thread of ours
//!   in the program), so `_int_malloc` and `_int_free` take the same share of samples as under
//!   `perf record` on the same script, within 1 point (they took about 2 points more with a
//!   collector thread in the program).
//!
//! Needs python3, gcc, xz, dash, perl, perf and go (a missing one fails under `CI=true`, skips
//! visibly elsewhere), and the release build of the command and the preload library:
//! `cargo build --release -p unwind-profiler -p unwind-profiler-preload && cargo test --release
//! -p unwind-profiler --test everyday_commands`.

#[path = "common/firefox.rs"]
mod firefox;
#[path = "common/record.rs"]
mod record_command;
#[path = "common/runs.rs"]
mod runs;
#[path = "common/summary.rs"]
mod summary_text;
#[path = "common/svg.rs"]
mod svg;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use runs::{check_outputs, folded, have, record, run, samples_with, scratch};
use unwind_profiler::output::Outputs;

/// Held by each test: two profiled programs at once on a small machine would take each other's
/// CPU (the perl comparison most of all).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The summary's count of processes.
fn processes(dir: &Path) -> u64 {
    let summary = std::fs::read_to_string(Outputs::paths(dir, "profile").summary).unwrap();
    summary_text::count(&summary, "processes").unwrap_or(1)
}
#[test]
fn python3_as_the_shell_finds_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("python3", &["--version"]), ("go", &["version"])]) {
        return;
    }
    let shim = Command::new("sh")
        .args(["-c", "command -v python3"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let through_shim = shim.contains("/shims/");
    println!("python3 is {shim}");
    let dir = scratch("python3");
    let out = dir.join("out");
    let script = "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\nprint(fib(29))";
    let (status, stderr) = run(&mut record(&out, &[], &["python3", "-c", script]), None);
    assert!(status.success(), "{stderr}");
    let total = check_outputs("python3", &out);
    let lines = folded(&out);
    let eval = samples_with(&lines, |f| f == "_PyEval_EvalFrameDefault");
    println!(
        "python3: {} processes; the interpreter's loop on {eval} of {total} samples",
        processes(&out)
    );
    assert!(
        eval * 2 >= total,
        "the interpreter has {eval} of {total} samples"
    );
    if through_shim {
        // The shim is bash running pyenv's scripts, which exec the interpreter: several
        // programs, each stack under its process's name.
        assert!(processes(&out) >= 2, "one process through pyenv's shim");
        assert!(
            lines
                .iter()
                .any(|(s, _)| s[0] == "bash" || s[0].starts_with("bash-")),
            "no sample of the shim's bash"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gcc_compiling_one_file() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("gcc", &["--version"]), ("go", &["version"])]) {
        return;
    }
    let dir = scratch("gcc");
    let source = dir.join("unit.c");
    let mut c = String::new();
    for i in 0..150 {
        c.push_str(&format!(
            "unsigned f{i}(unsigned *a, unsigned n) {{ unsigned s = {i}; \
             for (unsigned j = 0; j < n; j++) s = s * 31 + a[j] * (j ^ {i}); return s; }}\n"
        ));
    }
    std::fs::write(&source, c).unwrap();
    let out = dir.join("out");
    let (status, stderr) = run(
        record(&out, &["--clock", "wall"], &["gcc", "-O2", "-c", "unit.c"]).current_dir(&dir),
        None,
    );
    assert!(status.success(), "{stderr}");
    assert!(dir.join("unit.o").is_file(), "gcc wrote no object file");
    check_outputs("gcc", &out);
    let lines = folded(&out);
    // Stacks start with their process's name: the driver is named after its file
    // (`x86_64-linux-gnu-gcc-12` on Debian).
    let of = |name: fn(&str) -> bool| -> u64 {
        lines
            .iter()
            .filter(|(s, _)| name(&s[0]))
            .map(|(_, n)| n)
            .sum()
    };
    let cc1 = of(|p| p == "cc1");
    let driver = of(|p| p.contains("gcc"));
    println!("gcc: {driver} samples of the driver, {cc1} of cc1");
    assert!(processes(&out) >= 2 && cc1 > 0 && driver > 0, "{lines:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn xz_stopped_by_ctrl_c_after_3_seconds() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("xz", &["--version"]), ("go", &["version"])]) {
        return;
    }
    let dir = scratch("xz");
    // 32 MB of text-like bytes: xz -9 takes far longer than 3 s on them.
    let mut data = Vec::with_capacity(32 << 20);
    let mut x: u64 = 1;
    while data.len() < 32 << 20 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        data.push(b'a' + ((x >> 59) as u8 % 20));
        if x >> 62 == 0 {
            data.push(b' ');
        }
    }
    let input = dir.join("input.txt");
    std::fs::write(&input, data).unwrap();
    let out = dir.join("out");
    let (status, stderr) = run(
        &mut record(
            &out,
            &[],
            &["xz", "-9", "-T1", "-c", input.to_str().unwrap()],
        ),
        Some(Duration::from_secs(3)),
    );
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("killed by signal 2"),
        "record does not say how the program ended: {stderr}"
    );
    let total = check_outputs("xz", &out);
    // About 3 s of CPU at 1 kHz; far fewer only if the machine starved the program.
    assert!(total >= 300, "{total} samples in 3 s of xz");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dash_command_that_ends_with_exit() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("dash", &["-c", "exit 0"]), ("go", &["version"])]) {
        return;
    }
    let dir = scratch("dash");
    let out = dir.join("out");
    let script = "i=0; while [ $i -lt 300000 ]; do i=$((i + 1)); done; exit 0";
    let (status, stderr) = run(&mut record(&out, &[], &["dash", "-c", script]), None);
    assert!(status.success(), "{stderr}");
    let total = check_outputs("dash", &out);
    // Debian's dash has no symbols: its frames are named by address, under the C library's
    // start of `main`.
    let lines = folded(&out);
    let main = samples_with(&lines, |f| f == "__libc_start_call_main");
    println!("dash: {main} of {total} samples under __libc_start_call_main");
    assert!(total >= 100 && main * 10 >= total * 9, "{lines:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_process_killed_by_sigkill() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[("perl", &["-e", "1"]), ("go", &["version"])]) {
        return;
    }
    let dir = scratch("sigkill");
    let out = dir.join("out");
    let script = "my $s = 0; $s += $_ % 7 for 1 .. 15_000_000; kill 'KILL', $$";
    let (status, stderr) = run(&mut record(&out, &[], &["perl", "-e", script]), None);
    assert_eq!(status.code(), Some(128 + 9), "{stderr}");
    let total = check_outputs("perl killed", &out);
    assert!(total >= 100, "{total} samples");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `personality`'s flag that turns address-space randomization off (linux/personality.h).
const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;

/// The leaf shares (percent of samples) of `_int_malloc` and `_int_free`, from
/// (leaf, count) pairs.
fn malloc_shares(leaves: impl Iterator<Item = (String, u64)>) -> (f64, f64, u64) {
    let (mut total, mut malloc, mut free) = (0, 0, 0);
    for (leaf, n) in leaves {
        total += n;
        match leaf.as_str() {
            "_int_malloc" => malloc += n,
            "_int_free" => free += n,
            _ => {}
        }
    }
    let pct = |n: u64| 100.0 * n as f64 / total.max(1) as f64;
    (pct(malloc), pct(free), total)
}

/// Each sample's first frame outside the kernel, from `perf script -F ip,sym,dso`: where a
/// signal handler in the program sees it (kernel time is charged to the user instruction that
/// entered the kernel).
fn perf_user_leaves(script: &str) -> impl Iterator<Item = (String, u64)> + '_ {
    script.split("\n\n").filter_map(|sample| {
        let frame = sample
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.ends_with("([kernel.kallsyms])"))?;
        let symbol = frame.split_whitespace().nth(1)?;
        Some((symbol.split('+').next()?.to_owned(), 1))
    })
}

#[test]
fn perl_keeps_mallocs_single_thread_path() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !have(&[
        ("perl", &["-e", "1"]),
        ("perf", &["--version"]),
        ("go", &["version"]),
    ]) {
        return;
    }
    let dir = scratch("perl");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/malloc.pl");
    let script = script.to_str().unwrap();
    // The same hash order and memory layout in every run: perl seeds its hashes at random,
    // and the addresses the kernel picks change how malloc's data fall in the caches; either
    // moves the shares by a point between runs.
    let perl = |cmd: &mut Command| {
        cmd.env("PERL_HASH_SEED", "0").env("PERL_PERTURB_KEYS", "0");
        // SAFETY: `personality` is async-signal-safe; the flag is inherited across `exec`.
        unsafe {
            cmd.pre_exec(|| {
                libc::personality(ADDR_NO_RANDOMIZE);
                Ok(())
            })
        };
    };
    // Even so, a run's `_int_malloc` share moves by about half a point either way, under
    // either profiler: six short runs each (about a second, 4 kHz: 3,500 samples),
    // alternated, compared by their means.
    let (mut ours, mut perfs) = (Vec::new(), Vec::new());
    for round in 0..6 {
        let out = dir.join(format!("out{round}"));
        let mut cmd = record(&out, &["--frequency", "4000"], &["perl", script, "1"]);
        perl(&mut cmd);
        let (status, stderr) = run(&mut cmd, None);
        assert!(status.success(), "{stderr}");
        if round == 0 {
            check_outputs("perl", &out);
        }
        let leaves = folded(&out)
            .into_iter()
            .map(|(s, n)| (s.last().cloned().unwrap_or_default(), n));
        ours.push(malloc_shares(leaves));
        let data = dir.join(format!("perf{round}.data"));
        let mut cmd = Command::new("perf");
        cmd.args(["record", "-q", "-e", "cpu-clock", "-F", "4000", "-g", "-o"])
            .arg(&data)
            .args(["perl", script, "1"])
            .stdout(Stdio::null());
        perl(&mut cmd);
        let status = cmd.status().unwrap();
        assert!(status.success(), "perf record failed: {status}");
        let script_out = Command::new("perf")
            .args(["script", "-F", "ip,sym,dso", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(script_out.status.success(), "perf script failed");
        let text = String::from_utf8_lossy(&script_out.stdout);
        perfs.push(malloc_shares(perf_user_leaves(&text)));
    }
    let mean = |v: &[(f64, f64, u64)], f: fn(&(f64, f64, u64)) -> f64| {
        v.iter().map(f).sum::<f64>() / v.len() as f64
    };
    let (our_malloc, our_free) = (mean(&ours, |s| s.0), mean(&ours, |s| s.1));
    let (perf_malloc, perf_free) = (mean(&perfs, |s| s.0), mean(&perfs, |s| s.1));
    println!(
        "perl: _int_malloc {our_malloc:.2} % (perf {perf_malloc:.2} %), _int_free \
         {our_free:.2} % (perf {perf_free:.2} %); runs (malloc, free, samples): ours {ours:?}, \
         perf {perfs:?}"
    );
    assert!(
        (our_malloc - perf_malloc).abs() <= 1.0,
        "_int_malloc: {our_malloc:.2} % of our samples, {perf_malloc:.2} % of perf's"
    );
    assert!(
        (our_free - perf_free).abs() <= 1.0,
        "_int_free: {our_free:.2} % of our samples, {perf_free:.2} % of perf's"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
