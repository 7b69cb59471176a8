//! Runs every benchmark and writes `BENCHMARKS.md`: `bench-report [OUT.md]`; `bench-report
//! --sequences` prints only the real programs' sequences' table (`target/bench-sequences`);
//! `bench-report --arm` only the ARM figures (from `scripts/bench`'s armv7 samples and aarch64
//! sequence, with `sample-unwind` and `sequence-unwind` built for this host and for each).
//!
//! Expects the release binaries next to itself (`bench-capture`, `bench-unwind`,
//! `bench-preload`, `examples/profile`) and, for the time ratio, criterion's results of
//! `cargo bench -p unwind-benches --bench unwind` under `target/criterion`. `scripts/bench`
//! builds and runs all of it. Exits non-zero only on error, never on a missed target.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use unwind_test_support::target::Target;

mod sequences;

/// Frames unwound per measurement: K is chosen so that K * frames is about this.
const FRAMES_PER_RUN: u64 = 100_000;

fn run(cmd: &mut Command) -> Result<(String, String), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Instructions executed by `bin args` under callgrind, and its stdout.
fn instructions(bin: &Path, args: &[&str]) -> Result<(u64, String), String> {
    let (stdout, stderr) = run(Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(bin)
        .args(args))?;
    let line = stderr
        .lines()
        .find(|l| l.contains("refs:"))
        .ok_or_else(|| format!("no instruction count from callgrind:\n{stderr}"))?;
    let n = line
        .rsplit(':')
        .next()
        .unwrap_or("")
        .trim()
        .replace(',', "")
        .parse()
        .map_err(|e| format!("{line}: {e}"))?;
    Ok((n, stdout))
}

/// `frames N misses M` from bench-unwind.
fn field(out: &str, name: &str) -> u64 {
    let mut words = out.split_whitespace();
    while let Some(w) = words.next() {
        if w == name {
            return words.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        }
    }
    0
}

struct Measured {
    per_frame: f64,
    frames: u64,
    /// Frames found by a stack scan (`ours-scan`).
    scanned: u64,
    misses_per_unwind: f64,
    second_hits_per_unwind: f64,
    per_unwind: f64,
}

fn measure(bin: &Path, sample: &Path, mode: &str, frames_hint: u64) -> Result<Measured, String> {
    let k = (FRAMES_PER_RUN / frames_hint.max(1)).max(50);
    let s = sample.to_string_lossy();
    let (base, _) = instructions(bin, &[&s, mode, "0"])?;
    let (total, out) = instructions(bin, &[&s, mode, &k.to_string()])?;
    let frames = field(&out, "frames");
    let per_unwind = total.saturating_sub(base) as f64 / k as f64;
    Ok(Measured {
        per_frame: per_unwind / frames.max(1) as f64,
        frames,
        scanned: field(&out, "scanned"),
        misses_per_unwind: field(&out, "misses") as f64 / k as f64,
        second_hits_per_unwind: field(&out, "second_hits") as f64 / k as f64,
        per_unwind,
    })
}

