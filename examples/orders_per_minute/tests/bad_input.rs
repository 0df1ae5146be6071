//! Bad input fails with a clear message naming the file, a non-zero exit
//! code, and no panic.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_orders_per_minute"))
        .args(args)
        .output()
        .expect("example runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn missing_file_names_the_file() {
    let (code, err) = run(&["--input", "/nonexistent/orders.parquet"]);
    assert_ne!(code, 0);
    assert!(err.contains("/nonexistent/orders.parquet"), "{err}");
    assert!(err.contains("No such file"), "{err}");
}

#[test]
fn parquet_without_key_column_names_file_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.parquet");
    let schema = Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("amount_cents", DataType::Int64, false),
        Field::new("order_time", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int64Array::from(vec![1, 2])),
            Arc::new(Int64Array::from(vec![100, 200])),
            Arc::new(Int64Array::from(vec![0, 1000])),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let (code, err) = run(&["--input", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("user_id"), "{err}");
    assert!(err.contains("orders.parquet"), "{err}");
}

#[test]
fn unparsable_csv_line_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.csv");
    std::fs::write(
        &path,
        "order_id,user_id,amount_cents,order_time\n\
         1,7,100,2026-01-01T00:00:00\n\
         2,seven,250,2026-01-01T00:00:01\n",
    )
    .unwrap();
    let (code, err) = run(&["--input", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("orders.csv"), "{err}");
    assert!(err.contains("seven"), "{err}");
    assert!(err.contains("at line 3"), "file line of the bad row: {err}");
}

#[test]
fn good_csv_runs_and_directory_output_is_complete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.csv");
    std::fs::write(
        &path,
        "order_id,user_id,amount_cents,order_time\n\
         1,7,100,2026-01-01T00:00:00\n\
         2,7,250,2026-01-01T00:00:59.999\n\
         3,8,300,2026-01-01T00:01:00\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let (code, err) = run(&[
        "--input",
        path.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        files.len(),
        2,
        "one file per subtask, no leftovers: {files:?}"
    );
    assert!(Path::new(&out).join("part-0000.parquet").exists());
}
