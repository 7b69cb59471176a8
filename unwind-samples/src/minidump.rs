//! Samples written as minidumps: the thread's full register context, its copied stack, the
//! loaded modules (with their ELF build ids) and, in a user stream, the frames our unwinder
//! found in the signal handler, so that another walker (rust-minidump's Breakpad-compatible
//! one, Breakpad's `minidump_stackwalk`) can walk the same sample and be compared frame by frame.
//!
//! The sampled process captures the context and the stack copy in its signal handler and
//! describes the machine ([`SystemInfo`]); writing happens later, outside the handler
//! ([`write()`] allocates), in that process or anywhere else.

use minidump_common::format as md;
use scroll::ctx::{SizeWith, TryIntoCtx};
use scroll::{Endian, Pwrite, LE};

use unwind_core::StopReason;

use crate::context::Context;

/// A loaded module as a minidump module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpModule {
    /// Runtime address of the image: the load bias plus the lowest `PT_LOAD` address rounded
    /// down to 4096 (the address Breakpad's `STACK CFI` records are relative to).
    pub base: u64,
    /// Bytes from `base` through the end of the highest `PT_LOAD` segment.
    pub size: u64,
    /// The full path (`linux-vdso.so.1` for the vdso).
    pub name: String,
    /// The ELF build id (`NT_GNU_BUILD_ID`), empty if the module has none.
    pub build_id: Vec<u8>,
}

impl DumpModule {
    /// The build id in lowercase hex: the module's code id as rust-minidump reports it.
    pub fn code_id(&self) -> String {
        hex(&self.build_id)
    }
}
use crate::symbolize::hex;

/// The frames our unwinder found for the sample, in the signal handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unwound<'a> {
    /// PCs, frame 0 first (callers: return addresses).
    pub pcs: &'a [u64],
    /// Why the walk ended.
    pub stop: StopReason,
}

/// The machine a sample was taken on, as a minidump's SystemInfo stream records it.
#[derive(Clone, Debug)]
pub struct SystemInfo {
    /// The stream (its `csd_version_rva` is filled when written).
    pub raw: md::MINIDUMP_SYSTEM_INFO,
    /// The CSD version string: the kernel's `uname -srvm` on Linux.
    pub csd_version: String,
}

/// A processor as a minidump's SystemInfo stream describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Processor {
    /// Its architecture.
    pub architecture: md::ProcessorArchitecture,
    /// `processor_level` (x86: the family; ARM: the architecture version, 7 for ARMv7, 8 for
    /// AArch64).
    pub level: u16,
    /// `processor_revision` (x86: model and stepping).
    pub revision: u16,
    /// The architecture's `CPU_INFORMATION` (x86: cpuid vendor and features; ARM: the hardware
    /// capabilities).
    pub cpu: [u8; 24],
}

impl Processor {
    /// A processor of `context`'s architecture about which nothing else is known.
    pub fn unknown(context: &Context) -> Processor {
        let (architecture, level) = match context {
            Context::X86_64 { .. } => (md::ProcessorArchitecture::PROCESSOR_ARCHITECTURE_AMD64, 0),
            Context::Arm { .. } => (md::ProcessorArchitecture::PROCESSOR_ARCHITECTURE_ARM, 7),
            Context::Aarch64 { .. } => (md::ProcessorArchitecture::PROCESSOR_ARCHITECTURE_ARM64, 8),
        };
        Processor {
            architecture,
            level,
            revision: 0,
            cpu: [0; 24],
        }
    }
}

impl SystemInfo {
    /// A Linux machine: its processor, how many it has, the kernel's version numbers (major,
    /// minor, patch of its release) and its `uname -srvm` as the CSD version.
    pub fn linux(
        processor: Processor,
        processors: u8,
        kernel: [u32; 3],
        csd_version: String,
    ) -> SystemInfo {
        SystemInfo {
            raw: md::MINIDUMP_SYSTEM_INFO {
                processor_architecture: processor.architecture as u16,
                processor_level: processor.level,
                processor_revision: processor.revision,
                number_of_processors: processors,
                product_type: 0,
                major_version: kernel[0],
                minor_version: kernel[1],
                build_number: kernel[2],
                platform_id: md::PlatformId::Linux as u32,
                csd_version_rva: 0,
                suite_mask: 0,
                reserved2: 0,
                cpu: md::CPU_INFORMATION {
                    data: processor.cpu,
                },
            },
            csd_version,
        }
    }