/// Mean time of a criterion benchmark, in ns.
fn criterion_mean(root: &Path, id: &str) -> Option<f64> {
    let text = std::fs::read_to_string(root.join(id).join("new").join("estimates.json")).ok()?;
    let mean = text.split("\"mean\"").nth(1)?;
    let v = mean.split("\"point_estimate\":").nth(1)?;
    v.split([',', '}']).next()?.trim().parse().ok()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let version = |cmd: &str, arg: &str| {
        Command::new(cmd)
            .arg(arg)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default()
    };
    format!(
        "{cpu}, {cores} cores, Linux {}; {}; {}",
        std::env::consts::ARCH,
        version("rustc", "--version"),
        version("valgrind", "--version")
    )
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("bench-report: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin_dir = exe.parent().ok_or("no binary directory")?.to_path_buf();
    let target = bin_dir.parent().ok_or("no target directory")?.to_path_buf();
    match std::env::args().nth(1).as_deref() {
        Some("--sequences") => {
            // Only the real programs' sequences, printed (for working on the unwinder's speed).
            let (md, _) = sequences::section(&bin_dir, &target)?;
            print!("{md}");
            return Ok(());
        }
        Some("--arm") => {
            // Only the ARM figures, printed (for working on the unwinder's speed on ARM).
            for l in arm_lines(&target) {
                println!("{l}");
            }
            return Ok(());
        }
        _ => {}
    }
    let out_md = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "BENCHMARKS.md".into()),
    );
    let samples = target.join("bench-samples");
    let unwind_bin = bin_dir.join("bench-unwind");
    run(Command::new(bin_dir.join("bench-capture")).arg(&samples))?;

    let mut lines: Vec<String> = Vec::new();
    let mut table = String::new();
    let mut figures: BTreeMap<&str, f64> = BTreeMap::new();
    let _ = writeln!(table, "| sample | frames | ours warm | ours cold | framehop warm | framehop cold | misses/unwind (cold) | misses/unwind (warm) | second-level hits/unwind (warm) | breakpad-compatible |");
    let _ = writeln!(table, "|---|---|---|---|---|---|---|---|---|---|");
    let mut warm_all = Vec::new();
    let mut cold_all = Vec::new();
    let mut fh_warm_all = Vec::new();
    let mut fh_cold_all = Vec::new();
    let mut miss_costs = Vec::new();
    let dump_syms = find_dump_syms();
    let syms_dir = samples.join("syms");
    if let Some(tool) = &dump_syms {
        write_symbol_files(tool, &samples, &syms_dir)?;
    } else {
        eprintln!("bench-report: no dump_syms (scripts/bench installs it): no Breakpad figures");
    }
    let mut bp_all = Vec::new();
    let mut bp_load = Vec::new();
    for name in ["rec20", "rec60", "rec200", "plt", "profile"] {
        let sample = samples.join(format!("{name}.sample"));
        let hint = unwind_benches::sample::Sample::load(&sample)
            .map_err(|e| e.to_string())?
            .expect as u64;
        eprintln!("bench-report: {name} ({hint} frames)");
        let warm = measure(&unwind_bin, &sample, "ours", hint)?;
        let cold = measure(&unwind_bin, &sample, "ours-cold", hint)?;
        let reset = measure(&unwind_bin, &sample, "ours-reset", hint)?;
        let fh_warm = measure(&unwind_bin, &sample, "framehop", hint)?;
        let fh_cold = measure(&unwind_bin, &sample, "framehop-cold", hint)?;
        if cold.misses_per_unwind > 0.0 {
            miss_costs.push(
                (cold.per_unwind - reset.per_unwind - warm.per_unwind) / cold.misses_per_unwind,
            );
        }
        let mut bp_cell = "-".to_string();
        if dump_syms.is_some() {
            // The walker costs ~10^4 instructions per frame: fewer repetitions suffice.
            let bp = measure(&unwind_bin, &sample, "breakpad", hint * 500)?;
            let s = sample.to_string_lossy();
            let (setup, _) = instructions(&unwind_bin, &[&s, "breakpad-setup", "0"])?;
            let (first, _) = instructions(&unwind_bin, &[&s, "breakpad", "0"])?;
            bp_load.push((first.saturating_sub(setup) as f64 - bp.per_unwind).max(0.0));
            bp_cell = format!("{:.0}", bp.per_frame);
            bp_all.push((bp.per_frame, bp.frames));
        }
        let _ = writeln!(
            table,
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {bp_cell} |",
            warm.frames,
            warm.per_frame,
            cold.per_frame,
            fh_warm.per_frame,
            fh_cold.per_frame,
            cold.misses_per_unwind,
            warm.misses_per_unwind,
            warm.second_hits_per_unwind
        );
        warm_all.push((warm.per_frame, warm.frames));
        cold_all.push((cold.per_frame, cold.frames));
        fh_warm_all.push((fh_warm.per_frame, fh_warm.frames));
        fh_cold_all.push((fh_cold.per_frame, fh_cold.frames));
    }
    // Per frame over all samples, weighted by frames (every frame counts once).
    let weighted = |v: &[(f64, u64)]| {
        let frames: u64 = v.iter().map(|x| x.1).sum();
        v.iter().map(|x| x.0 * x.1 as f64).sum::<f64>() / frames.max(1) as f64
    };
    figures.insert("warm", weighted(&warm_all));
    figures.insert("cold", weighted(&cold_all));
    figures.insert("fh_warm", weighted(&fh_warm_all));
    figures.insert("fh_cold", weighted(&fh_cold_all));
    let miss = miss_costs.iter().sum::<f64>() / miss_costs.len().max(1) as f64;
    let fp = measure(&unwind_bin, &samples.join("fp200.sample"), "fp", 200)?;

    lines.push(format!(
        "x86_64 warm: {:.1} instructions/frame",
        figures["warm"]
    ));
    lines.push(format!(
        "x86_64 cold: {:.1} instructions/frame",
        figures["cold"]
    ));
    lines.push(format!("x86_64 miss: {miss:.0} instructions"));
    lines.push(format!(
        "framehop x86_64 warm: {:.1} instructions/frame",
        figures["fh_warm"]
    ));
    lines.push(format!(
        "framehop x86_64 cold: {:.1} instructions/frame",
        figures["fh_cold"]
    ));
    if !bp_all.is_empty() {
        lines.push(format!(
            "breakpad-compatible x86_64: {:.0} instructions/frame",
            weighted(&bp_all)
        ));
        let sym_lines = count_sym_lines(&syms_dir);
        let load = bp_load.iter().cloned().fold(0.0, f64::max);
        lines.push(format!(
            "breakpad symbol loading: {load:.0} instructions for {sym_lines} .sym lines ({:.0} per line)",
            load / sym_lines.max(1) as f64
        ));
    }
    lines.push(format!(
        "frame-pointer floor: {:.1} instructions/frame",
        fp.per_frame
    ));
    // Stack scanning (opt-in): a C recursion without unwind tables or frame pointers, which
    // only a scan walks through; the walk without scanning stops at its first frame.
    let scan_sample = samples.join("scan20.sample");
    let scan_line = if scan_sample.exists() {
        let plain = measure(&unwind_bin, &scan_sample, "ours", 4)?;
        let scan = measure(&unwind_bin, &scan_sample, "ours-scan", 33)?;
        let line = format!(
            "stack scanning x86_64: {:.0} instructions/frame warm over {} frames, {} of them found by a scan ({} frames without scanning)",
            scan.per_frame, scan.frames, scan.scanned, plain.frames
        );
        lines.push(line.clone());
        Some((plain, scan))
    } else {
        eprintln!("bench-report: no scan20 sample (bench-capture needs gcc)");
        None
    };

    lines.extend(arm_lines(&target));

    let crit = target.join("criterion");
    // Criterion times one unwind of each sample; per frame and in total over the samples
    // (every frame weighs the same).
    let mut times = String::new();
    let (mut ours_total, mut fh_total) = (0.0, 0.0);
    for (s, frames) in [("rec200", 212.0), ("profile", 0.0)] {
        let (Some(ours), Some(fh)) = (
            criterion_mean(&crit, &format!("unwind-{s}/ours")),
            criterion_mean(&crit, &format!("unwind-{s}/framehop")),
        ) else {
            continue;
        };
        let frames = if frames > 0.0 {
            frames
        } else {
            unwind_benches::sample::Sample::load(&samples.join(format!("{s}.sample")))
                .map_or(1.0, |x| x.expect as f64)
        };
        let _ = writeln!(
            times,
            "| {s} | {frames} | {:.2} | {:.2} | {:.2} x |",
            ours / frames,
            fh / frames,
            fh / ours
        );
        ours_total += ours;
        fh_total += fh;
    }
    if let Some(fp_ns) = criterion_mean(&crit, "unwind-fp200/frame-pointers") {
        let _ = writeln!(
            times,
            "| fp200 (frame-pointer walk) | {} | {:.2} | - | - |",
            fp.frames,
            fp_ns / fp.frames.max(1) as f64
        );
    }
    if ours_total == 0.0 {
        eprintln!("bench-report: no criterion results: run `cargo bench -p unwind-benches --bench unwind` first");
    } else {
        lines.push(format!(
            "ns/frame ratio framehop/ours: {:.2} x",
            fh_total / ours_total
        ));
    }
    let preload = run(Command::new(bin_dir.join("bench-preload")).arg("--process"))?.0;
    let driver = unwind_test_support::rustc_driver_path().map(|p| p.to_string_lossy().into_owned());
    let preload_driver = match &driver {
        Some(d) => run(Command::new(bin_dir.join("bench-preload")).arg(d))?.0,
        None => String::new(),
    };
    let num = |line: &str, key: &str| -> f64 {
        line.split(key)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.trim_end_matches(',').parse().ok())
            .unwrap_or(f64::NAN)
    };
    if let Some(l) = preload_driver.lines().next() {
        lines.push(format!(
            "preload librustc_driver: {:.3} s, {:.2} bytes/row, {:.2} x gimli floor",
            num(l, "build "),
            num(l, "bytes/row "),
            num(l, "ratio ")
        ));
    }
    if let Some(l) = preload.lines().next() {
        lines.push(format!(
            "preload process: {:.4} s, {:.2} bytes/row, {:.2} x gimli floor",
            num(l, "build "),
            num(l, "bytes/row "),
            num(l, "ratio ")
        ));
    }
    // A target's libc and libstdc++, read on this host by `bench-preload`: its output, and a
    // figures line per library (`label`; `floor`: what the ratio is to, with its format).
    let preload_libs = |libdir: &str,
                        label: &str,
                        floor: fn(f64) -> String,
                        lines: &mut Vec<String>|
     -> Result<String, String> {
        let files: Vec<String> = ["libc.so.6", "libstdc++.so.6"]
            .iter()
            .map(|n| format!("{libdir}/{n}"))
            .filter(|p| Path::new(p).exists())
            .collect();
        if files.is_empty() {
            return Ok(String::new());
        }
        let out = run(Command::new(bin_dir.join("bench-preload")).args(&files))?.0;
        for l in out.lines() {
            let name = l
                .strip_prefix("preload ")
                .and_then(|r| r.split(' ').next())
                .unwrap_or("?");
            lines.push(format!(
                "preload {label} {name}: {:.4} s, {:.2} bytes/row, {}",
                num(l, "build "),
                num(l, "bytes/row "),
                floor(num(l, "ratio "))
            ));
        }
        Ok(out)
    };
    // 32-bit ARM libraries: EHABI tables and the functions' instructions.
    let preload_arm = preload_libs(
        armv7().libdir,
        "armhf",
        |r| format!("{r:.1} x the EHABI index alone"),
        &mut lines,
    )?;
    // arm64 libraries: DWARF CFI, as on x86_64.
    let preload_arm64 = preload_libs(
        unwind_test_support::target::by_name("aarch64").libdir,
        "arm64",
        |r| format!("{r:.2} x gimli floor"),
        &mut lines,
    )?;
    let profile = bin_dir.join("examples").join("profile");
    let hit_rate = run(Command::new(&profile).arg("2"))
        .ok()
        .and_then(|(o, _)| {
            o.lines()
                .find(|l| l.contains("hit rate"))
                .map(|l| num(l, "hit rate "))
        });
    match hit_rate {
        Some(h) => lines.push(format!("cache hit rate: {h:.2} %")),
        None => {
            eprintln!("bench-report: no hit rate (build `cargo build --release --example profile`)")
        }
    }

    let (seq_md, seq_lines) = sequences::section(&bin_dir, &target)?;
    lines.splice(0..0, seq_lines);
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(md, "Generated by `scripts/bench` (which runs `cargo bench -p unwind-benches --bench unwind` and `target/release/bench-report`). Do not edit by hand.\n");
    let _ = writeln!(md, "Machine: {}\n", machine());
    let _ = writeln!(md, "## Figures\n\n```");
    for l in &lines {
        let _ = writeln!(md, "{l}");
    }
    let _ = writeln!(md, "```\n");
    md.push_str(&seq_md);
    let _ = writeln!(md, "## Synthetic samples\n");
    let _ = writeln!(md, "Targets: x86_64 warm <= 40 instructions/frame; ARM warm <= 60; aarch64 warm <= 40; one miss <= 300 instructions; ns/frame >= 3 x faster than framehop; preload <= 2 x the gimli floor and <= 8 bytes/row. References (REFERENCES.md): framehop ~149 warm, ~4,100 per miss; Valgrind ~220; Breakpad ~114,000; frame pointers ~8.\n");
    let _ = writeln!(md, "### Instructions per frame, by sample (callgrind)\n");
    let _ = writeln!(md, "Method: each unwinder runs in its own process on the same captured sample (registers, stack copy, module files), K times and 0 times after the same setup and one warm-up unwind; (instructions(K) - instructions(0)) / (K * frames). Cold empties the cache before every unwind (ours: the reset of its 509 slots is included; its second level is emptied by a new epoch, without writing).\n");
    md.push_str(&table);
    let _ = writeln!(md, "\nThe cache is direct-mapped, with a 4-way second level behind it: when two of a stack's distinct return addresses share a slot, each evicts the other, and every unwind finds both in the second level (*second-level hits*, about 40 instructions each with the call) instead of looking them up in the table again (*misses*). Which addresses share a slot depends on the code layout, so it changes from build to build.");
    let _ = writeln!(md, "\nframe-pointer floor: {} frames of a C recursion built with `-fno-omit-frame-pointer`, walked with the same bounds-checked reads.\n", fp.frames);
    if let Some((plain, scan)) = &scan_line {
        let _ = writeln!(md, "Stack scanning (`scan20`, off by default): a 20-deep C recursion built with `-O2 -fomit-frame-pointer -fno-asynchronous-unwind-tables -fno-unwind-tables` between Rust frames. Without scanning the walk ends at its first frame ({} frames, {:.0} instructions per unwind); with it (`bench-unwind scan20.sample ours-scan`) every C frame is found by scanning the stack for a return site, on every walk (the cache holds rules, and these frames have none): {} frames, {} of them found by a scan, {:.0} instructions per unwind, {:.0} per frame.\n", plain.frames, plain.per_unwind, scan.frames, scan.scanned, scan.per_unwind, scan.per_frame);
    }
    if !times.is_empty() {
        let _ = writeln!(md, "### Nanoseconds per frame (criterion, same run)\n");
        let _ = writeln!(md, "| sample | frames | ours ns/frame | framehop ns/frame | framehop/ours |\n|---|---|---|---|---|\n{times}");
        let _ = writeln!(md, "The `profile` sample is a SIGPROF landing at a random instruction of the workload; it differs from capture to capture, and so does its ratio. The loop is latency-bound: each frame waits on a stack load, the slot computation, a cache-entry load and the next stack load (about 13 cycles at best for a per-frame cache lookup), which is why 3.4 x fewer instructions than framehop give less than 3 x the speed.\n");
    }
    let _ = writeln!(md, "## 32-bit ARM\n\n`arm warm host` unwinds the 5 deepest armv7 samples the test agent captured from the Rust workload under qemu-arm (rules from the binary's `.debug_frame` and the system's `.ARM.exidx`), with `sample-unwind` built for x86_64, under callgrind; `arm warm qemu` runs the same program built for armv7 under `qemu-arm -singlestep -d nochain,exec` and counts the guest instructions executed in the unwinder's functions (`-dfilter` on their address ranges). Both: K and 0 unwinds after the same setup, divided by K times frames. The ARM target (60) is met on the host and missed under qemu-arm: Rust's armv7 frames save the return address and r11 (frame pointers are kept), so each frame costs two bounds-checked stack loads where x86_64 checks a frame's words with one range test, the loop carries more values than armv7 has registers (it spills the stack image's bounds), and the cache's keys and the frames written are 64-bit on a 32-bit machine. LR is not among them: every caller reached through a return address made a call, so its LR is its PC and the cached rule reads no LR slot (qemu-arm, the armv7 sequence: 68.9 instructions a frame against 65.4). Reads are bounds-checked in 32-bit arithmetic there (`Memory::read_u32_at`; with 64-bit checks: 72.7 under qemu).\n");
    let _ = writeln!(md, "## 64-bit ARM\n\n`aarch64 warm host` and `aarch64 warm qemu` replay the aarch64 sequence of the table above (1,500 samples of the test agent's Rust workload under qemu-aarch64, whose default CPU signs return addresses; rules from the binary's and Debian's arm64 libraries' `.eh_frame`) with `sequence-unwind`, in order, one cache per thread, after one warm-up pass: built for x86_64 under callgrind (instructions collected in `unwind_once`), and built for aarch64 under `qemu-aarch64 -singlestep -d nochain,exec` (guest instructions in `unwind_once` and the walk's out-of-line functions, `-dfilter` on their ranges). Both: one pass less none, divided by its frames. The target (40) is met by both. What keeps it there: a frame record (x29 and x30 saved, nearly every frame that made a call) is the cache's first two shapes, told by one comparison and read after one range test; x30 is tracked only where the PC is exact (frame 0, a signal frame's caller), since every other frame made a call, so a rule there that leaves the return address in x30 stops the walk without reading it; x86_64's prefetch of frame 0's second-level set is for x86_64's own walks; the cache's hash multiplier (-2^32/phi) fits x86_64's signed 32-bit immediates, where 2^32/phi, in the 64-bit multiply LLVM makes of the hash, was kept in a register reloaded every frame (40.6 on the host against 38.6). The pointer-authentication strip is one AND a frame (every return address is stripped, signed or not: a test of the rule's signed flag cost 1.9 instructions a frame under qemu).\n");
    let _ = writeln!(
        md,
        "## Preload\n\n```\n{}{}{}{}```\n",
        preload, preload_driver, preload_arm, preload_arm64
    );
    let _ = writeln!(md, "The floor of an x86_64 file is gimli iterating every row of its `.eh_frame` and `.debug_frame` without building anything. An arm64 file's floor is an x86_64 file's (DWARF CFI only). The floor of a 32-bit ARM file is its EHABI index decoded (`unwind_arm_exidx::rows`) and its DWARF rows, if any: the build also reads every function's instructions (`unwind-arm-prologue`: prologues and epilogues of EHABI functions, `EXIDX_CANTUNWIND` functions, functions no table describes), which is most of its cost.\n");
    // Sections other tools write into the same file (bench-overhead's, scripts/continuous-
    // memory's) are kept as they were.
    if let Ok(old) = std::fs::read_to_string(&out_md) {
        md.push_str(&sections_not_in(&old, &md));
    }
    std::fs::write(&out_md, md).map_err(|e| e.to_string())?;
    for l in &lines {
        println!("{l}");
    }
    Ok(())
}

