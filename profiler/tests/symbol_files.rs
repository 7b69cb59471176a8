//! Names from wherever a distribution keeps them, under `unwind-profiler record`: a program
//! spends its time in two `static` functions of a library (profiler/tests/symbols/work.c) that
//! only a symbol table or debug information names, and the library is stripped the ways
//! distributions strip theirs, its names put back in each place gdb and elfutils look:
//!
//! - a `.gnu_debuglink` debug file beside the library (no build id: its CRC decides), in
//!   `.debug/` beside it, and under the debug directory of a symbol root (`--symfs`);
//! - the build-id tree of the symbol root's debug directory, its DWARF compressed (read back from
//!   the DWARF cache by a second run), or shared with another library's by dwz (`.gnu_debugaltlink`);
//! - MiniDebugInfo (`.gnu_debugdata`, an xz'd symbol table added with `objcopy --add-section`, as
//!   Fedora's `find-debuginfo` does);
//! - a real debuginfod server (elfutils', started here on loopback over a directory holding
//!   the debug file), and the same with no server on that port: one line on stderr, no wait,
//!   names from `.dynsym`.
//!
//! Where a debug file names them, each function has its source lines in the pprof profile; the
//! summary says where each module's names came from. A debug file of another build (its CRC
//! differs) names nothing.
//!
//! Needs gcc, objcopy, strip, xz, nm, dwz, curl and debuginfod (scripts/setup installs them; a missing
//! one fails under `CI=true`), and the release build of the command and the preload library:
//! `cargo build --release -p unwind-profiler -p unwind-profiler-preload && cargo test --release
//! -p unwind-profiler --test symbol_files`.

// `runs` needs these; this test reads the outputs it checks itself.
#[path = "common/debuginfod_server.rs"]
mod debuginfod_server;
#[allow(dead_code)]
#[path = "common/firefox.rs"]
mod firefox;
#[path = "common/other_user.rs"]
mod other_user;
#[path = "common/record.rs"]
mod record_command;
#[allow(dead_code)]
#[path = "common/runs.rs"]
mod runs;
#[allow(dead_code)]
#[path = "common/summary.rs"]
mod summary_text;
#[allow(dead_code)]
#[path = "common/svg.rs"]
mod svg;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use debuginfod_server::{free_port, serve};
use prost::Message;
use runs::{folded, have, record, run, samples_with, scratch};
use unwind_profiler::output::pprof::proto;
use unwind_profiler::output::Outputs;

/// Held by each test: the runs' sample counts are steadier one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The library's functions that only a symbol table or debug information names.
const HIDDEN: [&str; 2] = ["hidden_spin_a", "hidden_spin_b"];

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/symbols")
        .join(name)
}

fn sh(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `dir/libwork.so` (with debug information, build id as `build_id`: `none` or `sha1`) and
/// `dir/work`, which runs it for about half a second.
fn build(dir: &Path, build_id: &str) {
    std::fs::create_dir_all(dir).unwrap();
    sh(Command::new("gcc")
        .args(["-g", "-O1", "-fPIC", "-shared"])
        .arg(format!("-Wl,--build-id={build_id}"))
        .arg(source("work.c"))
        .arg("-o")
        .arg(dir.join("libwork.so")));
    sh(Command::new("gcc")
        .args(["-g", "-O1"])
        .arg(source("main.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lwork", "-Wl,-rpath,$ORIGIN"])
        .arg("-o")
        .arg(dir.join("work")));
}

/// Splits `dir/libwork.so`'s debug information into `debug`, and strips the library of it and
/// of its symbol table; with `link`, adds a `.gnu_debuglink` to `debug` (named as it is, CRC of
/// it as it is now).
fn split(dir: &Path, debug: &Path, link: bool) {
    let lib = dir.join("libwork.so");
    std::fs::create_dir_all(debug.parent().unwrap()).unwrap();
    sh(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&lib)
        .arg(debug));
    sh(Command::new("strip").arg("--strip-all").arg(&lib));
    if link {
        // objcopy finds the file by the path given and records its name alone.
        sh(Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&lib));
    }
}