    /// A Linux machine of `context`'s architecture about which nothing else is known (one
    /// processor, no kernel version, no CPU identification): for samples made up or moved
    /// between machines. The sampled process describes its own machine with the runtime's
    /// `system_info`.
    pub fn unknown(context: &Context) -> SystemInfo {
        SystemInfo::linux(Processor::unknown(context), 1, [0; 3], String::new())
    }
}

/// One sample to be written as a minidump.
#[derive(Clone, Copy, Debug)]
pub struct SampleDump<'a> {
    /// The machine the sample was taken on.
    pub system: &'a SystemInfo,
    /// The sampled thread's registers.
    pub context: Context,
    /// The sampled thread's id (`gettid`).
    pub thread_id: u32,
    /// Address of `stack[0]`.
    pub stack_base: u64,
    /// The copied stack, from `stack_base` up.
    pub stack: &'a [u8],
    /// The modules loaded in the sampled process.
    pub modules: &'a [DumpModule],
    /// What our unwinder found, written as the [`UNWOUND_STREAM`] user stream.
    pub unwound: Option<Unwound<'a>>,
}

/// A user stream (type 0x554e_5701) holding the frames our unwinder found in the signal handler:
/// u32 count, u32 stop-reason index ([`StopReason::index`]), then count u64 PCs, little-endian.
pub const UNWOUND_STREAM: u32 = 0x554e_5701;

/// A user stream (type 0x554e_5702) of an aarch64 sample: the sampled process's pointer mask
/// (the bits of an instruction address that are not address, which the unwinder strips from
/// signed return addresses; `CONTEXT_ARM64` has no place for it), a little-endian u64.
pub const POINTER_MASK_STREAM: u32 = 0x554e_5702;

/// Parses a [`POINTER_MASK_STREAM`] stream; `None` if it is not 8 bytes.
pub fn parse_pointer_mask(stream: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(stream.try_into().ok()?))
}

/// Parses an [`UNWOUND_STREAM`] stream; `None` if it is truncated or names no known reason.
pub fn parse_unwound(stream: &[u8]) -> Option<(Vec<u64>, StopReason)> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(stream.get(at..at + 4)?.try_into().ok()?))
    };
    let count = usize::try_from(u32_at(0)?).ok()?;
    let stop = *StopReason::ALL.get(usize::try_from(u32_at(4)?).ok()?)?;
    let pcs_bytes = stream.get(8..8 + count.checked_mul(8)?)?;
    let pcs = pcs_bytes
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect();
    Some((pcs, stop))
}

/// A minidump being assembled: blobs appended at 8-byte-aligned offsets.
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn rva(&self) -> u32 {
        u32::try_from(self.buf.len()).unwrap_or(u32::MAX)
    }

    fn align(&mut self, to: usize) {
        let pad = self.buf.len().next_multiple_of(to) - self.buf.len();
        self.buf.resize(self.buf.len() + pad, 0);
    }

    /// Writes `value` at `offset` (space already reserved).
    fn put_at<T>(&mut self, offset: usize, value: T)
    where
        T: TryIntoCtx<Endian, Error = scroll::Error>,
    {
        // The space was sized with `SizeWith`, so the write cannot fall short.
        let _ = self.buf.pwrite_with(value, offset, LE);
    }

    /// Appends `value`; returns where it is.
    fn push<T>(&mut self, value: T) -> md::MINIDUMP_LOCATION_DESCRIPTOR
    where
        T: TryIntoCtx<Endian, Error = scroll::Error> + SizeWith<Endian>,
    {
        self.align(8);
        let (offset, size) = (self.buf.len(), T::size_with(&LE));
        self.buf.resize(offset + size, 0);
        self.put_at(offset, value);
        md::MINIDUMP_LOCATION_DESCRIPTOR {
            data_size: u32::try_from(size).unwrap_or(u32::MAX),
            rva: u32::try_from(offset).unwrap_or(u32::MAX),
        }
    }

    /// Appends raw bytes; returns where they are.
    fn bytes(&mut self, bytes: &[u8]) -> md::MINIDUMP_LOCATION_DESCRIPTOR {
        self.align(8);
        let rva = self.rva();
        self.buf.extend_from_slice(bytes);
        md::MINIDUMP_LOCATION_DESCRIPTOR {
            data_size: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
            rva,
        }
    }

    /// Appends a `MINIDUMP_STRING` (u32 byte length, UTF-16LE, a NUL not counted); returns its
    /// offset.
    fn string(&mut self, s: &str) -> u32 {
        let utf16: Vec<u8> = s.encode_utf16().flat_map(u16::to_le_bytes).collect();
        self.align(4);
        let rva = self.rva();
        let len = u32::try_from(utf16.len()).unwrap_or(u32::MAX);
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(&utf16);
        self.buf.extend_from_slice(&[0, 0]);
        rva
    }

    /// Appends a stream list's count followed by its entries, reserved; returns the count's
    /// offset and the entries' offset.
    fn list<T: SizeWith<Endian>>(&mut self, count: usize) -> (usize, usize) {
        self.align(8);
        let start = self.buf.len();
        let count32 = u32::try_from(count).unwrap_or(u32::MAX);
        self.buf.extend_from_slice(&count32.to_le_bytes());
        let entries = self.buf.len();
        self.buf.resize(entries + count * T::size_with(&LE), 0);
        (start, entries)
    }

    fn since(&self, start: usize) -> md::MINIDUMP_LOCATION_DESCRIPTOR {
        md::MINIDUMP_LOCATION_DESCRIPTOR {
            data_size: u32::try_from(self.buf.len() - start).unwrap_or(u32::MAX),
            rva: u32::try_from(start).unwrap_or(u32::MAX),
        }
    }
}

