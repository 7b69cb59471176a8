//! `unwind-profiler record` on real programs nobody here wrote: each runs once unprofiled and
//! once under `record`, must succeed both times with the same output, and its profile must be
//! plausible: enough samples, the program's own functions under their callers, demangled names,
//! stacks that reach the thread's first frame, at most 1 % of frames outside any known module and
//! at most 1 % of walks stopped at a PC without a rule.
//!
//! - **python3** runs `programs/cpu.py` (CPU-bound pure Python): the interpreter's C frames
//!   (`_PyEval_EvalFrameDefault` under `Py_BytesMain`) and its `_json` extension, `dlopen`ed
//!   while the script runs.
//! - **gcc** compiles and links a generated C file. The driver `exec`s cc1, as, collect2 (and
//!   ld) in child processes, and each is profiled (the environment carries `LD_PRELOAD`):
//!   `STEM-COMM-PID.*` beside the driver's `STEM.*`. The run uses the wall clock, because the
//!   driver spends its time waiting for its children, where a CPU-time profile has no samples.
//!   Allocations are sampled too (`--alloc`): every process's `malloc` and `free` go through the
//!   preload library, and the compiled program is still byte for byte the same.
//!   The binaries are byte-identical; cc1's profile shows cc1's functions (a few of which keep
//!   mangled names the demangler rejects: at most 1 % of frames); no frame of any
//!   process is named after a function its module imports (the stripped, non-PIE driver
//!   was named `strcmp` throughout, after the PLT address its symbol table gives that import).
//! - **A Rust release binary** (`programs/work.rs`, `rustc -O`): four named `std::thread`s,
//!   each sampled in its own job function, named as a demangled Rust path (`work::mandelbrot`).
//! - **A C++ program with exceptions** (`programs/exceptions.cpp`, `g++ -O2 -g`): samples taken
//!   inside the C++ unwinder (`__cxa_throw`, `_Unwind_RaiseException`) unwind through it to the
//!   thread's first frame; `std::thread`s and the three threads of a thread pool are sampled;
//!   names are demangled C++ (`ns::Pool::worker()`); the debug information gives the right
//!   source lines.
//! - **sleep** on the wall clock gets no timer signal once the profiler has stopped.
//!
//! Needs python3, gcc and g++ with binutils' `nm`, and rustc (a missing one fails under
//! `CI=true`, skips visibly elsewhere), and the release build of the command and the preload
//! library (scripts/test builds them first): `cargo build --release -p unwind-profiler
//! -p unwind-profiler-preload -p unwind-demo-workload && cargo test --release -p unwind-profiler
//! --test programs`.

#[path = "common/summary.rs"]
mod summary_text;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use unwind_profiler::output::pprof::proto;

/// Held by each test: two profiled programs at once on a small machine would take each other's
/// CPU, and the compilers these tests run would slow each other down.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The default output stem (`profiler/src/config.rs`).
const STEM: &str = "profile";

/// The release artifacts' directory: this test runs from `target/release/deps/`.
fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

/// The sources of the test programs.
fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// A fresh directory for `test`'s files.
fn fresh_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "unwind-profiler-programs-{test}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `program plain_args` unprofiled, then `record OPTIONS --output DIR -- program
/// profiled_args` with `DIR` a fresh directory in `work`; checks both succeed with the same
/// stdout. Returns `DIR`.
fn record(
    work: &Path,
    options: &[&str],
    program: &Path,
    plain_args: &[&str],
    profiled_args: &[&str],
) -> PathBuf {
    let dir = release_dir();
    let record = dir.join("unwind-profiler");
    for f in [&record, &dir.join("libunwind_profiler_preload.so")] {
        assert!(
            f.is_file(),
            "{} is missing: build it first (see the test's docs)",
            f.display()
        );
    }
    let out = work.join("profile");
    let plain = Command::new(program)
        .args(plain_args)
        .current_dir(work)
        .output()
        .unwrap();
    assert!(
        plain.status.success(),
        "{} failed on its own: {}",
        program.display(),
        String::from_utf8_lossy(&plain.stderr)
    );
    let run = Command::new(&record)
        .arg("record")
        .args(options)
        .arg("--output")
        .arg(&out)
        .arg("--")
        .arg(program)
        .args(profiled_args)
        .current_dir(work)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "{} failed under record: {stderr}",
        program.display()
    );
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "{}'s output changed under the profiler",
        program.display()
    );
    out
}