/// The 32-bit and 64-bit ARM lines (`arm warm host`, `arm warm qemu`, `aarch64 warm host`,
/// `aarch64 warm qemu`) from the captures `scripts/bench` leaves in `target`; a figure whose
/// capture is missing or fails is left out, with a message.
fn arm_lines(target: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    match arm_figures(target) {
        Ok(Some((host, qemu, n))) => {
            lines.push(format!("arm warm host: {host:.1} instructions/frame"));
            lines.push(format!("arm warm qemu: {qemu:.1} instructions/frame"));
            eprintln!("bench-report: arm figures over {n} samples");
        }
        Ok(None) => eprintln!("bench-report: no armv7 samples (scripts/bench captures them)"),
        Err(e) => eprintln!("bench-report: armv7 figures failed: {e}"),
    }
    let a64_seq = target
        .join("bench-sequences")
        .join("aarch64")
        .join("aarch64.sequence");
    match aarch64_figures(target, &a64_seq) {
        Ok(Some((host, qemu, frames))) => {
            lines.push(format!("aarch64 warm host: {host:.1} instructions/frame"));
            lines.push(format!("aarch64 warm qemu: {qemu:.1} instructions/frame"));
            eprintln!("bench-report: aarch64 figures over {frames} frames");
        }
        Ok(None) => eprintln!("bench-report: no aarch64 sequence (scripts/bench captures it)"),
        Err(e) => eprintln!("bench-report: aarch64 figures failed: {e}"),
    }
    lines
}

