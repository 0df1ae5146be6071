//! `sink.rolling-policy.*`: a file sink starts a new part file once the
//! open one holds `file-size` bytes or has been open `rollover-interval`,
//! besides at every checkpoint (checked after each batch written); every
//! row lands in exactly one file.

use std::path::Path;
use std::sync::Arc;

use arrow::array::AsArray;
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use weir_core::time::WatermarkStrategy;

const ROWS: i64 = 20_000;

/// Write 0..ROWS through a `filesystem` sink with `options`; returns the
/// published files.
fn write(dir: &Path, format: &str, options: &[(&str, &str)]) -> Vec<std::path::PathBuf> {
    write_at(dir, format, options, "unlimited")
}

fn write_at(
    dir: &Path,
    format: &str,
    options: &[(&str, &str)],
    rate: &str,
) -> Vec<std::path::PathBuf> {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(1);
    // Files roll between batches: small ones make many files.
    env.configure(|c| c.batch_size = 500);
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let source = env
        .connector_source(
            "datagen",
            [
                ("number-of-rows", ROWS.to_string()),
                ("rows-per-second", rate.into()),
                ("fields.n.kind", "sequence".into()),
                ("fields.n.start", "0".into()),
                ("fields.n.end", (ROWS - 1).to_string()),
            ],
            Some(schema),
            "numbers",
        )
        .unwrap();
    let mut sink: Vec<(String, String)> = vec![
        ("path".into(), dir.display().to_string()),
        ("format".into(), format.into()),
    ];
    sink.extend(options.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env.from_source(source, WatermarkStrategy::no_watermarks(), "numbers")
        .unwrap()
        .sink_to_connector("filesystem", sink, "out")
        .unwrap();
    env.execute("rolling").unwrap();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn json_numbers(files: &[std::path::PathBuf]) -> Vec<i64> {
    let mut out: Vec<i64> = files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v["n"].as_i64().unwrap()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn row_files_roll_by_size_and_hold_every_row_once() {
    let tmp = tempfile::tempdir().unwrap();
    let one = write(&tmp.path().join("one"), "json", &[]);
    assert_eq!(one.len(), 1, "under the default 128 MiB one file: {one:?}");
    let rolled = write(
        &tmp.path().join("rolled"),
        "json",
        &[("sink.rolling-policy.file-size", "16 kb")],
    );
    // 20 000 rows of `{"n":…}` are about 250 KB: many files, none hidden.
    assert!(rolled.len() > 4, "{} files", rolled.len());
    for f in &rolled {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with("part-0000"), "{name}");
    }
    assert_eq!(json_numbers(&rolled), (0..ROWS).collect::<Vec<_>>());
}

#[test]
fn files_roll_by_age() {
    let tmp = tempfile::tempdir().unwrap();
    // About two seconds of writing; a file is closed after 200 ms.
    let rolled = write_at(
        &tmp.path().join("aged"),
        "json",
        &[("sink.rolling-policy.rollover-interval", "200 ms")],
        "10000",
    );
    assert!(rolled.len() >= 4, "{} files", rolled.len());
    assert_eq!(json_numbers(&rolled), (0..ROWS).collect::<Vec<_>>());
}

#[test]
fn parquet_files_roll_by_size() {
    let tmp = tempfile::tempdir().unwrap();
    let rolled = write(
        &tmp.path().join("p"),
        "parquet",
        &[("sink.rolling-policy.file-size", "4 kb")],
    );
    assert!(rolled.len() > 1, "{} files", rolled.len());
    let mut got = vec![];
    for f in &rolled {
        let file = std::fs::File::open(f).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(file, 8192)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for b in reader {
            got.extend(
                b.unwrap()
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec(),
            );
        }
    }
    got.sort_unstable();
    assert_eq!(got, (0..ROWS).collect::<Vec<_>>());
}

#[test]
fn bad_rolling_options_are_refused_naming_them() {
    let env = weir_worker::local_environment().unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let source = env
        .connector_source(
            "datagen",
            [("number-of-rows", "1")],
            Some(schema),
            "numbers",
        )
        .unwrap();
    let stream = env
        .from_source(source, WatermarkStrategy::no_watermarks(), "numbers")
        .unwrap();
    for (key, value) in [
        ("sink.rolling-policy.file-size", "lots"),
        ("sink.rolling-policy.rollover-interval", "0 s"),
    ] {
        let e = stream
            .sink_to_connector(
                "filesystem",
                [("path", "/tmp/unused"), ("format", "json"), (key, value)],
                "out",
            )
            .err()
            .unwrap_or_else(|| panic!("{key} = {value} was accepted"));
        assert!(e.to_string().contains(key), "{e}");
    }
}
