//! Minidumps written by `unwind_samples::minidump` are read back by the `minidump` crate and processed
//! by `minidump_processor::process_minidump` (rust-minidump's Breakpad-compatible walker), and
//! `unwind_samples::trace` prints `minidump_stackwalk -m` lines exactly.

use breakpad_symbols::{SimpleSymbolSupplier, Symbolizer as BreakpadSymbolizer};
use minidump::{
    Minidump, MinidumpContext, MinidumpMemoryList, MinidumpModuleList, MinidumpRawContext,
    MinidumpSystemInfo, MinidumpThreadList, Module,
};
use minidump_common::format::{ContextFlagsAmd64, ContextFlagsArm, ContextFlagsArm64};
use unwind_in_process::StopReason;
use unwind_samples::minidump::{self as dump, DumpModule, SampleDump, SystemInfo, Unwound};
use unwind_samples::trace::{self, System, TraceModule};
use unwind_samples::Context;

/// Breakpad's debug identifier of an ELF build id, as our exporter computes it.
fn breakpad_debug_id(build_id: &[u8]) -> String {
    unwind_dwarf::breakpad::breakpad_id(build_id).debug_id
}

#[inline(never)]
fn capture_deep(depth: u32, buf: &mut [u8]) -> unwind_in_process::CapturedStack {
    if depth == 0 {
        return unwind_in_process::capture_here(buf).expect("capture (thread registered?)");
    }
    let c = capture_deep(depth - 1, std::hint::black_box(buf));
    std::hint::black_box(c)
}