/// armv7's row of the targets table (tests/support/targets.tsv).
fn armv7() -> &'static unwind_test_support::target::Target {
    unwind_test_support::target::by_name("armv7")
}

/// armv7's libraries on this host (what qemu-arm's `-L` is given).
fn arm_sysroot() -> &'static str {
    armv7()
        .sysroot
        .expect("armv7's sysroot in the targets table")
}

/// The functions of `bin` (built for `t`) whose demangled names `wanted` accepts, as
/// `(file address, size, name)`.
fn function_ranges(
    t: &Target,
    bin: &Path,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(u64, u64, String)>, String> {
    let nm = run(Command::new(t.tool("nm")).args(["-S", "-C"]).arg(bin))?.0;
    Ok(nm
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, ' ');
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let size = u64::from_str_radix(f.next()?, 16).ok()?;
            let name = f.nth(1)?;
            wanted(name).then(|| (addr, size, name.to_string()))
        })
        .collect())
}

/// The guest instructions `bin ARGS` (built for `t`) executes inside `functions` (file
/// addresses, moved by `bias` to where the emulator loads them), counted under
/// `RUNNER -L SYSROOT -singlestep -d nochain,exec` (one log line per instruction, `-dfilter`
/// on the functions' ranges; the log goes to `log`, removed after).
fn guest_instructions(
    t: &Target,
    bin: &Path,
    functions: &[(u64, u64, String)],
    bias: u64,
    args: &[&str],
    log: &Path,
) -> Result<u64, String> {
    let sysroot = t.sysroot.ok_or("no sysroot in the targets table")?;
    let ranges: Vec<String> = functions
        .iter()
        .map(|f| format!("{:#x}+{:#x}", f.0.wrapping_add(bias), f.1))
        .collect();
    run(
        Command::new(t.runner.ok_or("no emulator in the targets table")?)
            .args([
                "-L",
                sysroot,
                "-singlestep",
                "-d",
                "nochain,exec",
                "-dfilter",
            ])
            .arg(ranges.join(","))
            .arg("-D")
            .arg(log)
            .arg(bin)
            .args(args),
    )?;
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let _ = std::fs::remove_file(log);
    Ok(text.lines().filter(|l| l.starts_with("Trace")).count() as u64)
}

