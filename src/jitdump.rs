//! The unwind tables a JIT compiler gives for its code in its jitdump file (perf's format,
//! `tools/perf/Documentation/jitdump-specification.txt`): a `JIT_CODE_UNWINDING_INFO` record
//! holds `.eh_frame` (then `.eh_frame_hdr`) for the code of the `JIT_CODE_LOAD` record that
//! follows it. The file is this process's own, found as perf finds it: the JIT maps it
//! executable (`jit-PID.dump`, wherever it wrote it). Read when the table is built, like the
//! rest of `/proc/self/maps`: records written after that are used from the next refresh on.

use crate::arch::{Native, Rule};
use unwind_core::table::ModuleRules;
use unwind_dwarf::CfiSections;
use unwind_samples::jitdump::{records, Record};

/// Rules for one piece of generated code, `[start, end)`.
pub(crate) struct Described {
    pub start: u64,
    pub end: u64,
    pub rules: ModuleRules<Rule>,
}

/// Whether `path` is this process's jitdump file (`jit-PID.dump`).
pub(crate) fn is_own(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    // SAFETY: getpid has no preconditions.
    name == format!("jit-{}.dump", unsafe { libc::getpid() })
}

/// The code the unwinding records of jitdump file `dump` describe, with their rules. A code
/// blob whose tables cannot be read, or whose rules use expressions (which a merged table
/// could not carry), is left out.
pub(crate) fn described(dump: &[u8]) -> Vec<Described> {
    let mut out = Vec::new();
    // The `.eh_frame` of the last unwinding record, for the next code load.
    let mut pending: Option<&[u8]> = None;
    for record in records(dump) {
        match record {
            Record::UnwindingInfo { eh_frame } => pending = Some(eh_frame),
            Record::CodeLoad { addr, size, .. } => {
                if let Some(d) = pending.take().and_then(|e| rules_for(e, addr, size)) {
                    out.push(d);
                }
            }
            _ => {}
        }
    }
    out
}

/// The rules `eh_frame` gives code `[addr, addr + len)`. Where the JIT meant its `.eh_frame` to
/// lie (its PC-relative addresses depend on it) is not in the record: just after the code, at
/// the next multiple of 8 or of 16 are tried, and the one whose rules start at the code's
/// first byte is taken.
fn rules_for(eh_frame: &[u8], addr: u64, len: u64) -> Option<Described> {
    let end = addr.checked_add(len)?;
    let mut bases = [end, end.next_multiple_of(8), end.next_multiple_of(16)];
    bases.sort_unstable();
    let mut tried = None;
    for base in bases {
        if tried == Some(base) {
            continue;
        }
        tried = Some(base);
        let sections = CfiSections {
            eh_frame: Some(eh_frame),
            eh_frame_svma: base,
            debug_frame: None,
            text_svma: 0,
            got_svma: 0,
            plt: &[],
            code_range: Some((addr, end)),
            code: &[],
            go: None,
        };
        let Ok((rules, _)) = unwind_dwarf::rules_from_sections::<Native>(&sections, None) else {
            continue;
        };
        if rules.exprs().is_empty() && rules.extents().next().is_some_and(|e| e.0 == addr) {
            return Some(Described {
                start: addr,
                end,
                rules,
            });
        }
    }
    None
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use unwind_samples::jitdump;

    /// An `.eh_frame` as CPython 3.13 writes for its trampoline (`sub $8, %rsp; call *%rcx;
    /// add $8, %rsp; ret`, 11 bytes), meant to lie 16 bytes after the code's start: a CIE
    /// (code alignment 1, data alignment -8, return address r16, pointers pc-relative sdata4;
    /// CFA rsp+8, RA at CFA-8) and an FDE: after 4 bytes CFA rsp+16, after 6 more rsp+8.
    const EH_FRAME: [u8; 0x30] = [
        0x14, 0, 0, 0, 0, 0, 0, 0, 0x01, b'z', b'R', 0, 0x01, 0x78, 0x10, 0x01, 0x1b, 0x0c, 0x07,
        0x08, 0x90, 0x01, 0, 0, // CIE
        0x14, 0, 0, 0, 0x1c, 0, 0, 0, 0xd0, 0xff, 0xff, 0xff, 0x0b, 0, 0, 0, 0x00, 0x44, 0x0e,
        0x10, 0x46, 0x0e, 0x08, 0x00, // FDE: pc_begin -0x30 from its own place (0x20)
    ];

    fn dump_with(code_addr: u64, unwinding: bool) -> Vec<u8> {
        let mut d = Vec::new();
        let w32 = |d: &mut Vec<u8>, v: u32| d.extend_from_slice(&v.to_ne_bytes());
        let w64 = |d: &mut Vec<u8>, v: u64| d.extend_from_slice(&v.to_ne_bytes());
        for v in [jitdump::MAGIC, 1, 40, 62, 0, 7] {
            w32(&mut d, v);
        }
        w64(&mut d, 0);
        w64(&mut d, 0);
        if unwinding {
            let hdr = [0x01u8, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 0, 0, 0, 0];
            let data = EH_FRAME.len() + hdr.len();
            w32(&mut d, jitdump::CODE_UNWINDING_INFO);
            w32(&mut d, (16 + 24 + data) as u32);
            w64(&mut d, 0);
            w64(&mut d, data as u64);
            w64(&mut d, hdr.len() as u64);
            w64(&mut d, data.next_multiple_of(16) as u64);
            d.extend_from_slice(&EH_FRAME);
            d.extend_from_slice(&hdr);
        }
        let name = b"py::f:x.py\0";
        w32(&mut d, jitdump::CODE_LOAD);
        w32(&mut d, (16 + 40 + name.len() + 11) as u32);
        w64(&mut d, 0);
        w32(&mut d, 7);
        w32(&mut d, 7);
        for v in [code_addr, code_addr, 11, 1] {
            w64(&mut d, v);
        }
        d.extend_from_slice(name);
        d.extend_from_slice(&[
            0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3,
        ]);
        d
    }

    #[test]
    fn an_unwinding_record_gives_the_next_code_load_its_rules() {
        let got = described(&dump_with(0x7f00_0000_1000, true));
        assert_eq!(got.len(), 1);
        let d = &got[0];
        assert_eq!((d.start, d.end), (0x7f00_0000_1000, 0x7f00_0000_100b));
        let cfa = |a| match d.rules.lookup(a) {
            Some(Rule {
                cfa: unwind_core::x86_64::CfaRule::SpOffset(o),
                ..
            }) => Some(o),
            _ => None,
        };
        assert_eq!(cfa(0x7f00_0000_1000), Some(8));
        assert_eq!(cfa(0x7f00_0000_1005), Some(16), "after sub $8, %rsp");
        assert_eq!(cfa(0x7f00_0000_100a), Some(8), "at ret");
    }

    #[test]
    fn code_without_an_unwinding_record_or_a_bad_file_gives_nothing() {
        assert!(described(&dump_with(0x7f00_0000_1000, false)).is_empty());
        assert!(described(b"not a jitdump").is_empty());
        let mut cut = dump_with(0x7f00_0000_1000, true);
        cut.truncate(cut.len() - 5);
        assert!(described(&cut).is_empty(), "the code load is cut short");
    }
}