/// Folded lines as (frames root first, weighted count).
fn folded(text: &str) -> Vec<(Vec<String>, u64)> {
    unwind_profiler::output::folded::parse(text)
}

/// One frame of a pprof sample.
#[derive(Clone, Debug)]
struct PFrame {
    function: String,
    /// The function's source file, empty if unknown.
    file: String,
    /// The line, 0 if unknown.
    line: i64,
    /// The path of the module the address is in, empty if none.
    module: String,
}

/// One pprof sample: a stack of one thread.
#[derive(Clone, Debug)]
struct PSample {
    tid: i64,
    thread: String,
    /// The process's program name (its executable's file name).
    process: String,
    /// Samples taken with this stack on this thread.
    count: u64,
    /// Frames root first (inlined frames after the function they were inlined into).
    frames: Vec<PFrame>,
}

impl PSample {
    fn has(&self, function: &str) -> bool {
        self.frames.iter().any(|f| f.function == function)
    }

    fn root(&self) -> &str {
        self.frames.first().map_or("", |f| f.function.as_str())
    }
}

/// The file name of `path`.
fn basename(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_owned()
}

/// The samples of the pprof file `path`.
fn pprof_samples(path: &Path) -> Vec<PSample> {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let p = proto::Profile::decode(&bytes[..]).expect("not a pprof profile");
    let s = |i: i64| p.string_table[i as usize].clone();
    let functions: HashMap<u64, &proto::Function> = p.function.iter().map(|f| (f.id, f)).collect();
    let mappings: HashMap<u64, String> = p.mapping.iter().map(|m| (m.id, s(m.filename))).collect();
    let locations: HashMap<u64, Vec<PFrame>> = p
        .location
        .iter()
        .map(|l| {
            let module = mappings.get(&l.mapping_id).cloned().unwrap_or_default();
            // Lines are innermost first; root first is the reverse.
            let frames = l
                .line
                .iter()
                .rev()
                .map(|line| {
                    let f = functions[&line.function_id];
                    PFrame {
                        function: s(f.name),
                        file: s(f.filename),
                        line: line.line,
                        module: module.clone(),
                    }
                })
                .collect();
            (l.id, frames)
        })
        .collect();
    p.sample
        .iter()
        .map(|sample| {
            let label = |key: &str| sample.label.iter().find(|l| s(l.key) == key);
            PSample {
                tid: label("thread_id").map_or(0, |l| l.num),
                thread: label("thread").map_or(String::new(), |l| s(l.str)),
                process: label("process").map_or(String::new(), |l| s(l.str)),
                count: sample.value[0] as u64,
                frames: sample
                    .location_id
                    .iter()
                    .rev()
                    .flat_map(|id| locations[id].iter().cloned())
                    .collect(),
            }
        })
        .collect()
}

/// Samples of `samples` for which `f` holds.
fn count(samples: &[PSample], f: impl Fn(&PSample) -> bool) -> u64 {
    samples.iter().filter(|s| f(s)).map(|s| s.count).sum()
}