/// The library's build id, as hex.
fn build_id(lib: &Path) -> String {
    let id = unwind_samples::debug_files::build_id_of(lib).expect("a build id");
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// What one run under `record` gave.
struct Run {
    /// Samples in each of [`HIDDEN`], and in all.
    hidden: [u64; 2],
    total: u64,
    /// Whether each of [`HIDDEN`] has source lines in the pprof profile.
    lines: [bool; 2],
    /// The summary's line about the library's names.
    names_from: String,
    stderr: String,
    took: Duration,
}

/// Runs `dir/work` under `record` with `options` and the environment `env`.
fn profile(dir: &Path, options: &[&str], env: &[(&str, &str)]) -> Run {
    let out = dir.join("profile");
    let _ = std::fs::remove_dir_all(&out);
    let work = dir.join("work");
    let mut cmd = record(&out, options, &[work.to_str().unwrap()]);
    cmd.env_remove("DEBUGINFOD_URLS");
    cmd.envs(env.iter().copied());
    let started = Instant::now();
    let (status, stderr) = run(&mut cmd, None);
    let took = started.elapsed();
    assert!(status.success(), "{stderr}");
    let lines = folded(&out);
    let total = samples_with(&lines, |_| true);
    let hidden = HIDDEN.map(|f| samples_with(&lines, |x| x == f));
    let summary = std::fs::read_to_string(Outputs::paths(&out, "profile").summary).unwrap();
    let names_from = summary
        .lines()
        .find(|l| l.trim_start().contains("libwork.so:"))
        .unwrap_or("")
        .trim()
        .to_owned();
    let pprof_lines = pprof_lines(&Outputs::paths(&out, "profile").pprof);
    Run {
        hidden,
        total,
        lines: HIDDEN.map(|f| pprof_lines.get(f).is_some_and(|&l| l > 0)),
        names_from,
        stderr,
        took,
    }
}

/// The largest source line the pprof profile at `path` gives each function.
fn pprof_lines(path: &Path) -> HashMap<String, i64> {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let p = proto::Profile::decode(&bytes[..]).expect("a pprof profile");
    let name: HashMap<u64, String> = p
        .function
        .iter()
        .map(|f| (f.id, p.string_table[f.name as usize].clone()))
        .collect();
    let mut out = HashMap::new();
    for l in p.location.iter().flat_map(|l| &l.line) {
        let e = out.entry(name[&l.function_id].clone()).or_insert(0);
        *e = l.line.max(*e);
    }
    out
}

/// Both hidden functions named, each with most of its expected share (the program spends its
/// time in them about equally), with lines if `lines`, and the summary saying `from`.
fn check_named(what: &str, r: &Run, lines: bool, from: &str) {
    println!(
        "{what}: {:?} of {} samples, lines {:?}, {} ({:.2?})",
        r.hidden, r.total, r.lines, r.names_from, r.took
    );
    for (f, n) in HIDDEN.iter().zip(r.hidden) {
        assert!(
            n * 4 >= r.total,
            "{what}: {f} in {n} of {} samples\n{}",
            r.total,
            r.stderr
        );
    }
    if lines {
        assert_eq!(r.lines, [true, true], "{what}: no source lines");
    }
    assert!(
        r.names_from.contains(from),
        "{what}: the summary says {:?}, not {from:?}",
        r.names_from
    );
}

fn tools() -> bool {
    have(&[
        ("gcc", &["--version"]),
        ("objcopy", &["--version"]),
        ("strip", &["--version"]),
        ("xz", &["--version"]),
        ("nm", &["--version"]),
    ])
}

#[test]
fn debug_links_beside_in_dot_debug_and_in_the_debug_directory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools() {
        return;
    }
    let top = scratch("debuglink");
    // Beside the library, with no build id: the CRC alone says it is the library's.
    let dir = top.join("beside");
    build(&dir, "none");
    split(&dir, &dir.join("libwork.so.debug"), true);
    let r = profile(&dir, &[], &[]);
    check_named("beside", &r, true, "debug file by .gnu_debuglink");
    // The same debug file one byte longer: its CRC differs, and it names nothing.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("libwork.so.debug"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"\0").unwrap();
    let r = profile(&dir, &[], &[]);
    println!(
        "another build: {:?} of {} samples, {}",
        r.hidden, r.total, r.names_from
    );
    assert_eq!(
        r.hidden,
        [0, 0],
        "a debug file whose CRC differs named code"
    );
    assert!(r.names_from.contains(".dynsym"), "{}", r.names_from);
    // In `.debug/` beside it.
    let dir = top.join("dot-debug");
    build(&dir, "sha1");
    let debug = dir.join(".debug").join("libwork.so.debug");
    split(&dir, &debug, true);
    check_named(".debug", &profile(&dir, &[], &[]), true, ".gnu_debuglink");
    // Under the debug directory of a symbol root, at the library's directory.
    let dir = top.join("debug-dir");
    build(&dir, "sha1");
    let root = top.join("root");
    let under = root
        .join("usr/lib/debug")
        .join(dir.strip_prefix("/").unwrap())
        .join("libwork.so.debug");
    split(&dir, &under, true);
    let r = profile(&dir, &["--symfs", root.to_str().unwrap()], &[]);
    check_named("debug directory", &r, true, &under.display().to_string());
    let _ = std::fs::remove_dir_all(&top);
}

