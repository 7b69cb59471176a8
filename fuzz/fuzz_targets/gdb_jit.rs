#![no_main]
// See unwind_fuzz_targets::gdb_jit.
libfuzzer_sys::fuzz_target!(|data: &[u8]| unwind_fuzz_targets::gdb_jit::run(data));