/// The runtime address of `unwind_once` that `bin ARGS` (built for `t`, run under its emulator)
/// prints after the word `unwind_once`.
fn unwind_once_address(t: &Target, bin: &Path, args: &[&str]) -> Result<u64, String> {
    let out = run(
        Command::new(t.runner.ok_or("no emulator in the targets table")?)
            .args(["-L", t.sysroot.ok_or("no sysroot in the targets table")?])
            .arg(bin)
            .args(args),
    )?
    .0;
    out.split_whitespace()
        .skip_while(|w| *w != "unwind_once")
        .nth(1)
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .ok_or_else(|| "no unwind_once address".to_string())
}

/// Warm instructions per frame for armv7 samples: unwound on this host under callgrind, and
/// natively under `qemu-arm -singlestep -d nochain,exec` (guest instructions executed in the
/// unwinder's functions), over the 5 deepest samples the agent captured. Frame-weighted.
fn arm_figures(target: &Path) -> Result<Option<(f64, f64, usize)>, String> {
    let dir = target.join("bench-samples").join("arm");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(None);
    };
    let mut samples: Vec<(usize, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter_map(|p| {
            let s = unwind_samples::offline::ArmSample::load(&p, Some(Path::new(arm_sysroot())))?;
            Some((s.pcs.len(), p))
        })
        .collect();
    samples.sort_by_key(|s| std::cmp::Reverse(s.0));
    samples.truncate(5);
    if samples.is_empty() {
        return Ok(None);
    }
    let host_bin = target.join("release").join("sample-unwind");
    let arm_bin = armv7().release_dir(target).join("sample-unwind");
    // The unwinder's code in the armv7 binary: `unwind_once` (the loop is inlined there) and
    // every unwind_core function.
    let functions = function_ranges(armv7(), &arm_bin, |n| {
        n.contains("unwind_once") || n.contains("unwind_core::")
    })?;
    let once_svma = functions
        .iter()
        .find(|f| f.2.contains("unwind_once"))
        .map(|f| f.0)
        .ok_or("no unwind_once symbol")?;
    let log = target.join("bench-samples").join("qemu-trace.log");
    let (mut host, mut qemu, mut frames_total) = (0.0, 0.0, 0u64);
    for (_, path) in &samples {
        let p = path.to_string_lossy();
        let k: u64 = 200;
        let frames = |out: &str| field(out, "frames");
        let (h0, _) = instructions(&host_bin, &[&p, arm_sysroot(), "0"])?;
        let (hk, out) = instructions(&host_bin, &[&p, arm_sysroot(), &k.to_string()])?;
        let n = frames(&out);
        // Where qemu loads the binary: unwind_once's runtime address minus its file address.
        let once = unwind_once_address(armv7(), &arm_bin, &[&p, arm_sysroot(), "0"])?;
        let bias = once.wrapping_sub(once_svma);
        let count = |k: u64| {
            guest_instructions(
                armv7(),
                &arm_bin,
                &functions,
                bias,
                &[&p, arm_sysroot(), &k.to_string()],
                &log,
            )
        };
        let (q0, qk) = (count(0)?, count(k)?);
        host += hk.saturating_sub(h0) as f64 / k as f64;
        qemu += qk.saturating_sub(q0) as f64 / k as f64;
        frames_total += n;
    }
    let f = frames_total.max(1) as f64;
    Ok(Some((host / f, qemu / f, samples.len())))
}