/// A library in a directory every user can write to (mode 1777, as `/tmp`), whose debug file
/// a second user puts in `.debug/` beside it: refused, and said in the summary, so that the
/// code is named by the library's own tables, not by what that user wrote. The same file
/// given to root names it: the owner is what refused it.
#[test]
fn another_users_debug_file_beside_a_library_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools() {
        return;
    }
    let Some(uid) = other_user::other_user() else {
        return;
    };
    let top = scratch("planted");
    let dir = top.join("shared");
    build(&dir, "sha1");
    let staged = top.join("staged.debug");
    split(&dir, &staged, true);
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = dir.join(".debug").join("staged.debug");
    let made = other_user::as_other_user(
        uid,
        Command::new("/bin/sh")
            .arg("-c")
            .arg("mkdir \"$1/.debug\" && cp \"$2\" \"$1/.debug/\"")
            .arg("sh")
            .arg(&dir)
            .arg(&staged),
    )
    .status()
    .unwrap();
    assert!(
        made.success(),
        "{} could not plant the file",
        other_user::OTHER_USER
    );
    let r = profile(&dir, &[], &[]);
    println!(
        "planted: {:?} of {} samples, {}",
        r.hidden, r.total, r.names_from
    );
    assert_eq!(r.hidden, [0, 0], "another user's debug file named code");
    assert!(
        r.names_from
            .contains(&format!("refused {}", planted.display()))
            && r.names_from.contains(&format!("uid {uid}")),
        "{}",
        r.names_from
    );
    // Root's copy of the same file names the code.
    std::fs::remove_file(&planted).unwrap();
    std::fs::copy(&staged, &planted).unwrap();
    check_named(
        "root's copy",
        &profile(&dir, &[], &[]),
        true,
        ".gnu_debuglink",
    );
    let _ = std::fs::remove_dir_all(&top);
}