#[cfg(target_arch = "x86_64")]
#[test]
fn current_thread_minidump_is_read_and_walked_by_rust_minidump() {
    unwind_in_process::init().expect("init");
    unwind_in_process::register_thread().expect("register");
    let mut buf = vec![0u8; 256 * 1024];
    let c = capture_deep(3, &mut buf);
    let stack = &buf[..c.len];
    assert!(c.len > 0, "captured no stack");
    assert_eq!(c.context.pc(), c.regs.pc);
    assert_eq!(c.context.sp(), c.regs.sp);

    let image = unwind_core::StackImage::new(c.base, stack);
    let mut pcs = [0u64; 128];
    let r =
        unwind_in_process::unwind_copy(c.regs, &image, &mut pcs, None).expect("unwind the copy");
    let pcs = &pcs[..r.frames];
    assert!(pcs.len() >= 4, "our unwinder found {} frames", pcs.len());

    let modules = unwind_in_process::dump_modules();
    let machine = unwind_in_process::system_info();
    assert!(modules.iter().all(|m| m.size > 0 && m.base % 4096 == 0));
    assert!(modules.iter().any(|m| m.name.contains("libc.so")));
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let bytes = dump::write(&SampleDump {
        system: &machine,
        context: c.context,
        thread_id: tid,
        stack_base: c.base,
        stack,
        modules: &modules,
        unwound: Some(Unwound { pcs, stop: r.stop }),
    });

    let md = Minidump::read(&bytes[..]).expect("minidump reads back");
    let sys: MinidumpSystemInfo = md.get_stream().expect("system info");
    assert_eq!(sys.os, minidump::system_info::Os::Linux);
    assert_eq!(sys.cpu, minidump::system_info::Cpu::X86_64);
    assert!(sys.raw.number_of_processors >= 1);
    assert!(sys.csd_version().is_some_and(|v| v.starts_with("Linux ")));

    let threads: MinidumpThreadList = md.get_stream().expect("thread list");
    assert_eq!(threads.threads.len(), 1);
    let thread = &threads.threads[0];
    assert_eq!(thread.raw.thread_id, tid);
    let ctx = thread.context(&sys, None).expect("thread context");
    assert_eq!(ctx.get_instruction_pointer(), c.regs.pc);
    assert_eq!(ctx.get_stack_pointer(), c.regs.sp);
    assert_eq!(ctx.get_register("rbp"), Some(c.regs.fp));
    match &ctx.raw {
        MinidumpRawContext::Amd64(raw) => {
            let want =
                ContextFlagsAmd64::CONTEXT_AMD64_CONTROL | ContextFlagsAmd64::CONTEXT_AMD64_INTEGER;
            assert_eq!(raw.context_flags, want.bits());
        }
        other => panic!("not an amd64 context: {other:?}"),
    }

    let memory: MinidumpMemoryList = md.get_stream().expect("memory list");
    let regions: Vec<_> = memory.iter().collect();
    assert_eq!(regions.len(), 1);
    assert_eq!(regions[0].base_address, c.base);
    assert_eq!(regions[0].bytes, stack);
    assert_eq!(thread.raw.stack.start_of_memory_range, c.base);

    let list: MinidumpModuleList = md.get_stream().expect("module list");
    let read: Vec<_> = list.iter().collect();
    assert_eq!(read.len(), modules.len());
    for (m, r) in modules.iter().zip(&read) {
        assert_eq!(r.base_address(), m.base, "{}", m.name);
        assert_eq!(r.size(), m.size, "{}", m.name);
        assert_eq!(r.code_file(), m.name.as_str());
        if m.build_id.is_empty() {
            assert_eq!(r.code_identifier(), None, "{}", m.name);
        } else {
            let code_id = r.code_identifier().expect("code id");
            assert_eq!(code_id.as_str(), m.code_id(), "{}", m.name);
            let debug_id = r.debug_identifier().expect("debug id");
            assert_eq!(
                debug_id.breakpad().to_string(),
                breakpad_debug_id(&m.build_id),
                "{}",
                m.name
            );
        }
    }
    assert_eq!(
        list.main_module().map(|m| m.base_address()),
        modules.first().map(|m| m.base)
    );

    let stream = md
        .get_raw_stream(dump::UNWOUND_STREAM)
        .expect("unwound stream");
    assert_eq!(dump::parse_unwound(stream), Some((pcs.to_vec(), r.stop)));

    // rust-minidump's walker, with no symbol files: context frame, then frame pointers / scan.
    let symbolizer = BreakpadSymbolizer::new(SimpleSymbolSupplier::new(Vec::new()));
    let state =
        unwind_validate::walk::block_on(minidump_processor::process_minidump(&md, &symbolizer))
            .expect("process_minidump");
    assert_eq!(state.threads.len(), 1);
    let walked = &state.threads[0].frames;
    assert!(!walked.is_empty(), "no frames walked");
    assert_eq!(walked[0].instruction, c.regs.pc);
    assert_eq!(
        state.system_info.cpu_count,
        usize::from(sys.raw.number_of_processors)
    );

    // Breakpad's system lines, from the stream as read back, agree with rust-minidump's parts
    // and with what the writer records for this machine.
    let system = System::from_minidump(&sys.raw, sys.csd_version().as_deref());
    assert_eq!(system, System::from_system_info(&machine));
    assert_eq!(system.cpu, "amd64");
    assert_eq!(Some(system.cpu_info.as_str()), sys.cpu_info().as_deref());
    assert_eq!(
        system.os_version,
        format!(
            "{} {}",
            state.system_info.os_version.as_deref().unwrap_or(""),
            sys.csd_version().as_deref().unwrap_or("")
        )
    );

    // Both walks printed the same way.
    let trace_modules: Vec<TraceModule> =
        modules.iter().map(TraceModule::from_dump_module).collect();
    for (t, m) in trace_modules.iter().zip(&modules) {
        if !m.build_id.is_empty() {
            assert_eq!(t.debug_id, breakpad_debug_id(&m.build_id), "{}", m.name);
        }
    }
    let sym = unwind_in_process::symbolizer();
    let ours = trace::machine_readable(
        &system,
        &trace_modules,
        &[pcs],
        trace::symbolizer_lookup(&sym),
    );
    let theirs_addrs: Vec<u64> = walked.iter().map(|f| f.resume_address).collect();
    let theirs = trace::machine_readable(
        &system,
        &trace_modules,
        &[&theirs_addrs],
        trace::symbolizer_lookup(&sym),
    );
    println!("--- ours ({:?}):\n{ours}", r.stop);
    println!("--- rust-minidump's walker (no symbols):\n{theirs}");
    let frame0 = ours
        .lines()
        .find(|l| l.starts_with("0|0|"))
        .expect("frame 0");
    assert!(
        frame0.contains("|unwind_in_process::capture::capture_here|"),
        "{frame0}"
    );
    assert!(
        ours.lines()
            .any(|l| l.contains("|minidump_accepted::capture_deep|")),
        "{ours}"
    );
    assert_eq!(
        theirs.lines().find(|l| l.starts_with("0|0|")),
        Some(frame0),
        "frame 0 differs"
    );
}

