#![no_main]
// See unwind_fuzz_targets::exidx.
libfuzzer_sys::fuzz_target!(|data: &[u8]| unwind_fuzz_targets::exidx::run(data));