#[test]
fn build_id_tree_of_a_symbol_root() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools() {
        return;
    }
    let top = scratch("build-id");
    let dir = top.join("lib");
    build(&dir, "sha1");
    let id = build_id(&dir.join("libwork.so"));
    let root = top.join("root");
    let debug = root
        .join("usr/lib/debug/.build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    split(&dir, &debug, false);
    // Without the root, nothing names them.
    let r = profile(&dir, &[], &[]);
    assert_eq!(r.hidden, [0, 0], "{}", r.names_from);
    let r = profile(&dir, &["--symfs", root.to_str().unwrap()], &[]);
    check_named("build-id tree", &r, true, "debug file by build id");
    // Its DWARF compressed, as distributions ship it: decompressed once into the user's cache,
    // and read back from there by the next run, with the same names and lines.
    sh(Command::new("objcopy")
        .arg("--compress-debug-sections=zlib")
        .arg(&debug));
    let cache = top.join("cache");
    let cached = cache.join("unwind-profiler/dwarf").join(&id);
    let env = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    let r = profile(&dir, &["--symfs", root.to_str().unwrap()], &env);
    check_named("compressed", &r, true, "debug file by build id");
    assert!(cached.is_file(), "no {}", cached.display());
    let written = std::fs::metadata(&cached).unwrap().len();
    let r = profile(&dir, &["--symfs", root.to_str().unwrap()], &env);
    check_named(
        "compressed, from the cache",
        &r,
        true,
        "debug file by build id",
    );
    assert_eq!(std::fs::metadata(&cached).unwrap().len(), written);
    let _ = std::fs::remove_dir_all(&top);
}

/// dwz's supplementary file (`.gnu_debugaltlink`): two libraries' debug files in the build-id
/// tree of a symbol root share their strings in `.dwz/common.debug` (dwz `-m`, `-r`: the link
/// relative to each debug file), as Fedora ships them; the functions' DWARF names are in it.
/// With it, names and lines; without it, the debug file's symbol table names the functions, with
/// no lines.
#[test]
fn dwz_supplementary_file() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools() || !have(&[("dwz", &["--version"])]) {
        return;
    }
    let top = scratch("dwz");
    let root = top.join("root");
    let debug_dir = root.join("usr/lib/debug");
    let mut debug_files = Vec::new();
    // The same library built twice (other build ids): dwz needs two files to share anything.
    for (name, id_style) in [("lib", "sha1"), ("other", "md5")] {
        let dir = top.join(name);
        build(&dir, id_style);
        let id = build_id(&dir.join("libwork.so"));
        let debug = debug_dir
            .join(".build-id")
            .join(&id[..2])
            .join(format!("{}.debug", &id[2..]));
        split(&dir, &debug, false);
        debug_files.push(debug);
    }
    let common = debug_dir.join(".dwz/common.debug");
    std::fs::create_dir_all(common.parent().unwrap()).unwrap();
    sh(Command::new("dwz")
        .arg("-m")
        .arg(&common)
        .arg("-r")
        .args(&debug_files));
    let dir = top.join("lib");
    let symfs = ["--symfs", root.to_str().unwrap()];
    let r = profile(&dir, &symfs, &[]);
    check_named("dwz", &r, true, ".dwz/common.debug)");
    std::fs::remove_file(&common).unwrap();
    let r = profile(&dir, &symfs, &[]);
    println!(
        "dwz, common file gone: {:?} of {} samples, lines {:?}, {}",
        r.hidden, r.total, r.lines, r.names_from
    );
    assert_eq!(
        r.lines,
        [false, false],
        "lines without the supplementary file"
    );
    let _ = std::fs::remove_dir_all(&top);
}

