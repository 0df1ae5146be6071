//! Weir's `csv` and `json` formats against real Flink 2.3 (PyFlink): for a
//! table with timestamps, decimals, NULLs, quotes, commas, a line break
//! and non-ASCII text, the files Weir writes equal the files Flink writes
//! for the same rows, byte for byte, and each engine reads the other's.
//!
//! Needs `WEIR_TEST_PYFLINK`: a Python with `apache-flink==2.3.0` (the
//! test command installs one). Without it the Flink side is skipped and
//! only Weir's own round trip runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow::array::{
    Array, BooleanArray, Decimal128Array, Float64Array, Int32Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use weir_core::spec::{CollectHandle, MemorySourceSpec, SinkSpec};
use weir_core::time::WatermarkStrategy;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("price", DataType::Decimal128(10, 2), true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("ratio", DataType::Float64, true),
    ]))
}

/// The rows of `tests/python/flink_formats.py`.
fn rows() -> RecordBatch {
    let ms = |s: &str| {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
            .unwrap()
            .and_utc()
            .timestamp_millis()
    };
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int32Array::from((1..=8).collect::<Vec<i32>>())),
            Arc::new(StringArray::from(vec![
                Some("plain"),
                Some("with, comma"),
                Some("with \"quote\""),
                None,
                Some("line\nbreak"),
                Some("a-b_c.d/e:f"),
                Some("ünï cödé ✓"),
                Some("abcdefghijklmnopqrstuvwxyz"),
            ])),
            Arc::new(
                Decimal128Array::from(vec![
                    Some(1250),
                    Some(-5),
                    None,
                    Some(10000),
                    Some(314),
                    Some(0),
                    Some(9999999999),
                    Some(150000),
                ])
                .with_precision_and_scale(10, 2)
                .unwrap(),
            ),
            Arc::new(TimestampMillisecondArray::from(vec![
                Some(ms("2023-11-14 22:13:20.123")),
                Some(ms("2023-11-14 22:13:20.0")),
                None,
                Some(ms("1970-01-01 00:00:00.001")),
                Some(ms("2024-02-29 23:59:59.999")),
                Some(ms("2000-01-01 12:00:00.5")),
                Some(ms("1999-12-31 23:59:59.0")),
                Some(ms("2023-01-01 00:00:00.010")),
            ])),
            Arc::new(BooleanArray::from(vec![
                Some(true),
                Some(false),
                None,
                Some(true),
                Some(false),
                Some(true),
                Some(false),
                Some(true),
            ])),
            Arc::new(Float64Array::from(vec![
                Some(1.5),
                Some(-2.25),
                None,
                Some(1e20),
                Some(0.1),
                Some(1e-7),
                Some(1234567.125),
                Some(1e7),
            ])),
        ],
    )
    .unwrap()
}

fn options(path: &Path, format: &str) -> Vec<(String, String)> {
    vec![
        ("path".into(), path.display().to_string()),
        ("format".into(), format.into()),
    ]
}

/// Weir writes the rows as `out/csv` and `out/json` at parallelism 1.
fn weir_write(out: &Path) {
    for format in ["csv", "json"] {
        let env = weir_worker::local_environment().unwrap();
        env.set_parallelism(1);
        env.from_source(
            MemorySourceSpec::new(schema(), vec![rows()]),
            WatermarkStrategy::no_watermarks(),
            "rows",
        )
        .unwrap()
        .sink_to_connector("filesystem", options(&out.join(format), format), "out")
        .unwrap();
        env.execute("write").unwrap();
    }
}

