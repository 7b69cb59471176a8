//! Captured samples on disk: registers, a copy of the stack, and where every module was loaded,
//! so that each unwinder can be run on exactly the same input in its own process.
//!
//! Format: text header lines, a `---` line, then the stack bytes.
//! ```text
//! unwind-sample 1
//! name rec200
//! regs <pc> <sp> <fp>
//! stack <base> <len>
//! expect <frames>            (frames our in-process unwinder found when capturing)
//! module <start> <end> <bias> <path>
//! ---
//! <len bytes>
//! ```

use std::fmt::Write as _;
use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};

use unwind_in_process::Regs;
use unwind_samples::offline::ModuleFile;

/// One captured sample.
#[derive(Clone, Debug)]
pub struct Sample {
    /// A short name (`rec200`, `plt`, ...).
    pub name: String,
    /// Registers at the capture point.
    pub regs: Regs,
    /// Address of `stack[0]`.
    pub base: u64,
    /// The copied stack.
    pub stack: Vec<u8>,
    /// Frames our unwinder found in-process at capture time.
    pub expect: usize,
    /// Every module of the capturing process.
    pub modules: Vec<ModuleFile>,
}

impl Sample {
    /// The stack copy as `Memory`.
    pub fn image(&self) -> unwind_core::StackImage<'_> {
        unwind_core::StackImage::new(self.base, &self.stack)
    }

    /// Writes the sample to `path`.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let mut head = String::new();
        let _ = writeln!(head, "unwind-sample 1");
        let _ = writeln!(head, "name {}", self.name);
        let r = &self.regs;
        let _ = writeln!(head, "regs {:#x} {:#x} {:#x}", r.pc, r.sp, r.fp);
        let _ = writeln!(head, "stack {:#x} {}", self.base, self.stack.len());
        let _ = writeln!(head, "expect {}", self.expect);
        for m in &self.modules {
            let _ = writeln!(
                head,
                "module {:#x} {:#x} {:#x} {}",
                m.start,
                m.end,
                m.bias,
                m.path.display()
            );
        }
        head.push_str("---\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.stack);
        std::fs::write(path, bytes)
    }

    /// Reads a sample written by [`save`](Self::save).
    pub fn load(path: &Path) -> io::Result<Self> {
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {what}", path.display()),
            )
        };
        let mut r = io::BufReader::new(std::fs::File::open(path)?);
        let mut s = Sample {
            name: String::new(),
            regs: Regs::default(),
            base: 0,
            stack: Vec::new(),
            expect: 0,
            modules: Vec::new(),
        };
        let mut len = 0usize;
        let hex = |t: Option<&str>| -> io::Result<u64> {
            let t = t.ok_or_else(|| bad("missing field"))?;
            u64::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| bad("bad number"))
        };
        loop {
            let mut line = String::new();
            if r.read_line(&mut line)? == 0 {
                return Err(bad("no --- line"));
            }
            let line = line.trim_end();
            if line == "---" {
                break;
            }
            let mut f = line.splitn(5, ' ');
            match f.next() {
                Some("unwind-sample") => {}
                Some("name") => s.name = f.next().unwrap_or("").to_string(),
                Some("regs") => {
                    s.regs = Regs {
                        pc: hex(f.next())?,
                        sp: hex(f.next())?,
                        fp: hex(f.next())?,
                    }
                }
                Some("stack") => {
                    s.base = hex(f.next())?;
                    len = f
                        .next()
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| bad("stack length"))?;
                }
                Some("expect") => s.expect = f.next().and_then(|n| n.parse().ok()).unwrap_or(0),
                Some("module") => s.modules.push(ModuleFile {
                    start: hex(f.next())?,
                    end: hex(f.next())?,
                    bias: hex(f.next())?,
                    path: PathBuf::from(f.next().ok_or_else(|| bad("module path"))?),
                }),
                _ => return Err(bad("unknown line")),
            }
        }
        s.stack = vec![0; len];
        r.read_exact(&mut s.stack)?;
        Ok(s)
    }
}
