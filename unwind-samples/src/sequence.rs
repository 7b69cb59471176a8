//! Sequences of samples: consecutive samples of a process as its signal handlers took them
//! (each thread's registers and stack copy, and the frames the handler found), with the modules
//! of the process, so that a benchmark can replay them in order through one rule cache per
//! thread, as the handler saw them.
//!
//! File format: a text header, then one record per sample.
//! ```text
//! unwind-sequence 1
//! name NAME
//! module START END BIAS PATH          (one per module; a relative PATH is next to the file)
//! ---
//! sample TID x86_64 PC SP FP stack BASE LEN pcs A,B,...\n   then LEN bytes of stack
//! sample TID arm PC LR SP R12 R11 R7 stack BASE LEN pcs A,B,...\n
//! sample TID aarch64 PC SP FP LR POINTER_MASK stack BASE LEN pcs A,B,...\n
//! ```
//! Numbers are hexadecimal (`0x` optional) except `TID` and `LEN`.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use crate::offline::ModuleFile;

/// The registers a walk starts from, of either architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleRegs {
    /// An x86_64 sample.
    X86_64(unwind_core::x86_64::Regs),
    /// A 32-bit ARM sample (the PC's bit 0 set for Thumb code).
    Arm(unwind_core::arm::Regs),
    /// An aarch64 sample, with the process's pointer mask (`unwind_core::Memory::pointer_mask`).
    Aarch64 {
        /// The registers.
        regs: unwind_core::aarch64::Regs,
        /// The process's pointer mask.
        pointer_mask: u64,
    },
}

impl SampleRegs {
    /// The sampled process's pointer mask (0 but on aarch64).
    pub fn pointer_mask(&self) -> u64 {
        match self {
            SampleRegs::Aarch64 { pointer_mask, .. } => *pointer_mask,
            _ => 0,
        }
    }
}

impl From<&crate::Context> for SampleRegs {
    fn from(c: &crate::Context) -> Self {
        use crate::ContextArch;
        match *c {
            crate::Context::X86_64 { .. } => {
                SampleRegs::X86_64(unwind_core::X86_64::regs(c).unwrap_or_default())
            }
            crate::Context::Arm { .. } => {
                SampleRegs::Arm(unwind_core::Arm::regs(c).unwrap_or_default())
            }
            crate::Context::Aarch64 { pointer_mask, .. } => SampleRegs::Aarch64 {
                regs: unwind_core::Aarch64::regs(c).unwrap_or_default(),
                pointer_mask,
            },
        }
    }
}

/// One sample of a sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceSample {
    /// The sampled thread's id.
    pub thread: u32,
    /// The interrupted registers.
    pub regs: SampleRegs,
    /// Address of `stack[0]`.
    pub base: u64,
    /// The stack copy: from the stack pointer (less the red zone) up.
    pub stack: Vec<u8>,
    /// The frames the signal handler found.
    pub pcs: Vec<u64>,
}

/// A sequence of samples and the modules of the process that took them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sequence {
    /// A short name (the program's).
    pub name: String,
    /// Every module of the process, with the file to read its rules from.
    pub modules: Vec<ModuleFile>,
    /// The samples, in the order they were taken.
    pub samples: Vec<SequenceSample>,
}

/// Hexadecimal, `0x` optional.
fn hex(t: &str) -> Option<u64> {
    u64::from_str_radix(t.trim_start_matches("0x"), 16).ok()
}

impl Sequence {
    /// Writes the sequence to `out`.
    pub fn write(&self, out: &mut impl io::Write) -> io::Result<()> {
        let mut head = String::new();
        let _ = writeln!(head, "unwind-sequence 1\nname {}", self.name);
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
        out.write_all(head.as_bytes())?;
        for s in &self.samples {
            write_sample(out, s.thread, &s.regs, s.base, &s.stack, &s.pcs)?;
        }
        Ok(())
    }

