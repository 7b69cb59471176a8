//! Builds the C parts of the demo workload:
//! - `c/checksum.c` into the binary itself, with the `cc` crate (`-O2 -g`, frame pointers left
//!   to the compiler's default, as an ordinary build has them);
//! - `c/plugin.c` and `c/churn.c` into `libdemo_plugin.so` and `libdemo_churn.so` in `OUT_DIR`,
//!   with the C compiler invoked directly (`$CC`, else `cc`) as `-shared -fPIC -O2 -g`. Their
//!   paths reach the binary as `DEMO_PLUGIN_PATH` and `DEMO_CHURN_PATH` (`env!`).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=c/checksum.c");
    cc::Build::new()
        .file("c/checksum.c")
        .opt_level(2)
        .debug(true)
        // The cc crate forces frame pointers whenever it emits debug information; an ordinary
        // `-O2 -g` build does not, and the profiler must cope with that (CFI only).
        .force_frame_pointer(false)
        .compile("demo_checksum");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-env-changed=CC");
    let compiler = env::var_os("CC").unwrap_or_else(|| "cc".into());
    for (source, library, variable) in [
        ("c/plugin.c", "libdemo_plugin.so", "DEMO_PLUGIN_PATH"),
        ("c/churn.c", "libdemo_churn.so", "DEMO_CHURN_PATH"),
    ] {
        println!("cargo:rerun-if-changed={source}");
        let target = out.join(library);
        let status = Command::new(&compiler)
            .args(["-shared", "-fPIC", "-O2", "-g", "-Wall", "-pthread", "-o"])
            .arg(&target)
            .arg(source)
            .status()
            .unwrap_or_else(|e| panic!("cannot run the C compiler {compiler:?}: {e}"));
        assert!(
            status.success(),
            "{compiler:?} failed on {source}: {status}"
        );
        println!("cargo:rustc-env={variable}={}", target.display());
    }
}
