//! Any bytes as the app_metadata of a Flight exchange frame: a control
//! message decodes or is refused, and what decodes encodes back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_flight::codec::{decode_control, encode_control};

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = decode_control(data) {
        let encoded = encode_control(&message).expect("a control message encodes");
        let again = decode_control(&encoded).expect("an encoded message decodes");
        assert_eq!(format!("{message:?}"), format!("{again:?}"));
    }
});