    /// Reads a sequence written by [`write`](Self::write). Relative module paths are taken
    /// relative to the file's directory; absolute ones are looked up under `sysroot` first when
    /// given (samples taken under `qemu-arm -L SYSROOT` name the files as the guest saw them).
    pub fn load(path: &Path, sysroot: Option<&Path>) -> io::Result<Self> {
        let data = std::fs::read(path)?;
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {what}", path.display()),
            )
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let split = data
            .windows(4)
            .position(|w| w == b"---\n")
            .ok_or_else(|| bad("no --- line"))?;
        let head = std::str::from_utf8(&data[..split]).map_err(|_| bad("header is not text"))?;
        let mut seq = Sequence::default();
        for (i, line) in head.lines().enumerate() {
            let f: Vec<&str> = line.splitn(5, ' ').collect();
            match f.first().copied() {
                Some("unwind-sequence") if f.get(1) == Some(&"1") => {}
                Some("unwind-sequence") => return Err(bad("unknown version")),
                Some("name") => seq.name = f.get(1).unwrap_or(&"").to_string(),
                Some("module") => {
                    let field = |k: usize| f.get(k).copied().and_then(hex);
                    let (Some(start), Some(end), Some(bias), Some(p)) =
                        (field(1), field(2), field(3), f.get(4))
                    else {
                        return Err(bad(&format!("header line {}: bad module", i + 1)));
                    };
                    let recorded = PathBuf::from(p);
                    let path = if recorded.is_relative() {
                        dir.join(&recorded)
                    } else {
                        sysroot
                            .map(|r| r.join(recorded.strip_prefix("/").unwrap_or(&recorded)))
                            .filter(|p| p.exists())
                            .unwrap_or(recorded)
                    };
                    seq.modules.push(ModuleFile {
                        path,
                        start,
                        end,
                        bias,
                    });
                }
                _ => {}
            }
        }
        let mut rest = &data[split + 4..];
        while !rest.is_empty() {
            let at = data.len() - rest.len();
            let nl = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or_else(|| bad(&format!("offset {at}: unterminated sample line")))?;
            let line = std::str::from_utf8(&rest[..nl])
                .map_err(|_| bad(&format!("offset {at}: sample line is not text")))?;
            let (sample, len) =
                parse_sample(line).ok_or_else(|| bad(&format!("offset {at}: bad sample line")))?;
            let bytes = rest
                .get(nl + 1..nl + 1 + len)
                .ok_or_else(|| bad(&format!("offset {at}: stack truncated")))?;
            seq.samples.push(SequenceSample {
                stack: bytes.to_vec(),
                ..sample
            });
            rest = &rest[nl + 1 + len..];
        }
        Ok(seq)
    }
}

/// Writes one sample record (as [`Sequence::write`] does for each of its samples), for writers
/// that do not hold the samples in a [`Sequence`].
pub fn write_sample(
    out: &mut impl io::Write,
    thread: u32,
    regs: &SampleRegs,
    base: u64,
    stack: &[u8],
    pcs: &[u64],
) -> io::Result<()> {
    let mut line = format!("sample {thread} ");
    match regs {
        SampleRegs::X86_64(r) => {
            let _ = write!(line, "x86_64 {:#x} {:#x} {:#x}", r.pc, r.sp, r.fp);
        }
        SampleRegs::Arm(r) => {
            let _ = write!(
                line,
                "arm {:#x} {:#x} {:#x} {:#x} {:#x} {:#x}",
                r.pc, r.lr, r.sp, r.r12, r.r11, r.r7
            );
        }
        SampleRegs::Aarch64 {
            regs: r,
            pointer_mask,
        } => {
            let _ = write!(
                line,
                "aarch64 {:#x} {:#x} {:#x} {:#x} {pointer_mask:#x}",
                r.pc, r.sp, r.fp, r.lr
            );
        }
    }
    let _ = write!(line, " stack {base:#x} {} pcs ", stack.len());
    for (i, pc) in pcs.iter().enumerate() {
        let _ = write!(line, "{}{pc:#x}", if i == 0 { "" } else { "," });
    }
    line.push('\n');
    out.write_all(line.as_bytes())?;
    out.write_all(stack)
}

