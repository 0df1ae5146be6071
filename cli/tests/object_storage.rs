//! The filesystem connector over object storage: tables in `s3://` (an
//! S3-compatible server started by the test, moto) and `az://` (Azurite,
//! Azure's emulator, likewise) read like local ones —
//! Parquet with row groups a filter rules out left unread, JSON lines —
//! and `memory://`.

use std::sync::Arc;

use arrow::array::{AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_sql::{SqlSession, StatementResult};
use weir_tests::S3Server;

/// 4 row groups of 1,000 rows: `id` 0..4000 in order, so each row group
/// covers one thousand.
fn parquet_bytes() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(1000))
        .build();
    let mut out = vec![];
    let mut w =
        parquet::arrow::ArrowWriter::try_new(&mut out, Arc::clone(&schema), Some(props)).unwrap();
    for chunk in 0..4 {
        let ids: Vec<i64> = (chunk * 1000..(chunk + 1) * 1000).collect();
        let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
        w.write(
            &RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(StringArray::from(names)),
                ],
            )
            .unwrap(),
        )
        .unwrap();
    }
    w.close().unwrap();
    out
}

/// Run `script` (its last statement a query) in-process; the rows.
fn query(script: &str) -> (Vec<i64>, String) {
    let mut s = SqlSession::new();
    let results = s.execute_script(script).unwrap();
    let explain = results
        .iter()
        .filter_map(|r| match r {
            StatementResult::Explain(t) => Some(t.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .unwrap();
    env.execute("query").unwrap();
    let mut got: Vec<i64> = rows
        .batches()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    got.sort_unstable();
    (got, explain)
}

#[test]
fn parquet_and_json_in_s3_are_read_and_a_filter_skips_row_groups() {
    let _s3 = S3Server::start("lake");
    read_parquet_and_json("s3://lake");
}

#[test]
fn parquet_and_json_in_azure_blob_storage_are_read_and_a_filter_skips_row_groups() {
    let _az = weir_tests::BlobServer::start("lake");
    read_parquet_and_json("az://lake");
}

/// Parquet and JSON tables under `store` (a bucket or container URL).
fn read_parquet_and_json(store: &str) {
    weir_operators::storage::put_object(&format!("{store}/events/part-0.parquet"), parquet_bytes())
        .unwrap();
    // Hidden objects (in-progress output, markers) are not data.
    weir_operators::storage::put_object(&format!("{store}/events/_SUCCESS"), vec![]).unwrap();
    let table = format!(
        "CREATE TABLE events (id BIGINT, name STRING) WITH \
         ('connector' = 'filesystem', 'path' = '{store}/events', 'format' = 'parquet');"
    );
    let table = table.as_str();
    let (all, _) = query(&format!("{table}\nSELECT id FROM events;"));
    assert_eq!(all, (0..4000).collect::<Vec<i64>>());
    // A selective filter: one row group of four is read.
    let (some, explain) = query(&format!(
        "{table}\nEXPLAIN SELECT id FROM events WHERE id >= 2100 AND id < 2200;\n\
         SELECT id FROM events WHERE id >= 2100 AND id < 2200;"
    ));
    assert_eq!(some, (2100..2200).collect::<Vec<i64>>());
    assert!(explain.contains("[1 of 4 row groups]"), "{explain}");
    // No row group can hold these: none is read, and nothing comes out.
    let (none, explain) = query(&format!(
        "{table}\nEXPLAIN SELECT id FROM events WHERE id > 9000;\nSELECT id FROM events WHERE id > 9000;"
    ));
    assert!(none.is_empty());
    assert!(explain.contains("[0 of 4 row groups]"), "{explain}");

    // JSON lines in two objects under a prefix.
    weir_operators::storage::put_object(
        &format!("{store}/json/a.json"),
        b"{\"id\":1,\"name\":\"a\"}\n{\"id\":2,\"name\":\"b\"}\n".to_vec(),
    )
    .unwrap();
    weir_operators::storage::put_object(&format!("{store}/json/b.json"), b"{\"id\":3}\n".to_vec())
        .unwrap();
    let (ids, _) = query(&format!(
        "CREATE TABLE j (id BIGINT, name STRING) WITH \
         ('connector' = 'filesystem', 'path' = '{store}/json/', 'format' = 'json');\n\
         SELECT id FROM j;"
    ));
    assert_eq!(ids, vec![1, 2, 3]);
}

/// One row group of 4,000 rows in data pages of 500: `id` in order, so a
/// page covers 500 ids.
fn paged_parquet_bytes() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_data_page_row_count_limit(500)
        .set_write_batch_size(100)
        .build();
    let mut out = vec![];
    let mut w =
        parquet::arrow::ArrowWriter::try_new(&mut out, Arc::clone(&schema), Some(props)).unwrap();
    for chunk in 0..40 {
        let ids: Vec<i64> = (chunk * 100..(chunk + 1) * 100).collect();
        let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
        w.write(
            &RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(StringArray::from(names)),
                ],
            )
            .unwrap(),
        )
        .unwrap();
    }
    w.close().unwrap();
    out
}

#[test]
fn the_page_index_skips_pages_a_filter_rules_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("paged");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("part-0.parquet"), paged_parquet_bytes()).unwrap();
    let table = format!(
        "CREATE TABLE paged (id BIGINT, name STRING) WITH \
         ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');",
        dir.display()
    );
    let (some, explain) = query(&format!(
        "{table}\nEXPLAIN SELECT id FROM paged WHERE id >= 2100 AND id < 2200;\n\
         SELECT id FROM paged WHERE id >= 2100 AND id < 2200;"
    ));
    assert_eq!(some, (2100..2200).collect::<Vec<i64>>());
    // One row group, kept; its pages outside 2000..2500 are not read.
    assert!(
        explain.contains("[pages pruned in 1 row groups: 500 rows kept]"),
        "{explain}"
    );
    let (edges, _) = query(&format!(
        "{table}\nSELECT id FROM paged WHERE id < 3 OR id > 3997;"
    ));
    assert_eq!(edges, vec![0, 1, 2, 3998, 3999]);
    let (few, _) = query(&format!(
        "{table}\nSELECT id FROM paged WHERE id > 1499 AND id <= 1500;"
    ));
    assert_eq!(few, vec![1500]);
}

#[test]
fn a_missing_object_store_path_is_a_clear_error() {
    let err = SqlSession::new()
        .execute_script(
            "CREATE TABLE t (id BIGINT) WITH ('connector' = 'filesystem', \
             'path' = 'memory://nowhere/at/all', 'format' = 'csv');\nSELECT id FROM t;",
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("memory://nowhere/at/all") && err.contains("no objects"),
        "{err}"
    );
}

#[test]
fn memory_store_tables_read_what_was_put() {
    weir_operators::storage::put_object("memory://mem/t/x.csv", b"7\n8\n".to_vec()).unwrap();
    let (ids, _) = query(
        "CREATE TABLE m (id BIGINT) WITH \
         ('connector' = 'filesystem', 'path' = 'memory://mem/t', 'format' = 'csv');\n\
         SELECT id FROM m;",
    );
    assert_eq!(ids, vec![7, 8]);
}
