//! Loads the CFI of ELF files and prints what was kept, merged and dropped.
//!
//! `cargo run --release -p unwind-dwarf --example cfi_stats -- /lib/x86_64-linux-gnu/libc.so.6`

use std::time::Instant;

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        eprintln!("usage: cfi_stats FILE...");
        std::process::exit(2);
    }
    for path in paths {
        let t = Instant::now();
        match unwind_dwarf::load_elf_file::<unwind_dwarf::X86_64>(path.as_ref()) {
            Ok(loaded) => {
                let s = &loaded.stats.cfi;
                let rows = loaded.rules.rows().max(1);
                println!(
                    "{path}: {} FDEs, {} rows read, {} extents kept, {} merged, {} dropped, {} distinct rules, {} expressions, {:.2} bytes/row, {:.1} ms",
                    s.fdes,
                    s.rows,
                    s.table.extents,
                    s.table.merged,
                    s.dropped_total(),
                    loaded.rules.dictionary().len(),
                    loaded.rules.exprs().len(),
                    loaded.rules.bytes() as f64 / rows as f64,
                    t.elapsed().as_secs_f64() * 1e3
                );
                for (reason, n) in s.drops() {
                    println!("  dropped {}: {n}", reason.name());
                }
                if s.plt_rows > 0 {
                    println!("  PLT rows synthesized: {}", s.plt_rows);
                }
                if s.handler_installs + s.handler_installs_unrecognised > 0 {
                    println!(
                        "  exception handler installs: {} found ({} with their context record), {} not recognised",
                        s.handler_installs, s.handler_install_contexts, s.handler_installs_unrecognised
                    );
                }
                if s.lazy_binding_crossings > 0 {
                    println!(
                        "  lazy-binding trampolines crossed: {}",
                        s.lazy_binding_crossings
                    );
                }
                if s.bad_entries > 0 {
                    println!("  bad entries: {}", s.bad_entries);
                }
            }
            Err(e) => println!("{path}: error: {e}"),
        }
    }
}