/// Weir reads `dir/<format>` with the table's schema.
fn weir_read(dir: &Path, format: &str) -> RecordBatch {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(1);
    let spec = env
        .connector_source(
            "filesystem",
            options(&dir.join(format), format),
            Some(schema()),
            "in",
        )
        .unwrap();
    let got = CollectHandle::new();
    env.from_source(spec, WatermarkStrategy::no_watermarks(), "in")
        .unwrap()
        .sink_to(SinkSpec::from(got.clone()), "got")
        .unwrap();
    env.execute("read").unwrap();
    let batch = arrow::compute::concat_batches(&schema(), &got.batches()).unwrap();
    let order = arrow::compute::sort_to_indices(batch.column(0), None, None).unwrap();
    arrow::compute::take_record_batch(&batch, &order).unwrap()
}

/// The one committed file under `dir` (hidden and marker files aside).
fn only_file(dir: &Path) -> Vec<u8> {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            !n.starts_with('.') && !n.starts_with('_')
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::read(&files[0]).unwrap()
}

/// What reading a CSV gives back: an empty field is '' for STRING, as in
/// Flink (the NULL name comes back empty).
fn csv_read_back(mut b: RecordBatch) -> RecordBatch {
    let names: StringArray = b
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap()
        .iter()
        .map(|v| Some(v.unwrap_or("")))
        .collect();
    let mut columns = b.columns().to_vec();
    columns[1] = Arc::new(names);
    b = RecordBatch::try_new(b.schema(), columns).unwrap();
    b
}

#[test]
fn weir_reads_back_what_it_writes() {
    let tmp = tempfile::tempdir().unwrap();
    weir_write(tmp.path());
    assert_eq!(weir_read(tmp.path(), "json"), rows());
    assert_eq!(weir_read(tmp.path(), "csv"), csv_read_back(rows()));
    // No header, Flink's timestamp text, quotes only where Jackson puts them.
    let csv = String::from_utf8(only_file(&tmp.path().join("csv"))).unwrap();
    assert!(
        csv.starts_with("1,plain,12.5,\"2023-11-14 22:13:20.123\",true,1.5\n"),
        "{csv}"
    );
}

#[test]
fn the_files_equal_flinks_and_each_engine_reads_the_others() {
    let Some(python) = std::env::var_os("WEIR_TEST_PYFLINK") else {
        eprintln!("WEIR_TEST_PYFLINK is not set: the Flink side is skipped");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/flink_formats.py");
    let tmp = tempfile::tempdir().unwrap();
    let (weir, flink) = (tmp.path().join("weir"), tmp.path().join("flink"));
    weir_write(&weir);
    let o = Command::new(&python)
        .arg(&script)
        .arg("write")
        .arg(&flink)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for format in ["csv", "json"] {
        let (w, f) = (
            only_file(&weir.join(format)),
            only_file(&flink.join(format)),
        );
        // Same bytes, in any row order: Flink's batch planner may turn the
        // VALUES of mixed literal types into a union whose inputs finish in
        // either order (seen once in CI: row 1 after row 4).
        let lines = |b: &[u8]| {
            let mut l: Vec<String> = String::from_utf8_lossy(b)
                .split_inclusive('\n')
                .map(str::to_string)
                .collect();
            l.sort();
            l
        };
        assert_eq!(
            lines(&w),
            lines(&f),
            "{format}: Weir's file differs from Flink's"
        );
    }
    // Weir reads Flink's files as it reads its own.
    assert_eq!(weir_read(&flink, "json"), rows());
    assert_eq!(weir_read(&flink, "csv"), csv_read_back(rows()));
    // Flink reads Weir's files as it reads its own.
    let o = Command::new(&python)
        .arg(&script)
        .arg("read")
        .arg(&weir)
        .arg(&flink)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let of = |dir: &Path, format: &str| -> Vec<String> {
        let prefix = format!("{}|{format}|", dir.display());
        text.lines()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
            .collect()
    };
    for format in ["csv", "json"] {
        let (w, f) = (of(&weir, format), of(&flink, format));
        assert_eq!(
            w.len(),
            8,
            "{format}: Flink read {} rows of Weir's file\n{text}",
            w.len()
        );
        assert_eq!(
            w, f,
            "{format}: Flink reads Weir's file differently from its own"
        );
    }
}
