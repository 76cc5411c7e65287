#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate::fuzz_targets::paths(data));