#[test]
fn mini_debug_info() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools() {
        return;
    }
    let dir = scratch("minidebuginfo");
    build(&dir, "sha1");
    let lib = dir.join("libwork.so");
    // Fedora's find-debuginfo: the functions .dynsym lacks, in a symbol-table-only ELF file,
    // xz'd into .gnu_debugdata of the stripped file.
    let debug = dir.join("libwork.debug");
    sh(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&lib)
        .arg(&debug));
    let names = |args: &[&str], file: &Path| -> Vec<String> {
        let out = Command::new("nm").args(args).arg(file).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (name, kind) = (f.next()?, f.next()?);
                matches!(kind, "T" | "t").then(|| name.to_owned())
            })
            .collect()
    };
    let dynamic = names(&["-D", "--format=posix", "--defined-only"], &lib);
    let keep: Vec<String> = names(&["--format=posix", "--defined-only"], &debug)
        .into_iter()
        .filter(|n| !dynamic.contains(n))
        .collect();
    assert!(
        HIDDEN.iter().all(|h| keep.iter().any(|k| k == h)),
        "{keep:?}"
    );
    std::fs::write(dir.join("keep"), keep.join("\n") + "\n").unwrap();
    let mini = dir.join("mini");
    sh(Command::new("objcopy")
        .args([
            "-S",
            "--remove-section",
            ".gdb_index",
            "--remove-section",
            ".comment",
        ])
        .arg(format!("--keep-symbols={}", dir.join("keep").display()))
        .arg(&debug)
        .arg(&mini));
    sh(Command::new("xz").arg("-f").arg(&mini));
    std::fs::remove_file(&debug).unwrap();
    sh(Command::new("strip").arg("--strip-all").arg(&lib));
    sh(Command::new("objcopy")
        .arg(format!(
            "--add-section=.gnu_debugdata={}.xz",
            mini.display()
        ))
        .arg(&lib));
    let r = profile(&dir, &[], &[]);
    check_named("MiniDebugInfo", &r, false, "MiniDebugInfo");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TLS proxy (Python's `ssl`) on a free loopback port in front of a plain HTTP server, with a
/// certificate for 127.0.0.1 from a certificate authority made for the test (`ca`), until dropped.
struct TlsProxy {
    child: std::process::Child,
    url: String,
    ca: PathBuf,
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The proxy: argv certificate, key, upstream port; prints its port.
const TLS_PROXY: &str = r#"
import socket, ssl, sys, threading
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
upstream = int(sys.argv[3])
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
print(listener.getsockname()[1], flush=True)
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.close()
        except OSError:
            pass
def serve(client):
    try:
        tls = context.wrap_socket(client, server_side=True)
    except (ssl.SSLError, OSError):
        client.close()
        return
    up = socket.create_connection(("127.0.0.1", upstream))
    threading.Thread(target=pipe, args=(tls, up), daemon=True).start()
    pipe(up, tls)
while True:
    client, _ = listener.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
"#;

impl TlsProxy {
    fn start(dir: &Path, upstream: &str) -> TlsProxy {
        std::fs::create_dir_all(dir).unwrap();
        let openssl = |args: &[&str]| sh(Command::new("openssl").args(args).current_dir(dir));
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=unwind-profiler test authority",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        std::fs::write(dir.join("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext",
        ]);
        let port = upstream.rsplit(':').next().unwrap();
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(TLS_PROXY)
            .arg(dir.join("server.pem"))
            .arg(dir.join("server.key"))
            .arg(port)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        TlsProxy {
            child,
            url: format!("https://127.0.0.1:{}", line.trim()),
            ca: dir.join("ca.pem"),
        }
    }
}

