#![no_main]
// See unwind_fuzz_targets::arm_code.
libfuzzer_sys::fuzz_target!(|data: &[u8]| unwind_fuzz_targets::arm_code::run(data));