/// A sample line's fields (the stack left empty) and the stack's length.
fn parse_sample(line: &str) -> Option<(SequenceSample, usize)> {
    let mut f = line.split(' ');
    if f.next()? != "sample" {
        return None;
    }
    let thread = f.next()?.parse().ok()?;
    let regs = match f.next()? {
        "x86_64" => {
            let mut r = [0u64; 3];
            for v in &mut r {
                *v = hex(f.next()?)?;
            }
            SampleRegs::X86_64(unwind_core::x86_64::Regs {
                pc: r[0],
                sp: r[1],
                fp: r[2],
            })
        }
        "arm" => {
            let mut r = [0u32; 6];
            for v in &mut r {
                *v = u32::try_from(hex(f.next()?)?).ok()?;
            }
            SampleRegs::Arm(crate::offline::arm_regs(r))
        }
        "aarch64" => {
            let mut r = [0u64; 5];
            for v in &mut r {
                *v = hex(f.next()?)?;
            }
            let [pc, sp, fp, lr, pointer_mask] = r;
            SampleRegs::Aarch64 {
                regs: unwind_core::aarch64::Regs { pc, sp, fp, lr },
                pointer_mask,
            }
        }
        _ => return None,
    };
    if f.next()? != "stack" {
        return None;
    }
    let base = hex(f.next()?)?;
    let len = f.next()?.parse().ok()?;
    if f.next()? != "pcs" {
        return None;
    }
    let pcs = match f.next() {
        Some("") | None => Vec::new(),
        Some(list) => list.split(',').map(hex).collect::<Option<_>>()?,
    };
    Some((
        SequenceSample {
            thread,
            regs,
            base,
            stack: Vec::new(),
            pcs,
        },
        len,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!("unwind-sequence-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let seq = Sequence {
            name: "demo".into(),
            modules: vec![
                ModuleFile {
                    path: "/usr/lib/libc.so.6".into(),
                    start: 0x7000,
                    end: 0x9000,
                    bias: 0x1000,
                },
                ModuleFile {
                    path: dir.join("linux-vdso.so.1"),
                    start: 0xa000,
                    end: 0xb000,
                    bias: 0xa000,
                },
            ],
            samples: vec![
                SequenceSample {
                    thread: 7,
                    regs: SampleRegs::X86_64(unwind_core::x86_64::Regs {
                        pc: 0x7010,
                        sp: 0x100,
                        fp: 0x140,
                    }),
                    base: 0xf8,
                    stack: (0..=255).collect(),
                    pcs: vec![0x7010, 0x8020],
                },
                SequenceSample {
                    thread: 8,
                    regs: SampleRegs::Arm(unwind_core::arm::Regs {
                        pc: 0x7011,
                        lr: 2,
                        sp: 3,
                        r12: 4,
                        r11: 5,
                        r7: 6,
                    }),
                    base: 0,
                    stack: b"---\n\n".to_vec(),
                    pcs: vec![],
                },
                SequenceSample {
                    thread: 9,
                    regs: SampleRegs::Aarch64 {
                        regs: unwind_core::aarch64::Regs {
                            pc: 0x7010,
                            sp: 0x100,
                            fp: 0x140,
                            lr: 0x0035_0000_0000_7020,
                        },
                        pointer_mask: 0xff7f_0000_0000_0000,
                    },
                    base: 0x100,
                    stack: vec![1, 2, 3],
                    pcs: vec![0x7010, 0x7020],
                },
            ],
        };
        let path = dir.join("demo.sequence");
        let mut bytes = Vec::new();
        seq.write(&mut bytes).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(Sequence::load(&path, None).unwrap(), seq);
        // A record cut short is an error that says where.
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let err = Sequence::load(&path, None).unwrap_err().to_string();
        assert!(err.contains("stack truncated"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