/// `part` of `whole` in percent.
fn pct(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

/// What every profile of `dir`/`stem` must show; returns its pprof samples. Checks: at least
/// `min_samples` samples; at most 1 % of the folded frames (weighted) outside any known module
/// (`[unknown]+0x...`); at most 1 % of the stored samples' walks stopped at a PC without a
/// rule; at most `max_mangled_pct` % of the frames with a mangled name (`_Z...`, `_R...`).
fn check_profile(dir: &Path, stem: &str, min_samples: u64, max_mangled_pct: f64) -> Vec<PSample> {
    let samples = pprof_samples(&dir.join(format!("{stem}.pb.gz")));
    let total = count(&samples, |_| true);
    let text = std::fs::read_to_string(dir.join(format!("{stem}.folded"))).unwrap();
    let lines = folded(&text);
    let frames: u64 = lines.iter().map(|(s, n)| s.len() as u64 * n).sum();
    let unknown: u64 = lines
        .iter()
        .map(|(s, n)| s.iter().filter(|f| f.starts_with("[unknown]")).count() as u64 * n)
        .sum();
    let summary = std::fs::read_to_string(dir.join(format!("{stem}.summary.txt"))).unwrap();
    let no_rule = summary_text::required(&summary, "NoRule");
    let threads: BTreeSet<i64> = samples.iter().map(|s| s.tid).collect();
    println!(
        "{stem}: {total} samples of {} threads; {unknown} of {frames} frames ({:.2} %) in no \
         known module; {no_rule} walks ({:.2} %) stopped without a rule",
        threads.len(),
        pct(unknown, frames),
        pct(no_rule, total)
    );
    assert!(
        total >= min_samples,
        "{stem}: {total} samples, want at least {min_samples}"
    );
    assert!(
        unknown * 100 <= frames,
        "{stem}: {unknown} of {frames} frames outside every known module:\n{text}"
    );
    assert!(
        no_rule * 100 <= total,
        "{stem}: {no_rule} of {total} walks stopped at a PC without a rule:\n{summary}"
    );
    let is_mangled = |f: &&String| f.starts_with("_Z") || f.starts_with("_R");
    let mangled: BTreeSet<&str> = lines
        .iter()
        .flat_map(|(s, _)| s.iter().filter(is_mangled))
        .map(String::as_str)
        .collect();
    let mangled_frames: u64 = lines
        .iter()
        .map(|(s, n)| s.iter().filter(is_mangled).count() as u64 * n)
        .sum();
    if !mangled.is_empty() {
        println!(
            "{stem}: {mangled_frames} of {frames} frames ({:.2} %) with a mangled name: \
             {mangled:?}",
            pct(mangled_frames, frames)
        );
    }
    assert!(
        pct(mangled_frames, frames) <= max_mangled_pct,
        "{stem}: {mangled_frames} of {frames} frames with a mangled name (at most \
         {max_mangled_pct} %): {mangled:?}"
    );
    samples
}

/// Checks that at least `min_pct` % of the samples reach one of `roots` as their first frame
/// (`_start` for the main thread, `clone3` for the others: the walk got to the end).
fn check_roots(stem: &str, samples: &[PSample], roots: &[&str], min_pct: f64) {
    check_first_frames(stem, samples, &format!("{roots:?}"), min_pct, |f| {
        roots.contains(&f.function.as_str())
    });
}

/// Checks that at least `min_pct` % of the samples have a first frame (the walk's last) that
/// `is_root` accepts (`what` says which that is).
fn check_first_frames(
    stem: &str,
    samples: &[PSample],
    what: &str,
    min_pct: f64,
    is_root: impl Fn(&PFrame) -> bool,
) {
    let total = count(samples, |_| true);
    let rooted = count(samples, |s| s.frames.first().is_some_and(&is_root));
    println!(
        "{stem}: {rooted} of {total} samples ({:.1} %) start at {what}",
        pct(rooted, total)
    );
    if pct(rooted, total) < min_pct {
        let mut others: BTreeMap<&str, u64> = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| !s.frames.first().is_some_and(&is_root))
        {
            *others.entry(s.root()).or_default() += s.count;
        }
        panic!(
            "{stem}: only {rooted} of {total} samples start at {what}, want {min_pct} %; \
             other first frames: {others:?}"
        );
    }
}

/// The samples of `stem` with `function` on the stack, checked to be at least `min_pct` % of
/// all; returns the count.
fn check_share(stem: &str, samples: &[PSample], function: &str, min_pct: f64) -> u64 {
    let total = count(samples, |_| true);
    let n = count(samples, |s| s.has(function));
    println!(
        "{stem}: {function} on {n} of {total} stacks ({:.1} %)",
        pct(n, total)
    );
    assert!(
        pct(n, total) >= min_pct,
        "{stem}: {function} on {n} of {total} stacks, want at least {min_pct} %"
    );
    n
}