#[test]
fn debuginfod_server_up_and_down() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools()
        || !have(&[
            ("debuginfod", &["--version"]),
            ("curl", &["--version"]),
            ("openssl", &["version"]),
            ("python3", &["--version"]),
        ])
    {
        return;
    }
    let top = scratch("debuginfod");
    let dir = top.join("lib");
    build(&dir, "sha1");
    let id = build_id(&dir.join("libwork.so"));
    // The debug file in the server's directory only; the library keeps no link to it.
    let served = top.join("served");
    split(&dir, &served.join("libwork.so.debug"), false);
    let cache = top.join("cache");
    let server = serve(&served, &top.join("db.sqlite"), &id);
    let cache_var = cache.to_str().unwrap();
    let env = [
        ("DEBUGINFOD_URLS", server.url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", cache_var),
    ];
    let r = profile(&dir, &[], &env);
    check_named(
        "debuginfod",
        &r,
        true,
        &format!("debug file from {}", server.url),
    );
    assert!(
        cache.join(&id).join("debuginfo").is_file(),
        "not kept in the cache"
    );
    // The program's own build id, which the server does not have: a negative entry, as
    // elfutils writes it (empty, no permissions), so the next runs do not ask again.
    let missed = cache.join(build_id(&dir.join("work"))).join("debuginfo");
    let meta = std::fs::metadata(&missed).expect("a negative cache entry");
    assert_eq!(meta.len(), 0);
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0
    );
    // Turned off: not asked (the cache is elfutils' too, and is not read either).
    let r = profile(&dir, &["--no-debuginfod"], &env);
    assert_eq!(r.hidden, [0, 0], "--no-debuginfod: {}", r.names_from);
    // The preload library used alone (no `record`): the process names its own frames at its
    // exit, from the same server, into a cache of its own.
    std::fs::remove_dir_all(&cache).unwrap();
    let alone = top.join("alone");
    let mut cmd = Command::new(dir.join("work"));
    for o in unwind_profiler::config::OPTIONS {
        cmd.env_remove(o.env);
    }
    let preload = record_command::release_dir().join("libunwind_profiler_preload.so");
    cmd.env("LD_PRELOAD", &preload)
        .env("UNWIND_PROFILER_OUTPUT", &alone)
        .envs(env)
        .stderr(std::process::Stdio::piped());
    let (status, stderr) = run(&mut cmd, None);
    assert!(status.success(), "{stderr}");
    let lines = folded(&alone);
    for f in HIDDEN {
        assert!(
            samples_with(&lines, |x| x == f) > 0,
            "preload alone: {f} unnamed\n{stderr}"
        );
    }
    assert!(
        cache.join(&id).join("debuginfo").is_file(),
        "preload alone: not kept in the cache"
    );
    // Over https (a TLS proxy in front of the server, its certificate from a test authority):
    // with the authority trusted (SSL_CERT_FILE), names; with the system's authorities only,
    // the server is refused, said once, and names nothing.
    let tls = TlsProxy::start(&top.join("tls"), &server.url);
    std::fs::remove_dir_all(&cache).unwrap();
    let ca = tls.ca.to_str().unwrap();
    let env = [
        ("DEBUGINFOD_URLS", tls.url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", cache_var),
        ("SSL_CERT_FILE", ca),
    ];
    let r = profile(&dir, &[], &env);
    check_named("https", &r, true, &format!("debug file from {}", tls.url));
    std::fs::remove_dir_all(&cache).unwrap();
    let r = profile(&dir, &[], &env[..2]);
    println!(
        "https, authority not trusted: {:?}, {}",
        r.hidden,
        r.stderr.trim()
    );
    assert_eq!(r.hidden, [0, 0], "an untrusted server named code");
    assert_eq!(
        r.stderr
            .lines()
            .filter(|l| l.contains(&format!("debuginfod server {}", tls.url)))
            .count(),
        1,
        "{}",
        r.stderr
    );
    drop(tls);
    drop(server);
    let _ = std::fs::remove_dir_all(&cache);
    // No server on the port: one clear line, no wait, the library's own names.
    let down = format!("http://127.0.0.1:{}", free_port());
    let env = [
        ("DEBUGINFOD_URLS", down.as_str()),
        ("DEBUGINFOD_CACHE_PATH", cache_var),
    ];
    let r = profile(&dir, &[], &env);
    println!(
        "server down: {:?} of {} samples, {}, {:.2?}\n{}",
        r.hidden, r.total, r.names_from, r.took, r.stderr
    );
    assert_eq!(r.hidden, [0, 0]);
    assert!(r.names_from.contains(".dynsym"), "{}", r.names_from);
    let said: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains(&format!("debuginfod server {down}")))
        .collect();
    assert_eq!(said.len(), 1, "{}", r.stderr);
    let lines = folded(&dir.join("profile"));
    assert!(
        samples_with(&lines, |f| f == "lib_entry") * 2 >= r.total,
        "lib_entry (.dynsym) not named"
    );
    let _ = std::fs::remove_dir_all(&top);
}

