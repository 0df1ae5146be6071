//! The fast path against arrow-json's decoder: wherever the fast path
//! takes a chunk, both give the same batch; plain flat objects are always
//! taken; and whatever it gives up on is left untouched.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use proptest::prelude::*;

use super::FlatJson;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("small", DataType::Int8, true),
        Field::new("n", DataType::UInt32, true),
        Field::new("price", DataType::Float64, true),
        Field::new("ratio", DataType::Float32, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("big", DataType::LargeUtf8, true),
        Field::new("view", DataType::Utf8View, true),
        Field::new("day", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new(
            "ltz",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("must", DataType::Int32, false),
    ]))
}

fn arrow_json(schema: &SchemaRef, bytes: &[u8]) -> Result<Vec<RecordBatch>, String> {
    let mut d = arrow::json::ReaderBuilder::new(Arc::clone(schema))
        .with_batch_size(1 << 20)
        .build_decoder()
        .map_err(|e| e.to_string())?;
    let mut pos = 0;
    while pos < bytes.len() {
        pos += d.decode(&bytes[pos..]).map_err(|e| e.to_string())?;
    }
    Ok(d.flush().map_err(|e| e.to_string())?.into_iter().collect())
}

fn flat(schema: &SchemaRef, bytes: &[u8], ends: Option<&[usize]>) -> Option<Vec<RecordBatch>> {
    let mut f = FlatJson::new(schema, false).expect("every column has a fast path");
    let mut out = VecDeque::new();
    f.decode(bytes, ends, 1 << 20, &mut out)
        .then(|| out.into_iter().collect())
}

fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(schema, batches).unwrap()
}

/// Where the fast path takes `text`, it agrees with arrow-json.
fn agree(text: &str) -> bool {
    let s = schema();
    let Some(fast) = flat(&s, text.as_bytes(), None) else {
        return false;
    };
    let general = arrow_json(&s, text.as_bytes())
        .unwrap_or_else(|e| panic!("fast path took what arrow-json refuses ({e}): {text}"));
    assert_eq!(concat(&s, &fast), concat(&s, &general), "{text}");
    true
}

#[test]
fn plain_rows_match_arrow_json() {
    assert!(agree(concat!(
        r#"{"id":1,"small":-128,"n":4294967295,"price":1.5e3,"ratio":0.1,"ok":true,"#,
        r#""name":"a\"b\\c\u00e9\ud83d\ude00\n","big":"x","view":"a long string view value","#,
        r#""day":"2024-02-29","ts":"2023-11-14 22:13:20.123","ltz":"2023-11-14T22:13:20.123456Z","must":7}"#,
        "\n",
        r#" { "must" : -7 , "unknown" : {"deep": [1, {"x": null}, "s"]}, "id" : null }"#,
        "\n\n",
        r#"{"must":0,"ts":1700000000000,"day":19000,"price":-0,"ratio":3,"name":"é"}{"must":1}"#
    )));
    assert!(agree("")); // no rows
}

#[test]
fn gives_up_where_arrow_json_decides() {
    let s = schema();
    for text in [
        r#"{"must":1,"id":1.5}"#,         // arrow-json truncates
        r#"{"must":1,"id":"12"}"#,        // arrow-json parses the string
        r#"{"must":1,"name":12}"#,        // a number for a string
        r#"{"must":1,"small":128}"#,      // out of range
        r#"{"must":1,"id":1,"id":2}"#,    // duplicate key
        r#"{"id":1}"#,                    // NOT NULL missing
        r#"{"must":null}"#,               // NULL into NOT NULL
        r#"{"must":1,"ok":1}"#,           // a number for a boolean
        r#"{"must":1,"name":["a"]}"#,     // nested for a column
        r#"{"must":1,"x":[1,}"#,          // malformed
        r#"{"must":1,"id":01}"#,          // leading zero
        r#"{"must":1,"name":"\x"}"#,      // bad escape
        r#"{"must":1,"name":"\ud800"}"#,  // lone surrogate
        r#"{"must":1,"n\u0061me":"a"}"#,  // escaped key
        r#"[1]"#,                         // not an object
        r#"{"must":1,"ts":"yesterday"}"#, // not a timestamp
        "{\"must\":1,\"name\":\"a\tb\"}", // raw control character
        r#"{"must":1}x"#,                 // trailing garbage
    ] {
        assert!(flat(&s, text.as_bytes(), None).is_none(), "{text}");
    }
    assert!(flat(&s, b"{\"must\":1,\"name\":\"\xff\"}", None).is_none());
}

#[test]
fn records_hold_one_object_each() {
    let s = schema();
    let text = b"{\"must\":1}\n{\"must\":2}\n";
    let rows = flat(&s, text, Some(&[11, 22])).unwrap();
    assert_eq!(concat(&s, &rows).num_rows(), 2);
    // Two objects in one record, or one spread over two: the general path.
    assert!(flat(&s, text, Some(&[22])).is_none());
    assert!(flat(&s, b"{\"must\":\n1}\n", Some(&[8, 12])).is_none());
    assert!(flat(&s, b"  \n", Some(&[3])).is_none());
}