/// The program of the profile `dir`/`stem`, as its summary names it.
fn summary_program(dir: &Path, stem: &str) -> String {
    let summary = std::fs::read_to_string(dir.join(format!("{stem}.summary.txt"))).unwrap();
    summary
        .lines()
        .find_map(|l| l.strip_prefix("program "))
        .map(|p| p.trim().to_owned())
        .unwrap_or_else(|| panic!("no program line in the summary:\n{summary}"))
}

/// The real Python interpreter, which `python3` names (on a pyenv machine `python3` is a shell
/// script that `exec`s it: profiling the script would profile bash first), or `None`.
fn python_interpreter() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    path.is_file().then_some(path)
}

#[test]
fn python_interpreter_frames_under_py_bytes_main() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(python) = python_interpreter() else {
        unwind_test_support::missing("python3");
        return;
    };
    println!("interpreter: {}", python.display());
    let work = fresh_dir("python");
    let script = sources().join("cpu.py");
    let script = script.to_str().unwrap();
    let out = record(&work, &[], &python, &[script], &[script]);
    // About 2 s of CPU; CPU-time timers tick at most once per kernel tick (250 Hz here), so
    // 500 samples, more on a faster tick.
    let samples = check_profile(&out, STEM, 100, 0.0);
    check_roots(STEM, &samples, &["_start"], 90.0);
    check_share(STEM, &samples, "Py_BytesMain", 90.0);
    check_share(STEM, &samples, "_PyEval_EvalFrameDefault", 90.0);
    // The JSON round trip runs in the `_json` extension, loaded by `import json`.
    let total = count(&samples, |_| true);
    let in_json = count(&samples, |s| {
        s.frames.iter().any(|f| {
            Path::new(&f.module)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("_json."))
        })
    });
    println!(
        "{STEM}: {in_json} of {total} samples ({:.1} %) in the _json extension",
        pct(in_json, total)
    );
    assert!(
        in_json > 0,
        "no sample in the _json extension the script loads (a module loaded while profiling)"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// A C file that keeps cc1 busy for about a second at -O2: `n` functions with loops to unroll
/// and vectorize, all called from `main`, which prints a checksum.
fn generated_c(n: usize) -> String {
    let mut c = String::from("#include <stdio.h>\n");
    for i in 0..n {
        c.push_str(&format!(
            "static unsigned f{i}(unsigned x) {{\n\
             \x20   unsigned a[16];\n\
             \x20   for (int k = 0; k < 16; k++) a[k] = x * {}u + k * (x ^ {i}u);\n\
             \x20   for (int r = 0; r < 4; r++)\n\
             \x20       for (int k = 1; k < 16; k++) a[k] += (a[k - 1] >> (r + 1)) ^ (a[k] * {}u);\n\
             \x20   switch (x % 7) {{\n\
             \x20   case 0: return a[3] + a[5];\n\
             \x20   case 1: return a[7] ^ a[1];\n\
             \x20   case 2: return a[15] - x;\n\
             \x20   case 3: return a[9] * 3u;\n\
             \x20   case 4: return a[2] + a[11];\n\
             \x20   default: return a[0] ^ a[14];\n\
             \x20   }}\n\
             }}\n",
            i + 3,
            2 * i + 1
        ));
    }
    c.push_str("int main(void) {\n    unsigned s = 0;\n");
    for i in 0..n {
        c.push_str(&format!("    s += f{i}(s + {i}u);\n"));
    }
    c.push_str("    printf(\"%u\\n\", s);\n    return 0;\n}\n");
    c
}

/// The functions `module` imports (its undefined dynamic symbols, demangled, without version),
/// by `nm`.
fn imports(module: &str) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "-u", "-C"])
        .arg(module)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().split_once(' ').map(|(_, name)| name.trim()))
        .map(|name| match name.split_once('@') {
            Some((n, version)) if !version.contains('(') => n.to_owned(),
            _ => name.to_owned(),
        })
        .collect()
}

