#![no_main]
// See unwind_fuzz_targets::stack_cfi.
libfuzzer_sys::fuzz_target!(|data: &[u8]| unwind_fuzz_targets::stack_cfi::run(data));
