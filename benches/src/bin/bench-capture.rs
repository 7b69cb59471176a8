//! Captures the benchmark samples into a directory: `bench-capture DIR`.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/bench-samples".into()),
    );
    std::fs::create_dir_all(&dir).expect("create sample directory");
    // Samples name module files by absolute path: benchmarks run from other directories.
    let dir = std::fs::canonicalize(&dir).expect("sample directory");
    unwind_in_process::init().expect("init");
    let mut samples = vec![
        unwind_benches::capture::recursion(&dir, 20),
        unwind_benches::capture::recursion(&dir, 60),
        unwind_benches::capture::recursion(&dir, 200),
        unwind_benches::capture::plt(&dir),
        unwind_benches::capture::profile(&dir),
    ];
    match unwind_benches::capture::fp_chain(&dir, 200) {
        Ok(s) => samples.push(s),
        Err(e) => eprintln!("bench-capture: no frame-pointer sample: {e}"),
    }
    match unwind_benches::capture::no_tables(&dir, 20) {
        Ok(s) => samples.push(s),
        Err(e) => eprintln!("bench-capture: no sample without unwind tables: {e}"),
    }
    for s in &samples {
        let path = dir.join(format!("{}.sample", s.name));
        s.save(&path).expect("save sample");
        println!(
            "{}: {} frames, {} stack bytes",
            path.display(),
            s.expect,
            s.stack.len()
        );
    }
}
