#![no_main]
// See unwind_fuzz_targets::expr.
libfuzzer_sys::fuzz_target!(|data: &[u8]| unwind_fuzz_targets::expr::run(data));
