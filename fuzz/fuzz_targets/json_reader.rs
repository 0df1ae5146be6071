//! Any bytes as JSON lines through Weir's `json` format (its flat fast path
//! and arrow-json behind it), checked against arrow-json's decoder over the
//! same bytes: where one gives rows the other gives the same rows; the
//! bytes cut into two records decode (or fail) without a panic.
#![no_main]

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use libfuzzer_sys::fuzz_target;
use weir_fuzz_support::let_decoder_panics_be_caught;

#[allow(dead_code)]
mod weir_fuzz_support {
    include!("support.rs");
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("small", DataType::Int8, true),
        Field::new("price", DataType::Float64, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("day", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("must", DataType::Int32, false),
    ]))
}

fn arrow_json(schema: &SchemaRef, bytes: &[u8]) -> Option<RecordBatch> {
    let mut d = arrow::json::ReaderBuilder::new(Arc::clone(schema))
        .build_decoder()
        .ok()?;
    let mut batches = vec![];
    let mut pos = 0;
    while pos < bytes.len() {
        pos += d.decode(&bytes[pos..]).ok()?;
        batches.extend(d.flush().ok()?);
    }
    // A last line without its line break, as Weir's reader ends it.
    d.decode(b"\n").ok()?;
    batches.extend(d.flush().ok()?);
    arrow::compute::concat_batches(schema, &batches).ok()
}

fn weir(schema: &SchemaRef, bytes: &[u8]) -> Option<RecordBatch> {
    let format = weir_operators::formats::formats().get("json").ok()?.clone();
    let mut d = format.decoder(schema, &Default::default(), 16).ok()?;
    let mut batches = vec![];
    d.decode(bytes).ok()?;
    while let Some(b) = d.next_batch().ok()? {
        batches.push(b);
    }
    batches.extend(d.finish().ok()?);
    while let Some(b) = d.next_batch().ok()? {
        batches.push(b);
    }
    arrow::compute::concat_batches(schema, &batches).ok()
}

fuzz_target!(|data: &[u8]| {
    let_decoder_panics_be_caught();
    let s = schema();
    if let (Some(expected), Some(got)) = (arrow_json(&s, data), weir(&s, data)) {
        assert_eq!(expected, got, "Weir's json format and arrow-json differ");
    }
    // Whole messages: the bytes cut in two records, each ending in a line
    // break (as the Kafka source hands them over).
    if let Ok(format) = weir_operators::formats::formats().get("json")
        && let Ok(mut d) = format.decoder(&s, &Default::default(), 16)
    {
        let cut = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
        let mut bytes = data[..cut].to_vec();
        bytes.push(b'\n');
        let first = bytes.len();
        bytes.extend_from_slice(&data[cut..]);
        bytes.push(b'\n');
        if d.decode_records(&bytes, &[first, bytes.len()]).is_ok() {
            while let Ok(Some(_)) = d.next_batch() {}
        }
    }
});
