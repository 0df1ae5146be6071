//! `debezium-json`: change events read as a changelog and a changelog
//! written as change events — the same rows and row kinds real Flink 2.3
//! reads from the same events, and the same bytes Flink writes for the
//! same query (`tests/python/flink_debezium.py`, when `WEIR_TEST_PYFLINK`
//! names a Python with PyFlink). Without it only Weir's side runs, against
//! the rows written down here.

use std::path::Path;
use std::process::Command;

mod common;
use common::WEIR;

/// Snapshot reads, an insert, an update and a delete, with the fields
/// Debezium adds besides (`source`, `ts_ms`), which are not columns.
const EVENTS: &str = r#"{"before":null,"after":{"id":1,"name":"scooter","weight":3.14},"op":"r","source":{"db":"inventory","table":"products"},"ts_ms":1700000000000}
{"before":null,"after":{"id":2,"name":"car battery","weight":8.1},"op":"r","source":{"db":"inventory","table":"products"},"ts_ms":1700000000001}
{"before":null,"after":{"id":3,"name":"12-pack \"drill\", bits","weight":5.5},"op":"c","ts_ms":1700000000002}
{"before":{"id":1,"name":"scooter","weight":3.14},"after":{"id":1,"name":"scooter","weight":5.18},"op":"u","ts_ms":1700000000003}
{"before":{"id":2,"name":"car battery","weight":8.1},"after":null,"op":"d","ts_ms":1700000000004}
{"before":null,"after":{"id":4,"name":null,"weight":null},"op":"c","ts_ms":1700000000005}
"#;

/// The rows and kinds Flink 2.3 reads from [`EVENTS`] (as its side prints
/// them).
const FLINK_ROWS: &[&str] = &[
    "+I|(1, 'scooter', Decimal('3.14'))",
    "+I|(2, 'car battery', Decimal('8.10'))",
    "+I|(3, '12-pack \"drill\", bits', Decimal('5.50'))",
    "-U|(1, 'scooter', Decimal('3.14'))",
    "+U|(1, 'scooter', Decimal('5.18'))",
    "-D|(2, 'car battery', Decimal('8.10'))",
    "+I|(4, None, None)",
];

fn run(script: &str, dir: &Path) {
    let file = dir.join("job.sql");
    std::fs::write(&file, script).unwrap();
    let o = Command::new(WEIR)
        .args(["run", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn only_file(dir: &Path) -> String {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::read_to_string(&files[0]).unwrap()
}

/// Weir's rows of the events (through a retracting JSON sink) in the
/// form Flink's side prints.
fn weir_rows(tmp: &Path) -> Vec<String> {
    let src = tmp.join("in");
    let rows = tmp.join("rows");
    run(
        &format!(
            "SET 'execution.runtime-mode' = 'streaming';
CREATE TABLE src (id INT, name STRING, weight DECIMAL(10, 2)) WITH (
  'connector' = 'filesystem', 'path' = '{src}', 'format' = 'debezium-json');
CREATE TABLE rows_out (id INT, name STRING, weight DECIMAL(10, 2)) WITH (
  'connector' = 'filesystem', 'path' = '{rows}', 'format' = 'json',
  'sink.changelog-mode' = 'retract');
INSERT INTO rows_out SELECT * FROM src;",
            src = src.display(),
            rows = rows.display()
        ),
        tmp,
    );
    only_file(&rows)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let name = match v["name"].as_str() {
                Some(n) => format!("'{n}'"),
                None => "None".into(),
            };
            let weight = match v["weight"].as_f64() {
                Some(w) => format!("Decimal('{w:.2}')"),
                None => "None".into(),
            };
            format!(
                "{}|({}, {name}, {weight})",
                v["op"].as_str().unwrap(),
                v["id"]
            )
        })
        .collect()
}

#[test]
fn debezium_json_reads_and_writes_as_flink_does() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("in");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("events.json"), EVENTS).unwrap();

    assert_eq!(weir_rows(tmp.path()), FLINK_ROWS);

    // The changelog of a filter, written back as change events.
    let out = tmp.path().join("weir");
    run(
        &format!(
            "SET 'execution.runtime-mode' = 'streaming';
CREATE TABLE src (id INT, name STRING, weight DECIMAL(10, 2)) WITH (
  'connector' = 'filesystem', 'path' = '{src}', 'format' = 'debezium-json');
CREATE TABLE dst (id INT, name STRING, weight DECIMAL(10, 2)) WITH (
  'connector' = 'filesystem', 'path' = '{out}', 'format' = 'debezium-json');
INSERT INTO dst SELECT * FROM src WHERE weight > 4;",
            src = src.display(),
            out = out.display()
        ),
        tmp.path(),
    );
    let written = only_file(&out);
    // -U of a row the filter drops is dropped; its +U passes: a "c".
    assert_eq!(
        written,
        "{\"before\":null,\"after\":{\"id\":2,\"name\":\"car battery\",\"weight\":8.1},\"op\":\"c\"}\n\
         {\"before\":null,\"after\":{\"id\":3,\"name\":\"12-pack \\\"drill\\\", bits\",\"weight\":5.5},\"op\":\"c\"}\n\
         {\"before\":null,\"after\":{\"id\":1,\"name\":\"scooter\",\"weight\":5.18},\"op\":\"c\"}\n\
         {\"before\":{\"id\":2,\"name\":\"car battery\",\"weight\":8.1},\"after\":null,\"op\":\"d\"}\n"
    );

    let Some(python) = std::env::var_os("WEIR_TEST_PYFLINK") else {
        eprintln!("WEIR_TEST_PYFLINK is not set: the Flink side is skipped");
        return;
    };
    let (flink_out, again) = (tmp.path().join("flink"), tmp.path().join("again"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/flink_debezium.py");
    // One Flink process: the events, and the events Weir wrote.
    let o = Command::new(python)
        .arg(&script)
        .args([&src, &flink_out, &out, &again])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "PyFlink failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let stdout = String::from_utf8(o.stdout).unwrap();
    let flink = |pair: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix(pair))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(flink("0|"), FLINK_ROWS, "Flink reads the events otherwise");
    assert_eq!(only_file(&flink_out), written, "Flink writes other bytes");
    // And Flink reads what Weir wrote as Weir does.
    assert_eq!(
        flink("1|"),
        [
            "+I|(2, 'car battery', Decimal('8.10'))",
            "+I|(3, '12-pack \"drill\", bits', Decimal('5.50'))",
            "+I|(1, 'scooter', Decimal('5.18'))",
            "-D|(2, 'car battery', Decimal('8.10'))",
        ]
    );
}