/// Warm instructions per frame for the aarch64 sequence `seq` (1,500 samples of the Rust
/// workload under qemu-aarch64, in order, one cache per thread): `sequence-unwind` replays it
/// after one warm-up pass, built for this host under callgrind (collected in `unwind_once`),
/// and built for aarch64 under `qemu-aarch64 -singlestep` (guest instructions in `unwind_once`
/// and the walk's out-of-line functions); one pass less none, divided by its frames. Also the
/// frames of a pass.
fn aarch64_figures(target: &Path, seq: &Path) -> Result<Option<(f64, f64, u64)>, String> {
    if !seq.exists() {
        return Ok(None);
    }
    let t = unwind_test_support::target::by_name("aarch64");
    let sysroot = t.sysroot.ok_or("no aarch64 sysroot")?;
    let seq = seq.to_string_lossy();
    let host_bin = target.join("release").join("sequence-unwind");
    let (h0, _) = sequences::collected(&host_bin, "*unwind_once*", &[&seq, sysroot, "0"])?;
    let (h1, out) = sequences::collected(&host_bin, "*unwind_once*", &[&seq, sysroot, "1"])?;
    let frames = field(&out, "frames");
    let guest_bin = t.release_dir(target).join("sequence-unwind");
    // The walk's code: `unwind_once` (the loop inlined there) and what it calls out of line
    // (not the table's construction, which both runs do alike).
    let functions = function_ranges(t, &guest_bin, |n| {
        n.ends_with("::unwind_once")
            || ["unwind", "cache", "aarch64", "arch", "scan", "expr"]
                .iter()
                .any(|m| n.starts_with(&format!("unwind_core::{m}::")))
    })?;
    let once = unwind_once_address(t, &guest_bin, &[&seq, sysroot, "0"])?;
    // One `unwind_once` per architecture is compiled in; the load bias is page-aligned for the
    // one that ran.
    let bias = functions
        .iter()
        .filter(|f| f.2.ends_with("::unwind_once"))
        .map(|f| once.wrapping_sub(f.0))
        .find(|b| b % 4096 == 0)
        .ok_or("no unwind_once at a page-aligned bias")?;
    let log = target.join("bench-samples").join("qemu-trace-aarch64.log");
    let count =
        |k: &str| guest_instructions(t, &guest_bin, &functions, bias, &[&seq, sysroot, k], &log);
    let (q0, q1) = (count("0")?, count("1")?);
    let f = frames.max(1) as f64;
    Ok(Some((
        h1.saturating_sub(h0) as f64 / f,
        q1.saturating_sub(q0) as f64 / f,
        frames,
    )))
}