#[test]
fn synthetic_arm_minidump_reads_back_as_arm() {
    let mut iregs = [0u32; 16];
    for (i, r) in iregs.iter_mut().enumerate() {
        *r = 0x1000_0000 + i as u32 * 0x11;
    }
    iregs[13] = 0xbe00_0100; // sp
    iregs[15] = 0x0001_0440; // pc (Thumb: the bit is in CPSR)
    let context = Context::Arm {
        iregs,
        cpsr: 0x6000_0030,
    };
    let stack: Vec<u8> = (0..=255u8).collect();
    let build_id: Vec<u8> = (1..=20u8).collect();
    let modules = [
        DumpModule {
            base: 0x0001_0000,
            size: 0x2000,
            name: "/usr/bin/workload".into(),
            build_id: build_id.clone(),
        },
        DumpModule {
            base: 0xb6f0_0000,
            size: 0x12_3000,
            name: "/lib/arm-linux-gnueabihf/libc.so.6".into(),
            build_id: Vec::new(),
        },
    ];
    let bytes = dump::write(&SampleDump {
        system: &SystemInfo::unknown(&context),
        context,
        thread_id: 4242,
        stack_base: 0xbe00_0100,
        stack: &stack,
        modules: &modules,
        unwound: Some(Unwound {
            pcs: &[0x0001_0441, 0x0001_0523],
            stop: StopReason::CantUnwind,
        }),
    });

    let md = Minidump::read(&bytes[..]).expect("minidump reads back");
    let sys: MinidumpSystemInfo = md.get_stream().expect("system info");
    assert_eq!(sys.cpu, minidump::system_info::Cpu::Arm);
    assert_eq!(sys.os, minidump::system_info::Os::Linux);
    let threads: MinidumpThreadList = md.get_stream().expect("thread list");
    assert_eq!(threads.threads.len(), 1);
    assert_eq!(threads.threads[0].raw.thread_id, 4242);
    let ctx: std::borrow::Cow<'_, MinidumpContext> =
        threads.threads[0].context(&sys, None).expect("context");
    match &ctx.raw {
        MinidumpRawContext::Arm(raw) => {
            assert_eq!(raw.iregs, iregs);
            assert_eq!(raw.cpsr, 0x6000_0030);
            let want = ContextFlagsArm::CONTEXT_ARM_CONTROL | ContextFlagsArm::CONTEXT_ARM_INTEGER;
            assert_eq!(raw.context_flags, want.bits());
        }
        other => panic!("not an ARM context: {other:?}"),
    }
    assert_eq!(ctx.get_instruction_pointer(), 0x0001_0440);
    assert_eq!(ctx.get_stack_pointer(), 0xbe00_0100);
    assert_eq!(context.arm_regs().map(|r| r.pc), Some(0x0001_0441));

    let memory: MinidumpMemoryList = md.get_stream().expect("memory list");
    let region = memory.iter().next().expect("stack region");
    assert_eq!(
        (region.base_address, region.bytes),
        (0xbe00_0100, &stack[..])
    );

    let list: MinidumpModuleList = md.get_stream().expect("module list");
    let read: Vec<_> = list.iter().collect();
    assert_eq!(read.len(), 2);
    assert_eq!(read[0].base_address(), 0x0001_0000);
    assert_eq!(read[0].size(), 0x2000);
    assert_eq!(
        read[0].code_identifier().map(|c| c.as_str().to_string()),
        Some("0102030405060708090a0b0c0d0e0f1011121314".to_string())
    );
    assert_eq!(
        read[0].debug_identifier().map(|d| d.breakpad().to_string()),
        Some("0403020106050807090A0B0C0D0E0F100".to_string())
    );
    assert_eq!(
        breakpad_debug_id(&build_id),
        "0403020106050807090A0B0C0D0E0F100"
    );
    assert_eq!(read[1].code_file(), "/lib/arm-linux-gnueabihf/libc.so.6");
    assert_eq!(read[1].code_identifier(), None);

    let stream = md
        .get_raw_stream(dump::UNWOUND_STREAM)
        .expect("unwound stream");
    assert_eq!(
        dump::parse_unwound(stream),
        Some((vec![0x0001_0441, 0x0001_0523], StopReason::CantUnwind))
    );

    let system = System::from_minidump(&sys.raw, sys.csd_version().as_deref());
    assert_eq!(system.cpu, "arm");
    assert_eq!(Some(system.cpu_info.as_str()), sys.cpu_info().as_deref());
}