/// The mappings' file names in the pprof profile at `path`.
fn pprof_mappings(path: &Path) -> Vec<String> {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let p = proto::Profile::decode(&bytes[..]).expect("a pprof profile");
    p.mapping
        .iter()
        .map(|m| p.string_table[m.filename as usize].clone())
        .collect()
}

/// Builds C program `source` with `gcc -O1` into `dir`.
fn build_program(dir: &Path, source: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join(name);
    sh(Command::new("gcc")
        .arg("-O1")
        .arg(source)
        .arg("-o")
        .arg(&exe));
    exe
}

/// Of a function's several names, the public one (tests/symbols/aliases.c: `read`, `open`,
/// `malloc`, as perf gives them, never glibc's internal `__GI___libc_read`, `__libc_open64`,
/// `__libc_malloc`), with glibc's debug symbols installed or not; a signal handler's frames go
/// through `__restore_rt` to `_start` (tests/cross/signal_handler.c); the vdso is `[vdso]`.
#[test]
fn public_names_the_signal_trampoline_and_the_vdso() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !tools() {
        return;
    }
    let dir = scratch("public-names");
    let exe = build_program(&dir, &source("aliases.c"), "aliases");
    let out = dir.join("aliases-profile");
    let (status, stderr) = run(&mut record(&out, &[], &[exe.to_str().unwrap()]), None);
    assert!(status.success(), "{stderr}");
    let lines = folded(&out);
    let total = samples_with(&lines, |_| true);
    let of = |f: &str| samples_with(&lines, |x| x == f);
    let internal = samples_with(&lines, |x| {
        x.starts_with("__GI_")
            || ["__libc_read", "__libc_open64", "__libc_malloc", "__read"].contains(&x)
    });
    println!(
        "aliases: read {}, open {}, malloc {}, free {}, internal names {internal} of {total}",
        of("read"),
        of("open"),
        of("malloc"),
        of("free")
    );
    assert!(of("read") * 5 >= total, "read in {} of {total}", of("read"));
    assert!(
        of("open") * 20 >= total,
        "open in {} of {total}",
        of("open")
    );
    assert!(of("malloc") + of("free") > 0);
    assert_eq!(internal, 0, "internal names of public functions");
    // The signal handler's frames, and the vdso's name.
    let exe = build_program(
        &dir,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cross/signal_handler.c"),
        "signal_handler",
    );
    let out = dir.join("signal-profile");
    let (status, stderr) = run(&mut record(&out, &[], &[exe.to_str().unwrap()]), None);
    assert!(status.success(), "{stderr}");
    let lines = folded(&out);
    let (mut in_handler, mut through) = (0, 0);
    for (frames, n) in &lines {
        if let Some(at) = frames.iter().position(|f| f == "handler") {
            in_handler += n;
            if at >= 2 && frames[at - 1] == "__restore_rt" && frames[0] == "_start" {
                through += n;
            }
        }
    }
    println!("signal handler: {through} of {in_handler} samples through __restore_rt to _start");
    assert!(in_handler >= 20, "{in_handler} samples in the handler");
    assert!(
        through * 100 >= in_handler * 95,
        "{through} of {in_handler}"
    );
    let mappings = pprof_mappings(&Outputs::paths(&out, "profile").pprof);
    assert!(mappings.iter().any(|m| m == "[vdso]"), "{mappings:?}");
    assert!(
        !mappings.iter().any(|m| m.contains("linux-vdso")),
        "{mappings:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