/// `dump_syms` where `scripts/setup` installs it (see `unwind_validate::tools::dump_syms`), if
/// it runs.
fn find_dump_syms() -> Option<PathBuf> {
    let tool = unwind_validate::tools::dump_syms();
    Command::new(&tool)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| tool)
}

/// Writes `SYMS/<file name>.sym` for every module of every sample in `samples`.
fn write_symbol_files(tool: &Path, samples: &Path, syms: &Path) -> Result<(), String> {
    std::fs::create_dir_all(syms).map_err(|e| e.to_string())?;
    let mut done = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(samples).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_none_or(|e| e != "sample") {
            continue;
        }
        let sample = unwind_benches::sample::Sample::load(&path).map_err(|e| e.to_string())?;
        for m in sample.modules {
            if !done.insert(m.path.clone()) {
                continue;
            }
            let out = Command::new(tool)
                .arg(&m.path)
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                let file = unwind_benches::breakpad::sym_path(syms, &m.path);
                std::fs::write(file, out.stdout).map_err(|e| e.to_string())?;
            } else {
                eprintln!("bench-report: dump_syms {} failed", m.path.display());
            }
        }
    }
    Ok(())
}

/// Lines in all symbol files (what loading them has to parse).
fn count_sym_lines(syms: &Path) -> usize {
    std::fs::read_dir(syms)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read(e.path()).ok())
                .map(|b| b.iter().filter(|&&c| c == b'\n').count())
                .sum()
        })
        .unwrap_or(0)
}

/// The `## ` sections of `old` whose headings `new` does not have, in their order.
fn sections_not_in(old: &str, new: &str) -> String {
    let headings: std::collections::HashSet<&str> =
        new.lines().filter(|l| l.starts_with("## ")).collect();
    let mut kept = String::new();
    let mut keeping = false;
    for line in old.lines() {
        if line.starts_with("## ") {
            keeping = !headings.contains(line);
        } else if line.starts_with("# ") {
            keeping = false;
        }
        if keeping {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    #[test]
    fn sections_of_other_tools_are_kept() {
        let old =
            "# B\n\n## Figures\nold\n## Profiler overhead\nrows\n\n## Continuous profiling\nrss\n";
        let new = "# B\n\n## Figures\nnew\n";
        assert_eq!(
            super::sections_not_in(old, new),
            "## Profiler overhead\nrows\n\n## Continuous profiling\nrss\n"
        );
    }
}
