//! Any bytes as a CSV file: Weir's CSV source infers a schema (or refuses)
//! and reads the file to its end or to an error naming it.
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
    let file = dir.path().join("input.csv");
    std::fs::write(&file, data).expect("write the input");
    for has_header in [true, false] {
        let options = weir_operators::sources::CsvOptions {
            has_header,
            ..Default::default()
        };
        if let Ok(spec) = weir_operators::sources::csv_source(&[&file], options) {
            read_all(spec);
        }
    }
});
