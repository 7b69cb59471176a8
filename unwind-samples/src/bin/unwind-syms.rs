//! `unwind-syms`: Breakpad symbol files (`STACK CFI`) from ELF files, with the rules our unwinder
//! uses (x86_64 and 32-bit ARM ELF files, on any host).
//!
//! ```text
//! unwind-syms [--store DIR | -o FILE] ELF...
//! ```
//!
//! Without options the symbol files go to stdout, one after the other; `-o FILE` writes them to
//! `FILE`; `--store DIR` writes each to `DIR/<name>/<DEBUG_ID>/<name>.sym`, the layout symbol
//! servers and rust-minidump's `SimpleSymbolSupplier` read. A one-line summary per file goes to
//! stderr: records written, rows expanded and skipped by reason.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use unwind_dwarf::breakpad::{store_path, symbol_file_for_elf};

const USAGE: &str = "usage: unwind-syms [--store DIR | -o FILE] ELF...";

/// Where the symbol files go.
enum Output {
    Stdout,
    File(PathBuf),
    Store(PathBuf),
}

fn parse_args(args: &[String]) -> Result<(Output, Vec<PathBuf>), String> {
    let mut output = Output::Stdout;
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "-o" | "--output" | "-s" | "--store" => {
                if !matches!(output, Output::Stdout) {
                    return Err("give at most one of --store and -o".into());
                }
                let v = it.next().ok_or_else(|| format!("{a} needs an argument"))?;
                output = if a.starts_with("-o") || a == "--output" {
                    Output::File(v.into())
                } else {
                    Output::Store(v.into())
                };
            }
            "--" => files.extend(it.by_ref().map(PathBuf::from)),
            s if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown option {s}")),
            s => files.push(PathBuf::from(s)),
        }
    }
    if files.is_empty() {
        return Err("no ELF file given".into());
    }
    Ok((output, files))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (output, files) = match parse_args(&args) {
        Ok(p) => p,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("unwind-syms: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut joined = String::new();
    let mut failed = false;
    for path in &files {
        let sym = match symbol_file_for_elf(path) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                failed = true;
                continue;
            }
        };
        let written = match &output {
            Output::Stdout => std::io::stdout()
                .lock()
                .write_all(sym.text.as_bytes())
                .map(|()| None),
            Output::File(_) => {
                joined.push_str(&sym.text);
                Ok(None)
            }
            Output::Store(dir) => {
                let target = store_path(dir, &sym.name, &sym.id);
                target
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&target, sym.text.as_bytes()))
                    .map(|()| Some(target))
            }
        };
        match written {
            Ok(target) => {
                let to = target.map_or_else(String::new, |t| format!(" -> {}", t.display()));
                eprintln!(
                    "{} ({} {}){to}: {}",
                    path.display(),
                    sym.arch.name(),
                    sym.id.debug_id,
                    sym.stats
                );
            }
            Err(e) => {
                eprintln!("{}: cannot write: {e}", path.display());
                failed = true;
            }
        }
    }
    if let Output::File(f) = &output {
        if let Err(e) = std::fs::write(f, joined.as_bytes()) {
            eprintln!("{}: cannot write: {e}", f.display());
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