/// Appends the CPU context of `context`; returns where it is.
fn push_context(w: &mut Writer, context: &Context) -> md::MINIDUMP_LOCATION_DESCRIPTOR {
    match *context {
        Context::X86_64 { regs: r, eflags } => {
            let flags = md::ContextFlagsAmd64::CONTEXT_AMD64_CONTROL
                | md::ContextFlagsAmd64::CONTEXT_AMD64_INTEGER;
            w.push(md::CONTEXT_AMD64 {
                context_flags: flags.bits(),
                eflags,
                rax: r[0],
                rcx: r[1],
                rdx: r[2],
                rbx: r[3],
                rsp: r[4],
                rbp: r[5],
                rsi: r[6],
                rdi: r[7],
                r8: r[8],
                r9: r[9],
                r10: r[10],
                r11: r[11],
                r12: r[12],
                r13: r[13],
                r14: r[14],
                r15: r[15],
                rip: r[16],
                ..Default::default()
            })
        }
        Context::Arm { iregs, cpsr } => {
            let flags =
                md::ContextFlagsArm::CONTEXT_ARM_CONTROL | md::ContextFlagsArm::CONTEXT_ARM_INTEGER;
            w.push(md::CONTEXT_ARM {
                context_flags: flags.bits(),
                iregs,
                cpsr,
                float_save: Default::default(),
            })
        }
        // (The pointer mask is not a register: `CONTEXT_ARM64` has no place for it.)
        Context::Aarch64 {
            iregs,
            sp,
            pc,
            cpsr,
            pointer_mask: _,
        } => {
            let flags = md::ContextFlagsArm64::CONTEXT_ARM64_CONTROL
                | md::ContextFlagsArm64::CONTEXT_ARM64_INTEGER;
            w.push(md::CONTEXT_ARM64 {
                context_flags: flags.bits(),
                cpsr,
                iregs,
                sp,
                pc,
                ..Default::default()
            })
        }
    }
}

