#![no_main]
// See unwind_fuzz_targets::unwind.
libfuzzer_sys::fuzz_target!(|data: &[u8]| unwind_fuzz_targets::unwind::run(data));