#[test]
fn gcc_driver_and_the_programs_it_execs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for tool in ["gcc", "nm"] {
        if !unwind_test_support::tool_runs(tool) {
            unwind_test_support::missing(&format!("{tool} (packages gcc, binutils)"));
            return;
        }
    }
    let work = fresh_dir("gcc");
    std::fs::write(work.join("big.c"), generated_c(150)).unwrap();
    let gcc = Path::new("gcc");
    // With allocations sampled too: every process's malloc goes through the preload library.
    let out = record(
        &work,
        &["--clock", "wall", "--alloc"],
        gcc,
        &["-O2", "big.c", "-o", "plain"],
        &["-O2", "big.c", "-o", "profiled"],
    );
    // Compilers are deterministic: the same input gives the same bytes.
    let (plain, profiled) = (work.join("plain"), work.join("profiled"));
    assert!(
        std::fs::read(&plain).unwrap() == std::fs::read(&profiled).unwrap(),
        "gcc wrote a different program under the profiler"
    );
    let run = |p: &Path| Command::new(p).output().unwrap().stdout;
    assert_eq!(
        run(&plain),
        run(&profiled),
        "the programs compiled with and without the profiler print different things"
    );
    // One profile of every process of the run (one set of files), told apart by their
    // programs' names: the driver (`x86_64-linux-gnu-gcc-12` where `gcc` is a link to it),
    // `cc1`, the assembler, `collect2` and the linker.
    let files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        files.len(),
        8,
        "one set of outputs, a heap profile and its two flame graphs: {files:?}"
    );
    let all = check_profile(&out, STEM, 400, 1.0);
    // cc1's allocations are among them, named.
    let summary = std::fs::read_to_string(out.join(format!("{STEM}.summary.txt"))).unwrap();
    let allocations = summary
        .lines()
        .find_map(|l| l.strip_prefix("allocations"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        allocations > 20,
        "{allocations} allocation samples:\n{summary}"
    );
    let driver_name = basename(&summary_program(&out, STEM));
    let mut processes: BTreeMap<String, Vec<PSample>> = BTreeMap::new();
    for sample in &all {
        let name = sample.process.clone();
        let role = if name == driver_name {
            "gcc"
        } else if name == "cc1" || name == "collect2" {
            name.as_str()
        } else if name.ends_with("as") {
            "as"
        } else {
            "other"
        };
        processes
            .entry(role.to_owned())
            .or_default()
            .push(sample.clone());
    }
    println!(
        "processes: {:?}",
        processes
            .iter()
            .map(|(k, v)| (k, count(v, |_| true)))
            .collect::<Vec<_>>()
    );
    for role in ["gcc", "cc1", "as", "collect2"] {
        assert!(
            processes.contains_key(role),
            "no samples of {role} in {}: {:?}",
            out.display(),
            processes.keys()
        );
    }
    // No frame is named after a function its module imports: that name belongs to another
    // module (the imported function's PLT entry is no function of the module's own).
    let mut misnamed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut by_module: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for f in all.iter().flat_map(|s| &s.frames) {
        by_module.entry(&f.module).or_default().insert(&f.function);
    }
    for (module, names) in by_module.into_iter().filter(|(m, _)| !m.is_empty()) {
        let imported = imports(module);
        for name in names.into_iter().filter(|n| imported.contains(*n)) {
            misnamed
                .entry(module.to_owned())
                .or_default()
                .insert(name.to_owned());
        }
    }
    assert!(
        misnamed.is_empty(),
        "frames named after functions their module imports: {misnamed:?}"
    );
    // The driver waits for its children: wall-clock samples, in a wait, under `main`.
    let driver = &processes["gcc"];
    assert!(
        count(driver, |_| true) >= 100,
        "too few samples of the driver"
    );
    // The driver is stripped, and no symbol names its `_start`: the walks reach the C library's
    // start of `main` and a frame in the driver before it.
    let program = summary_program(&out, STEM);
    check_first_frames(
        "gcc",
        driver,
        &format!("{program} (its _start)"),
        90.0,
        |f| f.module == program,
    );
    check_share("gcc", driver, "__libc_start_call_main", 90.0);
    let total = count(driver, |_| true);
    let waiting = count(driver, |s| {
        s.frames.last().is_some_and(|f| f.function.contains("wait"))
    });
    println!(
        "gcc: {waiting} of {total} samples ({:.1} %) waiting",
        pct(waiting, total)
    );
    assert!(
        pct(waiting, total) >= 80.0,
        "the driver waits for its children, but only {waiting} of {total} samples end in a wait"
    );
    // cc1 compiles for about a second (1000 samples a second on the wall clock); its symbol
    // table names its C++ functions.
    // A few of cc1's template functions have names in GCC's own encoding of a scope
    // resolution in a template argument (`...XsrNS4_IT0_EE...`), which `c++filt` demangles
    // but the profiler's demangler (cpp_demangle, through addr2line) rejects by design
    // (gimli-rs/cpp_demangle#173, #302): those stay mangled.
    let cc1 = &processes["cc1"];
    assert!(count(cc1, |_| true) >= 300, "too few samples of cc1");
    check_roots("cc1", cc1, &["_start"], 90.0);
    check_share("cc1", cc1, "toplev::main(int, char**)", 90.0);
    let named: BTreeSet<&str> = cc1
        .iter()
        .flat_map(|s| &s.frames)
        .filter(|f| f.module.ends_with("/cc1") && !f.function.starts_with("cc1+0x"))
        .map(|f| f.function.as_str())
        .collect();
    println!("cc1: {} distinct named functions of cc1", named.len());
    assert!(
        named.len() >= 50,
        "only {} named cc1 functions in a compilation: {named:?}",
        named.len()
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn rust_release_binary_threads_and_demangled_paths() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if !unwind_test_support::tool_runs(&rustc) {
        unwind_test_support::missing("rustc");
        return;
    }
    let work = fresh_dir("rust");
    let exe = work.join("work");
    unwind_test_support::run(
        Command::new(&rustc)
            .arg("-O")
            .arg(sources().join("work.rs"))
            .arg("-o")
            .arg(&exe),
    );
    let out = record(&work, &[], &exe, &[], &[]);
    // About 2 s of CPU over four threads.
    let samples = check_profile(&out, STEM, 100, 0.0);
    check_roots(STEM, &samples, &["_start", "clone3"], 95.0);
    let total = count(&samples, |_| true);
    for job in ["hash_strings", "sort_numbers", "sieve_primes", "mandelbrot"] {
        let function = format!("work::{job}");
        // Each job has its own thread, named after it, and gets about a quarter of the CPU.
        let on_thread = count(&samples, |s| s.thread == job);
        let in_job = count(&samples, |s| s.thread == job && s.has(&function));
        let anywhere = count(&samples, |s| s.has(&function));
        println!(
            "{function}: thread {job} {on_thread} samples, {in_job} in {function}; \
             {anywhere} of {total} samples ({:.1} %) in {function}",
            pct(anywhere, total)
        );
        assert!(
            on_thread > 0 && in_job * 100 >= on_thread * 90,
            "thread {job}: {in_job} of {on_thread} samples in {function}"
        );
        assert!(
            pct(anywhere, total) >= 10.0,
            "{function} in {anywhere} of {total} samples, want about a quarter"
        );
        assert_eq!(
            anywhere, in_job,
            "{function} sampled on threads other than {job}"
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// The first line of the function whose definition contains `marker` in `source`, and the line
/// of the `}` that ends it (the first line after it that starts with `}`).
fn function_lines(source: &str, marker: &str) -> (i64, i64) {
    let lines: Vec<&str> = source.lines().collect();
    let start = lines.iter().position(|l| l.contains(marker)).unwrap();
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.starts_with('}'))
            .unwrap();
    (start as i64 + 1, end as i64 + 1)
}

#[test]
fn cpp_exceptions_threads_and_a_thread_pool() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !unwind_test_support::tool_runs("g++") {
        unwind_test_support::missing("g++");
        return;
    }
    let work = fresh_dir("cpp");
    let exe = work.join("exceptions");
    let source = sources().join("exceptions.cpp");
    // -g: the ordinary build for profiling, and the one whose source lines can be checked
    // (without it the names come from the symbol table, inlined functions unseen).
    unwind_test_support::run(
        Command::new("g++")
            .args(["-O2", "-g", "-pthread"])
            .arg(&source)
            .arg("-o")
            .arg(&exe),
    );
    let out = record(&work, &[], &exe, &[], &[]);
    // About 2.5 s of CPU over six threads. A rare frame in libstdc++'s templates keeps its
    // mangled name: those using GCC's `sr` encoding in template arguments (seen:
    // `std::make_shared<std::packaged_task<...>>`, 1 of 63,720 frames), which cpp_demangle
    // rejects by design (gimli-rs/cpp_demangle#173) although c++filt reads them.
    let samples = check_profile(&out, STEM, 100, 0.1);
    check_roots(STEM, &samples, &["_start", "clone3"], 95.0);

    // Samples inside the C++ unwinder walk out of it, through the throwing function and the one
    // that catches, to the thread's first frame.
    let (check, catch) = (
        "ns::check(unsigned long)",
        "ns::throw_and_catch(unsigned long, unsigned long)",
    );
    let throwing = |s: &PSample| s.has("__cxa_throw") || s.has("_Unwind_RaiseException");
    let in_unwinder = count(&samples, throwing);
    let through = count(&samples, |s| {
        throwing(s) && s.has(check) && s.has(catch) && ["_start", "clone3"].contains(&s.root())
    });
    let total = count(&samples, |_| true);
    println!(
        "{in_unwinder} of {total} samples ({:.1} %) throwing; {through} of them under {catch} and \
         from the thread's start",
        pct(in_unwinder, total)
    );
    assert!(
        in_unwinder >= 50,
        "only {in_unwinder} of {total} samples under __cxa_throw or _Unwind_RaiseException"
    );
    assert!(
        through * 100 >= in_unwinder * 95,
        "only {through} of {in_unwinder} samples in the C++ unwinder walk out of it through \
         {check} and {catch} to the thread's start"
    );

    // The threads: main, two std::threads, three pool workers.
    let mut per_thread: BTreeMap<i64, u64> = BTreeMap::new();
    let mut pool_threads: BTreeMap<i64, u64> = BTreeMap::new();
    for s in &samples {
        *per_thread.entry(s.tid).or_default() += s.count;
        if s.has("ns::Pool::worker()") {
            *pool_threads.entry(s.tid).or_default() += s.count;
        }
    }
    println!("samples per thread: {per_thread:?}; pool workers: {pool_threads:?}");
    assert_eq!(
        per_thread.len(),
        6,
        "want samples of 6 threads (main, 2 std::threads, 3 pool workers): {per_thread:?}"
    );
    assert!(
        pool_threads.len() == 3 && pool_threads.values().all(|&n| n >= 10),
        "want at least 10 samples in ns::Pool::worker() on each of 3 threads: {pool_threads:?}"
    );
    check_share(
        STEM,
        &samples,
        "ns::crunch(unsigned long, unsigned long)",
        10.0,
    );

    // Debug information: the frames of `ns::check` carry its file and a line of its body.
    let text = std::fs::read_to_string(&source).unwrap();
    let (first, last) = function_lines(&text, "std::uint64_t check(std::uint64_t i)");
    let mut right = 0;
    let mut wrong = BTreeSet::new();
    for s in &samples {
        for f in s.frames.iter().filter(|f| f.function == check) {
            if f.file.ends_with("exceptions.cpp") && (first..=last).contains(&f.line) {
                right += s.count;
            } else {
                wrong.insert((f.file.clone(), f.line));
            }
        }
    }
    println!("{check}: {right} frames at lines {first}-{last} of exceptions.cpp");
    assert!(
        right > 0 && wrong.is_empty(),
        "{check} is at lines {first}-{last} of exceptions.cpp; the profile says {wrong:?}"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// `sleep 0.3` on the wall clock: 1000 signals a second while it sleeps, then none once the
/// profiler stops at exit (the timers are deleted; at most the one signal already pending),
/// although symbolizing and writing the outputs take tens of milliseconds more.
/// (The first POSIX timer of a process has id 0, which the sampler once took for "no timer",
/// leaving the main thread's timer firing through the exit path.)
#[test]
fn no_signals_after_stop() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = fresh_dir("sleep");
    let out = record(
        &work,
        &["--clock", "wall"],
        Path::new("sleep"),
        &["0.3"],
        &["0.3"],
    );
    let summary = std::fs::read_to_string(out.join(format!("{STEM}.summary.txt"))).unwrap();
    let after_stop = summary_text::required(&summary, "after stop");
    println!("{after_stop} signals after stop");
    assert!(
        after_stop <= 1,
        "{after_stop} timer signals after the profiler stopped: a timer was not deleted\n{summary}"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// A process that `exec`s while its threads are sampled survives, with every kind of timer at
/// 10 kHz: a shell script burns CPU, then `exec`s itself, 20 times. A signal the timer raises
/// during `execve` (which the CPU clock counts) is delivered to the new program, where no
/// handler is installed yet: with `SIGPROF`, whose default action ends the process, that killed
/// the shell (exit 155) on almost every run; the default signal is `SIGURG`, which a program
/// that has no handler for it ignores. The `SIGTRAP` perf events count user time only, so that
/// they cannot raise one there.
#[test]
fn a_process_that_execs_itself_keeps_running() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = fresh_dir("exec");
    let script = work.join("exec-self.sh");
    std::fs::write(
        &script,
        "n=$1; i=0\nwhile [ $i -lt 20000 ]; do i=$((i+1)); done\n\
         if [ \"$n\" -gt 0 ]; then exec /bin/bash \"$0\" $((n-1)); fi\necho \"done after $i\"\n",
    )
    .unwrap();
    // bash rather than sh: dash leaves with `_exit`, and would write no profile.
    let sh = Path::new("/bin/bash");
    let script = script.to_str().unwrap();
    for timer in ["auto", "perf-sigtrap", "posix"] {
        let out = record(
            &work,
            &["--timer", timer, "--frequency", "10000"],
            sh,
            &[script, "20"],
            &[script, "20"],
        );
        let summary = summary_program(&out, STEM);
        println!("--timer {timer}: the last program profiled was {summary}");
        let _ = std::fs::remove_dir_all(&out);
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// A signal sent to the process is the program's: one that blocks `SIGUSR1` in its only
/// thread, sends it to itself and waits for it with `sigtimedwait` takes it, under the preload
/// library alone (whose collector thread runs beside the program's). That thread once left
/// every signal unblocked, so the kernel gave it the signal, whose default action ended the
/// process.
#[test]
fn a_signal_the_program_waits_for_is_not_taken_by_the_profilers_thread() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = fresh_dir("sigwait");
    let source = work.join("sigwait.c");
    std::fs::write(
        &source,
        "#include <signal.h>\n#include <stdio.h>\n#include <time.h>\n#include <unistd.h>\n\
         int main(void) {\n\
             sigset_t usr1; sigemptyset(&usr1); sigaddset(&usr1, SIGUSR1);\n\
             sigprocmask(SIG_BLOCK, &usr1, NULL);\n\
             struct timespec start, now;\n\
             clock_gettime(CLOCK_MONOTONIC, &start);\n\
             do clock_gettime(CLOCK_MONOTONIC, &now); while (now.tv_sec - start.tv_sec < 1);\n\
             kill(getpid(), SIGUSR1);\n\
             struct timespec wait = {2, 0};\n\
             int got = sigtimedwait(&usr1, NULL, &wait);\n\
             printf(\"%s\\n\", got == SIGUSR1 ? \"taken\" : \"not taken\");\n\
             return got == SIGUSR1 ? 0 : 1;\n\
         }\n",
    )
    .unwrap();
    let exe = work.join("sigwait");
    unwind_test_support::run(
        Command::new("gcc")
            .arg("-O1")
            .arg("-o")
            .arg(&exe)
            .arg(&source),
    );
    let preload = release_dir().join("libunwind_profiler_preload.so");
    let run = Command::new(&exe)
        .env("LD_PRELOAD", &preload)
        .env("UNWIND_PROFILER_OUTPUT", work.join("profile"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.trim() == "taken",
        "{}: {stdout} {}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = std::fs::remove_dir_all(&work);
}