/// An aarch64 sample as rust-minidump reads it: `CONTEXT_ARM64` with every integer register,
/// the SystemInfo CPU arm64.
#[test]
fn synthetic_aarch64_minidump_reads_back_as_arm64() {
    let mut iregs = [0u64; 31];
    for (i, r) in iregs.iter_mut().enumerate() {
        *r = 0xaaaa_0000_0000 + i as u64 * 0x11;
    }
    let context = Context::Aarch64 {
        iregs,
        sp: 0xffff_f000_0100,
        pc: 0xaaaa_c000_0440,
        cpsr: 0x6000_0000,
        pointer_mask: 0xff7f_0000_0000_0000,
    };
    let stack: Vec<u8> = (0..=255u8).collect();
    let modules = [DumpModule {
        base: 0xaaaa_c000_0000,
        size: 0x2000,
        name: "/usr/bin/workload".into(),
        build_id: (1..=20u8).collect(),
    }];
    let bytes = dump::write(&SampleDump {
        system: &SystemInfo::unknown(&context),
        context,
        thread_id: 7,
        stack_base: 0xffff_f000_0100,
        stack: &stack,
        modules: &modules,
        unwound: None,
    });
    let md = Minidump::read(&bytes[..]).expect("minidump reads back");
    let sys: MinidumpSystemInfo = md.get_stream().expect("system info");
    assert_eq!(sys.cpu, minidump::system_info::Cpu::Arm64);
    let threads: MinidumpThreadList = md.get_stream().expect("thread list");
    let ctx = threads.threads[0].context(&sys, None).expect("context");
    match &ctx.raw {
        MinidumpRawContext::Arm64(raw) => {
            assert_eq!(raw.iregs, iregs);
            assert_eq!(
                (raw.sp, raw.pc, raw.cpsr),
                (0xffff_f000_0100, 0xaaaa_c000_0440, 0x6000_0000)
            );
            let want =
                ContextFlagsArm64::CONTEXT_ARM64_CONTROL | ContextFlagsArm64::CONTEXT_ARM64_INTEGER;
            assert_eq!(raw.context_flags, want.bits());
        }
        other => panic!("not an arm64 context: {other:?}"),
    }
    assert_eq!(ctx.get_instruction_pointer(), 0xaaaa_c000_0440);
    assert_eq!(ctx.get_stack_pointer(), 0xffff_f000_0100);
    let system = System::from_minidump(&sys.raw, sys.csd_version().as_deref());
    assert_eq!(system.cpu, "arm64");
    let mask = md
        .get_raw_stream(dump::POINTER_MASK_STREAM)
        .expect("pointer mask stream");
    assert_eq!(dump::parse_pointer_mask(mask), Some(0xff7f_0000_0000_0000));
}

#[test]
fn trace_prints_breakpad_machine_readable_lines() {
    let system = System {
        os: "Linux".into(),
        os_version: "6.1.0 Linux 6.1.0-18-amd64 #1 SMP x86_64".into(),
        cpu: "amd64".into(),
        cpu_info: "family 6 model 85 stepping 7".into(),
        cpu_count: 2,
    };
    let modules = [
        TraceModule {
            code_file: "/opt/app/prog".into(),
            version: String::new(),
            debug_file: "/opt/app/prog".into(),
            debug_id: "0123456789ABCDEF0123456789ABCDEF0".into(),
            base: 0x1000,
            size: 0x2000,
        },
        TraceModule {
            code_file: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            version: String::new(),
            debug_file: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            debug_id: "FEDCBA9876543210FEDCBA98765432100".into(),
            base: 0x7f00_0000_0000,
            size: 0x1_0000,
        },
    ];
    // Functions: leaf [0x1000, 0x1080), middle [0x10c0, 0x1200), "odd|name" [0x1400, 0x1500);
    // nothing else has a symbol.
    let lookup = |addr: u64, caller: bool| -> Option<(String, u64)> {
        let at = if caller { addr - 1 } else { addr };
        [
            (0x1000u64, 0x1080u64, "leaf"),
            (0x10c0, 0x1200, "middle"),
            (0x1400, 0x1500, "odd|name"),
        ]
        .iter()
        .find(|f| f.0 <= at && at < f.1)
        .map(|f| (f.2.to_string(), f.0))
    };
    let frames = [
        0x1010,           // frame 0 in leaf: offset from leaf
        0x1100,           // return address in middle: offset from middle, at the return address
        0x1480,           // a name with the separator in it
        0x3000,           // return address one past prog's end: the call is prog's last byte
        0x7f00_0000_2a2a, // libc, no symbol: offset from the module's base
        0x5555,           // in no module: the absolute address
    ];
    let second = [0x7f00_0000_0010u64];
    let out = trace::machine_readable(&system, &modules, &[&frames, &second], lookup);
    let want = "\
OS|Linux|6.1.0 Linux 6.1.0-18-amd64 #1 SMP x86_64
CPU|amd64|family 6 model 85 stepping 7|2
GPU|||
Crash|No crash||
Module|prog||prog|0123456789ABCDEF0123456789ABCDEF0|0x00001000|0x00002fff|1
Module|libc.so.6||libc.so.6|FEDCBA9876543210FEDCBA98765432100|0x7f0000000000|0x7f000000ffff|0

0|0|prog|leaf|||0x10
0|1|prog|middle|||0x40
0|2|prog|oddname|||0x80
0|3|prog||||0x2000
0|4|libc.so.6||||0x2a2a
0|5|||||0x5555
1|0|libc.so.6||||0x10
";
    print!("{out}");
    assert_eq!(out, want);
}
