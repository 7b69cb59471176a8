//! A library with MiniDebugInfo, built with the tools gdb's manual names (gcc, objcopy, strip,
//! xz), for the tests of its CFI (`unwind-dwarf`) and of its names (`unwind-samples`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files [`mini_debug_info_library`] builds.
#[derive(Clone, Debug)]
pub struct MiniDebugInfoLibrary {
    /// `lib.so`: `.debug_frame` and `.symtab`, no `.eh_frame` (as ART's compiled code is).
    pub original: PathBuf,
    /// `stripped.so`: the same stripped of both.
    pub stripped: PathBuf,
    /// `mini.so`: `stripped.so` with both in its `.gnu_debugdata`.
    pub mini: PathBuf,
}

/// The functions of the library, `static` `leaf` (named only by `.symtab`), `mid` and `top`.
pub const SOURCE: &str = "static int __attribute__((noinline)) leaf(int x) {\n\
     \x20   volatile int a[8];\n\
     \x20   for (int i = 0; i < 8; i++) a[i] = x + i;\n\
     \x20   return a[3] * 3 + 1;\n\
     }\n\
     int __attribute__((noinline)) mid(int x) { return leaf(x) + 2; }\n\
     int top(int x) { return mid(x) * 2; }\n";

fn run(cmd: &mut Command) -> bool {
    match cmd.output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => panic!("{cmd:?}: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            crate::missing(&format!("{cmd:?}: {e}"));
            false
        }
    }
}

/// Builds the library of [`SOURCE`] in `dir` (emptied first) as [`MiniDebugInfoLibrary`] says,
/// for the host; `None` if a tool is missing (outside CI).
pub fn mini_debug_info_library(dir: &Path) -> Option<MiniDebugInfoLibrary> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let at = |name: &str| dir.join(name);
    std::fs::write(at("lib.c"), SOURCE).unwrap();
    let tool = |name: &str, args: &[&str]| {
        let mut c = Command::new(name);
        c.current_dir(dir).args(args);
        c
    };
    let ok = run(&mut tool(
        "gcc",
        &[
            "-shared",
            "-fPIC",
            "-nostartfiles",
            "-g",
            "-O2",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-Wl,--no-ld-generated-unwind-info",
            "lib.c",
            "-o",
            "lib.so",
        ],
    )) && run(&mut tool(
        "objcopy",
        &["--only-keep-debug", "lib.so", "debug"],
    )) && run(&mut tool(
        "objcopy",
        &[
            "--strip-debug",
            "--keep-section=.debug_frame",
            "-R",
            ".comment",
            "debug",
            "mini",
        ],
    )) && run(&mut tool("xz", &["-kf", "mini"]))
        && {
            std::fs::copy(at("lib.so"), at("stripped.so")).unwrap();
            run(&mut tool("strip", &["--strip-all", "stripped.so"]))
        }
        && run(&mut tool(
            "objcopy",
            &[
                "--add-section",
                ".gnu_debugdata=mini.xz",
                "stripped.so",
                "mini.so",
            ],
        ));
    ok.then(|| MiniDebugInfoLibrary {
        original: at("lib.so"),
        stripped: at("stripped.so"),
        mini: at("mini.so"),
    })
}
