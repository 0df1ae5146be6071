//! Parquet -> filter/project -> Parquet keeps schema and values.

use std::fs::File;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion_expr::{col, lit};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;
use weir_core::time::WatermarkStrategy;
use weir_operators::sources::parquet_source;
use weir_tests::sorted_rows;

fn input_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
        Field::new("price", DataType::Float64, false),
        Field::new("qty", DataType::Int32, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new("unused", DataType::Int64, false),
    ]))
}

fn input_batch(from: i64, n: i64) -> RecordBatch {
    let cities = ["Oslo", "Lima", "Pune"];
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(from..from + n)),
        Arc::new(StringArray::from_iter((from..from + n).map(|i| {
            if i % 7 == 0 {
                None
            } else {
                Some(cities[(i % 3) as usize])
            }
        }))),
        Arc::new(Float64Array::from_iter_values(
            (from..from + n).map(|i| i as f64 * 0.5),
        )),
        Arc::new(Int32Array::from_iter((from..from + n).map(|i| {
            if i % 5 == 0 {
                None
            } else {
                Some(i as i32 % 11)
            }
        }))),
        Arc::new(TimestampMillisecondArray::from_iter_values(
            (from..from + n).map(|i| 1_000 * i),
        )),
        Arc::new(Int64Array::from_iter_values((from..from + n).map(|i| -i))),
    ];
    RecordBatch::try_new(input_schema(), cols).unwrap()
}

#[test]
fn parquet_filter_project_parquet_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    // Two files, several row groups each: the splits of the source.
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(1000))
        .build();
    for (f, from) in [(0, 0i64), (1, 5000)] {
        let file = File::create(input.join(format!("part-{f}.parquet"))).unwrap();
        let mut w = ArrowWriter::try_new(file, input_schema(), Some(props.clone())).unwrap();
        w.write(&input_batch(from, 5000)).unwrap();
        w.close().unwrap();
    }
    let output = dir.path().join("out");

    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(3);
    let source = parquet_source(&[&input], Some(&["id", "city", "price", "qty", "ts"])).unwrap();
    env.from_source(source, WatermarkStrategy::no_watermarks(), "in")
        .unwrap()
        .filter(col("price").gt(lit(100)).and(col("city").is_not_null()))
        .unwrap()
        .project(vec![
            col("id"),
            col("city"),
            (col("price") * lit(2.0)).alias("double_price"),
            col("qty"),
            col("ts"),
        ])
        .unwrap()
        .sink_to(
            weir_operators::connectors::parquet_sink(output.clone()),
            "out",
        )
        .unwrap();
    env.execute("roundtrip").unwrap();

    let mut files: Vec<_> = std::fs::read_dir(&output)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "one visible file per subtask: {files:?}");
    let mut batches = Vec::new();
    for f in &files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(f).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            batches.push(b.unwrap());
        }
    }
    let schema = batches[0].schema();
    let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["id", "city", "double_price", "qty", "ts"]);
    assert_eq!(schema.field(1).data_type(), &DataType::Utf8);
    assert_eq!(schema.field(2).data_type(), &DataType::Float64);
    assert_eq!(schema.field(3).data_type(), &DataType::Int32);
    assert!(schema.field(3).is_nullable());
    assert_eq!(
        schema.field(4).data_type(),
        &DataType::Timestamp(TimeUnit::Millisecond, None)
    );

    // Expected rows computed independently from the input.
    let all = concat_batches(
        &input_schema(),
        &[input_batch(0, 5000), input_batch(5000, 5000)],
    )
    .unwrap();
    let expected: Vec<RecordBatch> = (0..all.num_rows())
        .filter(|&r| (r as f64) * 0.5 > 100.0 && r % 7 != 0)
        .map(|r| {
            let one = all.slice(r, 1);
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::clone(one.column(0)),
                    Arc::clone(one.column(1)),
                    Arc::new(Float64Array::from(vec![r as f64 * 0.5 * 2.0])),
                    Arc::clone(one.column(3)),
                    Arc::clone(one.column(4)),
                ],
            )
            .unwrap()
        })
        .collect();
    assert_eq!(sorted_rows(&batches), sorted_rows(&expected));
    assert!(!expected.is_empty());
}
