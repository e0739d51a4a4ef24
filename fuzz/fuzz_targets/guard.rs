//! Fuzz target: see `soba_fuzz::check_guard` for the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| soba_fuzz::check_guard(data));