#[test]
fn gives_up_cleanly_and_starts_again() {
    let s = schema();
    let mut f = FlatJson::new(&s, false).unwrap();
    let mut out = VecDeque::new();
    assert!(!f.decode(b"{\"must\":1}\n{\"must\":\"x\"}\n", None, 1, &mut out));
    assert!(out.is_empty());
    assert!(f.decode(
        b"{\"must\":5}\n{\"must\":6}\n{\"must\":7}",
        None,
        2,
        &mut out
    ));
    assert_eq!(out.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), [2, 1]);
}

#[test]
fn missing_fields_give_up_when_all_are_required() {
    let s = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
    let mut f = FlatJson::new(&s, true).unwrap();
    let mut out = VecDeque::new();
    assert!(!f.decode(b"{}", None, 8, &mut out));
    assert!(f.decode(b"{\"a\":null}", None, 8, &mut out));
}

#[test]
fn other_types_have_no_fast_path() {
    let s = Arc::new(Schema::new(vec![Field::new(
        "d",
        DataType::Decimal128(10, 2),
        true,
    )]));
    assert!(FlatJson::new(&s, false).is_none());
}

fn json_string() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 é😀\"\\\\/\n\t\u{1}]{0,12}".prop_map(|s| serde_json::to_string(&s).unwrap())
}

fn field() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        4 => any::<i64>().prop_map(|v| ("id".into(), v.to_string())),
        4 => (-130i64..130).prop_map(|v| ("small".into(), v.to_string())),
        4 => any::<u32>().prop_map(|v| ("n".into(), v.to_string())),
        4 => any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| ("price".into(), format!("{v:e}"))),
        4 => (-1e6f64..1e6).prop_map(|v| ("ratio".into(), v.to_string())),
        4 => any::<bool>().prop_map(|v| ("ok".into(), v.to_string())),
        4 => json_string().prop_map(|v| ("name".into(), v)),
        4 => json_string().prop_map(|v| ("view".into(), v)),
        4 => (0i64..2_000_000_000_000).prop_map(|v| ("ts".into(), v.to_string())),
        4 => Just(("ltz".to_string(), "\"2020-01-01 00:00:00.5\"".to_string())),
        4 => Just(("name".to_string(), "null".to_string())),
        4 => json_string().prop_map(|v| ("other".into(), format!("[{v},{{\"k\":{v}}}]"))),
        1 => "[0-9.eE+-]{1,6}".prop_map(|v| ("price".into(), v)),
    ]
}

proptest! {
    #[test]
    fn agrees_with_arrow_json(rows in prop::collection::vec(
        (prop::collection::vec(field(), 0..6), any::<i32>()), 1..8)
    ) {
        let text: String = rows
            .iter()
            .map(|(fields, must)| {
                // Each key once (a repeated one is the general path's).
                let fields: std::collections::BTreeMap<_, _> = fields.iter().cloned().collect();
                let mut parts: Vec<String> =
                    fields.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
                parts.push(format!("\"must\":{must}"));
                format!("{{{}}}\n", parts.join(","))
            })
            .collect();
        let s = schema();
        if let Some(fast) = flat(&s, text.as_bytes(), None) {
            let general = arrow_json(&s, text.as_bytes());
            prop_assert!(general.is_ok(), "fast path took what arrow-json refuses: {text}");
            prop_assert_eq!(concat(&s, &fast), concat(&s, &general.unwrap()));
        }
    }
}

/// Decoding speed of the fast path against arrow-json on 100-byte
/// messages (`cargo test --release -p weir-operators flat_json_speed --
/// --ignored --nocapture`); prints figures, asserts nothing about time.
#[test]
#[ignore]
fn flat_json_speed() {
    let s = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("customer", DataType::Utf8, true),
        Field::new("amount", DataType::Int32, true),
        Field::new("ts", DataType::Int64, true),
        Field::new("note", DataType::Utf8, true),
    ]));
    let mut text = Vec::new();
    let mut ends = Vec::new();
    for i in 0..100_000u64 {
        let head = format!(
            "{{\"id\":{i},\"customer\":\"c{:03}\",\"amount\":{},\"ts\":{},\"note\":\"",
            i % 100,
            i % 1000,
            1_700_000_000_000u64 + i / 10
        );
        text.extend_from_slice(head.as_bytes());
        text.extend(std::iter::repeat_n(
            b'x',
            98usize.saturating_sub(head.len()),
        ));
        text.extend_from_slice(b"\"}\n");
        ends.push(text.len());
    }
    let mb = text.len() as f64 / 1e6;
    let time = |f: &mut dyn FnMut()| {
        let start = std::time::Instant::now();
        for _ in 0..10 {
            f();
        }
        start.elapsed().as_secs_f64() / 10.0
    };
    let mut f = FlatJson::new(&s, false).unwrap();
    let fast = time(&mut || {
        let mut out = VecDeque::new();
        assert!(f.decode(&text, Some(&ends), 8192, &mut out));
    });
    let general = time(&mut || {
        arrow_json(&s, &text).unwrap();
    });
    println!(
        "flat {:.0} MB/s, arrow-json {:.0} MB/s, {:.2}x",
        mb / fast,
        mb / general,
        general / fast
    );
}