/// Writes `dump` as a minidump: streams SystemInfo, ThreadList (the one sampled thread: its
/// id, context and stack), MemoryList (the stack), ModuleList (each module's base, size, path
/// and a Breakpad ELF CodeView record `BpEL` + build id), when `dump.unwound` is set the
/// [`UNWOUND_STREAM`] user stream, and for an aarch64 sample the [`POINTER_MASK_STREAM`]. Not
/// async-signal-safe (it allocates).
pub fn write(dump: &SampleDump<'_>) -> Vec<u8> {
    let aarch64 = matches!(dump.context, Context::Aarch64 { .. });
    let stream_count = 4 + usize::from(dump.unwound.is_some()) + usize::from(aarch64);
    let mut w = Writer { buf: Vec::new() };
    let header_size = md::MINIDUMP_HEADER::size_with(&LE);
    let dir_size = md::MINIDUMP_DIRECTORY::size_with(&LE);
    w.buf.resize(header_size + stream_count * dir_size, 0);
    let mut directory = Vec::with_capacity(stream_count);

    // SystemInfo, then its CSD version string.
    let mut info = dump.system.raw.clone();
    let info_at = w.push(info.clone());
    info.csd_version_rva = w.string(&dump.system.csd_version);
    w.put_at(info_at.rva as usize, info);
    directory.push((md::MINIDUMP_STREAM_TYPE::SystemInfoStream, info_at));

    // The stack bytes and the context, referred to by the thread and the memory list.
    let stack = md::MINIDUMP_MEMORY_DESCRIPTOR {
        start_of_memory_range: dump.stack_base,
        memory: w.bytes(dump.stack),
    };
    let context = push_context(&mut w, &dump.context);

    let (start, entries) = w.list::<md::MINIDUMP_THREAD>(1);
    w.put_at(
        entries,
        md::MINIDUMP_THREAD {
            thread_id: dump.thread_id,
            suspend_count: 0,
            priority_class: 0,
            priority: 0,
            teb: 0,
            stack,
            thread_context: context,
        },
    );
    directory.push((md::MINIDUMP_STREAM_TYPE::ThreadListStream, w.since(start)));

    let (start, entries) = w.list::<md::MINIDUMP_MEMORY_DESCRIPTOR>(1);
    w.put_at(entries, stack);
    directory.push((md::MINIDUMP_STREAM_TYPE::MemoryListStream, w.since(start)));

    // Modules: the list first, then names and CodeView records it points to.
    let (start, entries) = w.list::<md::MINIDUMP_MODULE>(dump.modules.len());
    let list = w.since(start);
    let module_size = md::MINIDUMP_MODULE::size_with(&LE);
    for (i, m) in dump.modules.iter().enumerate() {
        let module_name_rva = w.string(&m.name);
        let cv_record = if m.build_id.is_empty() {
            md::MINIDUMP_LOCATION_DESCRIPTOR::default()
        } else {
            let mut cv = (md::CvSignature::Elf as u32).to_le_bytes().to_vec();
            cv.extend_from_slice(&m.build_id);
            w.bytes(&cv)
        };
        w.put_at(
            entries + i * module_size,
            md::MINIDUMP_MODULE {
                base_of_image: m.base,
                size_of_image: u32::try_from(m.size).unwrap_or(u32::MAX),
                module_name_rva,
                cv_record,
                ..Default::default()
            },
        );
    }
    directory.push((md::MINIDUMP_STREAM_TYPE::ModuleListStream, list));

    let mut user = None;
    if let Some(u) = &dump.unwound {
        let mut bytes = Vec::with_capacity(8 + 8 * u.pcs.len());
        let count = u32::try_from(u.pcs.len()).unwrap_or(u32::MAX);
        let stop = u32::try_from(u.stop.index()).unwrap_or(u32::MAX);
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&stop.to_le_bytes());
        for pc in u.pcs.iter().take(count as usize) {
            bytes.extend_from_slice(&pc.to_le_bytes());
        }
        user = Some(w.bytes(&bytes));
    }

    let mask = match dump.context {
        Context::Aarch64 { pointer_mask, .. } => Some(w.bytes(&pointer_mask.to_le_bytes())),
        _ => None,
    };

    let entries = directory
        .into_iter()
        .map(|(ty, location)| (ty as u32, location))
        .chain(user.map(|location| (UNWOUND_STREAM, location)))
        .chain(mask.map(|location| (POINTER_MASK_STREAM, location)));
    for (i, (stream_type, location)) in entries.enumerate() {
        w.put_at(
            header_size + i * dir_size,
            md::MINIDUMP_DIRECTORY {
                stream_type,
                location,
            },
        );
    }
    let time_date_stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
    w.put_at(
        0,
        md::MINIDUMP_HEADER {
            signature: md::MINIDUMP_SIGNATURE,
            version: md::MINIDUMP_VERSION,
            stream_count: u32::try_from(stream_count).unwrap_or(u32::MAX),
            stream_directory_rva: u32::try_from(header_size).unwrap_or(u32::MAX),
            checksum: 0,
            time_date_stamp,
            flags: 0,
        },
    );
    w.buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwound_stream_round_trips_and_rejects_bad_input() {
        let system = SystemInfo::unknown(&Context::Arm {
            iregs: [0; 16],
            cpsr: 0,
        });
        let dump = SampleDump {
            system: &system,
            context: Context::Arm {
                iregs: [0; 16],
                cpsr: 0,
            },
            thread_id: 1,
            stack_base: 0,
            stack: &[],
            modules: &[],
            unwound: Some(Unwound {
                pcs: &[1, 2, 3],
                stop: StopReason::CantUnwind,
            }),
        };
        let bytes = write(&dump);
        let stream = &bytes[bytes.len() - 32..];
        assert_eq!(
            parse_unwound(stream),
            Some((vec![1, 2, 3], StopReason::CantUnwind))
        );
        assert_eq!(parse_unwound(&stream[..31]), None);
        assert_eq!(parse_unwound(&[0, 0, 0, 0, 99, 0, 0, 0]), None);
        assert_eq!(parse_unwound(&[255, 255, 255, 255, 0, 0, 0, 0]), None);
        assert_eq!(parse_unwound(&[]), None);
    }
}
