//! Any bytes as a Parquet file: Weir's Parquet source reads the footer (or
//! refuses) and reads every row group to its end or to an error naming it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_fuzz_support::{let_decoder_panics_be_caught, read_all};

#[allow(dead_code)]
mod weir_fuzz_support {
    include!("support.rs");
}

fuzz_target!(|data: &[u8]| {
    let_decoder_panics_be_caught();
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("input.parquet");
    std::fs::write(&file, data).expect("write the input");
    if let Ok(spec) = weir_operators::sources::parquet_source(&[&file], None) {
        read_all(spec);
    }
});
