//! Kafka tables beyond payloads: METADATA columns read and written,
//! `topic-pattern`, and a job rescaled from two subtasks to three through a
//! savepoint — against librdkafka's mock cluster on loopback.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int32Type, Int64Type, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use weir_tests::KafkaBroker;

mod common;

/// Run `script` in this process at parallelism 2.
fn run(script: &str) -> Result<Vec<RecordBatch>, String> {
    common::run_sql(script, 2)
}

const BASE_MS: i64 = 1_700_000_000_000;

#[test]
fn metadata_columns_are_read_and_written() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("events", 2);
    kafka.create_topic("copied", 1);
    // Message i: partition i % 2, timestamp BASE + i s, header source = s{i % 3}.
    let messages: Vec<weir_tests::WithHeaders> = (0..20i64)
        .map(|i| {
            (
                (i % 2) as i32,
                0,
                Some(BASE_MS + i * 1000),
                vec![
                    ("source".to_string(), format!("s{}", i % 3).into_bytes()),
                    ("n".to_string(), i.to_string().into_bytes()),
                ],
                format!("{{\"id\":{i}}}").into_bytes(),
            )
        })
        .collect();
    kafka.produce_with_headers("events", &messages);
    let b = kafka.bootstrap();
    let source = format!(
        "CREATE TABLE events (
  id BIGINT,
  t STRING METADATA FROM 'topic' VIRTUAL,
  p INT METADATA FROM 'partition' VIRTUAL,
  o BIGINT METADATA FROM 'offset' VIRTUAL,
  ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp',
  tt STRING METADATA FROM 'timestamp-type' VIRTUAL,
  headers MAP<STRING, BYTES> METADATA,
  second_of AS ts + INTERVAL '1' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'events', 'properties.bootstrap.servers' = '{b}',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  'format' = 'json');"
    );
    let batches = run(&format!(
        "{source}\nSELECT id, t, p, o, ts, tt, headers['source'], second_of FROM events;"
    ))
    .unwrap();
    let mut seen = BTreeMap::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let id = b.column(0).as_primitive::<Int64Type>().value(r);
            let header = b.column(6).as_binary::<i32>();
            seen.insert(
                id,
                (
                    b.column(1).as_string::<i32>().value(r).to_string(),
                    b.column(2).as_primitive::<Int32Type>().value(r),
                    b.column(3).as_primitive::<Int64Type>().value(r),
                    b.column(4)
                        .as_primitive::<TimestampMillisecondType>()
                        .value(r),
                    b.column(5).as_string::<i32>().value(r).to_string(),
                    String::from_utf8(header.value(r).to_vec()).unwrap(),
                    b.column(7)
                        .as_primitive::<TimestampMillisecondType>()
                        .value(r),
                ),
            );
        }
    }
    assert_eq!(seen.len(), 20, "{seen:?}");
    for (id, (t, p, o, ts, tt, source, later)) in seen {
        assert_eq!(t, "events");
        assert_eq!(i64::from(p), id % 2);
        // Each partition holds every other message, in order.
        assert_eq!(o, id / 2);
        assert_eq!(ts, BASE_MS + id * 1000);
        assert_eq!(later, ts + 1000);
        assert_eq!(tt, "CreateTime");
        assert_eq!(source, format!("s{}", id % 3));
    }

    // Written back: the persisted metadata columns become the message's
    // timestamp and headers, as another client reads them.
    run(&format!(
        "{source}
CREATE TABLE copied (
  id BIGINT,
  ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp',
  headers MAP<STRING, BYTES> METADATA
) WITH ('connector' = 'kafka', 'topic' = 'copied', 'properties.bootstrap.servers' = '{b}',
  'format' = 'json');
INSERT INTO copied SELECT id + 100, ts + INTERVAL '1' MINUTE, headers FROM events;"
    ))
    .unwrap();
    let mut copied = kafka.consume_with_headers("copied");
    copied.sort_by_key(|m| m.2);
    assert_eq!(copied.len(), 20);
    for (i, (_, _, ts, headers, payload)) in copied.iter().enumerate() {
        let i = i as i64;
        assert_eq!(*ts, Some(BASE_MS + i * 1000 + 60_000));
        let v: serde_json::Value = serde_json::from_slice(payload).unwrap();
        // Only the physical columns are in the value.
        assert_eq!(v, serde_json::json!({ "id": i + 100 }));
        let mut headers = headers.clone();
        headers.sort();
        assert_eq!(
            headers,
            vec![
                ("n".to_string(), i.to_string().into_bytes()),
                ("source".to_string(), format!("s{}", i % 3).into_bytes()),
            ]
        );
    }

    // Mistakes are refused when planned, naming the column.
    let e = run(&format!(
        "CREATE TABLE bad (id BIGINT, o BIGINT METADATA FROM 'offset')
 WITH ('connector' = 'kafka', 'topic' = 'copied', 'properties.bootstrap.servers' = '{b}',
  'format' = 'json');
{source}
INSERT INTO bad SELECT id, o FROM events;"
    ))
    .unwrap_err();
    assert!(
        e.contains("column 'o': metadata 'offset' of connector 'kafka' cannot be written"),
        "{e}"
    );
    let e = run(&format!(
        "CREATE TABLE bad (id BIGINT, x STRING METADATA FROM 'key' VIRTUAL)
 WITH ('connector' = 'kafka', 'topic' = 'copied', 'properties.bootstrap.servers' = '{b}',
  'format' = 'json');"
    ))
    .unwrap_err();
    assert!(
        e.contains("connector 'kafka' has no metadata key 'key'; its keys are topic, partition"),
        "{e}"
    );
    let e = run(
        "CREATE TABLE bad (id BIGINT, o BIGINT METADATA FROM 'offset' VIRTUAL)
 WITH ('connector' = 'datagen');",
    )
    .unwrap_err();
    assert!(
        e.contains("connector 'datagen' has no metadata key 'offset'"),
        "{e}"
    );
}

#[test]
fn metadata_columns_follow_messages_a_format_skips() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("mixed", 1);
    let messages: Vec<weir_tests::WithHeaders> = (0..10i64)
        .map(|i| {
            let payload = if i % 4 == 1 {
                b"{\"id\": oops".to_vec()
            } else {
                format!("{{\"id\":{i}}}").into_bytes()
            };
            (0, 0, Some(BASE_MS + i), vec![], payload)
        })
        .collect();
    kafka.produce_with_headers("mixed", &messages);
    let batches = run(&format!(
        "CREATE TABLE mixed (id BIGINT, o BIGINT METADATA FROM 'offset' VIRTUAL)
 WITH ('connector' = 'kafka', 'topic' = 'mixed', 'properties.bootstrap.servers' = '{}',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  'format' = 'json', 'json.ignore-parse-errors' = 'true');
SELECT id, o FROM mixed;",
        kafka.bootstrap()
    ))
    .unwrap();
    let mut rows: Vec<(i64, i64)> = batches
        .iter()
        .flat_map(|b| {
            let id = b.column(0).as_primitive::<Int64Type>().clone();
            let o = b.column(1).as_primitive::<Int64Type>().clone();
            (0..b.num_rows()).map(move |r| (id.value(r), o.value(r)))
        })
        .collect();
    rows.sort_unstable();
    // Offsets 1, 5 and 9 did not parse; every other row keeps its own.
    let want: Vec<(i64, i64)> = (0..10).filter(|i| i % 4 != 1).map(|i| (i, i)).collect();
    assert_eq!(rows, want);
}

#[test]
fn a_topic_pattern_reads_every_matching_topic() {
    let kafka = KafkaBroker::start(1);
    for (topic, partitions) in [
        ("orders-eu", 2),
        ("orders-us", 3),
        ("orders", 1),
        ("refunds", 1),
    ] {
        kafka.create_topic(topic, partitions);
    }
    for (n, topic) in ["orders-eu", "orders-us", "orders", "refunds"]
        .iter()
        .enumerate()
    {
        let n = n as i64;
        let messages: Vec<weir_tests::Produced> = (0..50)
            .map(|i| (0, None, format!("{{\"id\":{}}}", n * 1000 + i).into_bytes()))
            .collect();
        kafka.produce(topic, &messages);
    }
    let table = |pattern: &str| {
        format!(
            "CREATE TABLE orders (id BIGINT, t STRING METADATA FROM 'topic' VIRTUAL)
 WITH ('connector' = 'kafka', 'topic-pattern' = '{pattern}',
  'properties.bootstrap.servers' = '{}', 'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'latest-offset', 'format' = 'json');",
            kafka.bootstrap()
        )
    };
    let batches = run(&format!(
        "{}\nSELECT id, t FROM orders;",
        table("orders-.*")
    ))
    .unwrap();
    let mut by_topic: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            by_topic
                .entry(b.column(1).as_string::<i32>().value(r).to_string())
                .or_default()
                .push(b.column(0).as_primitive::<Int64Type>().value(r));
        }
    }
    for ids in by_topic.values_mut() {
        ids.sort_unstable();
    }
    // The whole name must match: "orders" itself is not read.
    assert_eq!(
        by_topic,
        BTreeMap::from([
            ("orders-eu".to_string(), (0..50).collect::<Vec<_>>()),
            ("orders-us".to_string(), (1000..1050).collect::<Vec<_>>()),
        ])
    );
    let e = run(&format!("{}\nSELECT id FROM orders;", table("orders-("))).unwrap_err();
    assert!(e.contains("'topic-pattern'"), "{e}");
    let e = run(&format!(
        "CREATE TABLE out (id BIGINT) WITH ('connector' = 'kafka', 'topic-pattern' = 'o.*',
  'properties.bootstrap.servers' = '{}', 'format' = 'json');
{}
INSERT INTO out SELECT id FROM orders;",
        kafka.bootstrap(),
        table("orders-.*")
    ))
    .unwrap_err();
    assert!(e.contains("writes one 'topic'"), "{e}");
}

/// A job reading five partitions at parallelism 2 is stopped with a
/// savepoint while the topic is written, resumed at parallelism 3 (the
/// partitions dealt to three subtasks by the owner rule), and reads to the
/// end: through an exactly-once sink, every message comes out once —
/// no partition restarted from its beginning or skipped ahead.
#[test]
fn rescaling_from_a_savepoint_keeps_every_partitions_position() {
    const ROWS: i64 = 10_000;
    const PARTITIONS: i32 = 5;
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("in", PARTITIONS);
    kafka.create_topic("out", 2);
    let tmp = tempfile::tempdir().unwrap();
    let cluster = common::Cluster::start(2, 3, None);
    let messages = |range: std::ops::Range<i64>| -> Vec<weir_tests::Produced> {
        range
            .map(|i| {
                (
                    (i % i64::from(PARTITIONS)) as i32,
                    None,
                    format!("{{\"id\":{i}}}").into_bytes(),
                )
            })
            .collect()
    };
    let ends: Vec<String> = (0..PARTITIONS)
        .map(|p| format!("partition:{p},offset:{}", ROWS / i64::from(PARTITIONS)))
        .collect();
    let script = |parallelism: usize| {
        format!(
            "SET 'parallelism.default' = '{parallelism}';
SET 'execution.checkpointing.interval' = '200 ms';
SET 'execution.checkpointing.dir' = '{chk}';
CREATE TABLE src (id BIGINT) WITH (
  'connector' = 'kafka', 'topic' = 'in', 'properties.bootstrap.servers' = '{b}',
  'scan.startup.mode' = 'earliest-offset', 'format' = 'json',
  'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = '{ends}');
CREATE TABLE dst (id BIGINT) WITH (
  'connector' = 'kafka', 'topic' = 'out', 'properties.bootstrap.servers' = '{b}',
  'format' = 'json', 'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = 'rescaled');
INSERT INTO dst SELECT id FROM src;",
            chk = tmp.path().join("chk").display(),
            b = kafka.bootstrap(),
            ends = ends.join(";"),
        )
    };
    let stdout = |o: &std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let first = tmp.path().join("p2.sql");
    std::fs::write(&first, script(2)).unwrap();
    kafka.produce("in", &messages(0..ROWS / 2));
    let id = stdout(&cluster.cli(&["submit", first.to_str().unwrap()]));
    cluster.wait_for_status(&id, &["RUNNING"], Duration::from_secs(30));
    // Stop once part of the first half came out, while more is written.
    let deadline = Instant::now() + Duration::from_secs(60);
    while kafka.consume_all("out", true).len() < 500 {
        assert!(Instant::now() < deadline, "no output from the first run");
        std::thread::sleep(Duration::from_millis(100));
    }
    kafka.produce("in", &messages(ROWS / 2..ROWS * 3 / 4));
    let dir = tmp.path().join("savepoints").display().to_string();
    let savepoint = stdout(&cluster.cli(&["stop", &id, "--savepoint", &dir]));
    cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(30));
    let before = kafka.consume_all("out", true).len() as i64;
    assert!(
        before <= ROWS * 3 / 4,
        "{before} rows from {} messages",
        ROWS * 3 / 4
    );
    // The last quarter comes after the savepoint: the resumed job reads it
    // (and whatever the first left) from the savepoint's offsets only.
    kafka.produce("in", &messages(ROWS * 3 / 4..ROWS));
    let second = tmp.path().join("p3.sql");
    std::fs::write(&second, script(3)).unwrap();
    let id = stdout(&cluster.cli(&[
        "submit",
        second.to_str().unwrap(),
        "--from-savepoint",
        &savepoint,
    ]));
    let d = cluster.wait_for_status(&id, &["FINISHED", "FAILED"], Duration::from_secs(90));
    assert_eq!(d["status"], "FINISHED", "{d:#}");
    assert_eq!(d["vertices"][0]["parallelism"], 3, "{d:#}");
    let mut ids: Vec<i64> = kafka
        .consume_all("out", true)
        .iter()
        .map(|(_, _, _, payload)| {
            let v: serde_json::Value = serde_json::from_slice(payload).unwrap();
            v["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort_unstable();
    let dupes = ids.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dupes, 0, "{dupes} ids written twice");
    assert_eq!(ids, (0..ROWS).collect::<Vec<_>>());
}

#[test]
fn a_null_header_value_and_a_message_without_headers_read_as_expected() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("plain", 1);
    kafka.produce("plain", &[(0, None, b"{\"id\":1}".to_vec())]);
    let batches = run(&format!(
        "CREATE TABLE plain (id BIGINT, headers MAP<STRING, BYTES> METADATA VIRTUAL)
 WITH ('connector' = 'kafka', 'topic' = 'plain', 'properties.bootstrap.servers' = '{}',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  'format' = 'json');
SELECT id, headers FROM plain;",
        kafka.bootstrap()
    ))
    .unwrap();
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 1);
    let b = batches.iter().find(|b| b.num_rows() == 1).unwrap();
    // No headers: an empty map, as Flink gives.
    let headers = b.column(1).as_map();
    assert!(headers.is_valid(0));
    assert_eq!(headers.value(0).len(), 0);
}

/// Avro values as Flink's `avro` format writes them — one binary datum per
/// message of the schema derived from the table — written by the sink,
/// checked byte for byte against a hand-made encoding, and read back.
#[test]
fn avro_messages_are_flinks_datums_and_read_back() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("json-in", 1);
    kafka.create_topic("avro-out", 1);
    let messages: Vec<weir_tests::Produced> = (0..300i64)
        .map(|i| {
            let name = if i % 10 == 0 {
                "null".to_string()
            } else {
                format!("\"n{i}\"")
            };
            (
                0,
                None,
                format!("{{\"id\":{i},\"name\":{name}}}").into_bytes(),
            )
        })
        .collect();
    kafka.produce("json-in", &messages);
    let b = kafka.bootstrap();
    let tables = format!(
        "CREATE TABLE src (id BIGINT NOT NULL, name STRING) WITH ('connector' = 'kafka',
  'topic' = 'json-in', 'properties.bootstrap.servers' = '{b}', 'format' = 'json',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset');
CREATE TABLE avro (id BIGINT NOT NULL, name STRING) WITH ('connector' = 'kafka',
  'topic' = 'avro-out', 'properties.bootstrap.servers' = '{b}', 'format' = 'avro',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset');"
    );
    run(&format!(
        "{tables}\nINSERT INTO avro SELECT id, name FROM src;"
    ))
    .unwrap();
    // Zig-zag varint longs, a union's branch (null first), a string's
    // length then its bytes.
    fn zigzag(v: i64) -> Vec<u8> {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = vec![];
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }
    let mut written = kafka.consume_all("avro-out", false);
    written.sort_by_key(|m| m.1);
    assert_eq!(written.len(), 300);
    let mut got: Vec<Vec<u8>> = written.into_iter().map(|m| m.3).collect();
    got.sort();
    let mut want: Vec<Vec<u8>> = (0..300i64)
        .map(|i| {
            let mut d = zigzag(i);
            if i % 10 == 0 {
                d.push(0);
            } else {
                let s = format!("n{i}");
                d.push(2);
                d.extend(zigzag(s.len() as i64));
                d.extend(s.as_bytes());
            }
            d
        })
        .collect();
    want.sort();
    assert_eq!(got, want);
    // Read back, the nulls kept.
    let batches = run(&format!("{tables}\nSELECT id, name FROM avro;")).unwrap();
    let mut rows: Vec<(i64, Option<String>)> = vec![];
    for b in &batches {
        let names = b.column(1).as_string::<i32>();
        for r in 0..b.num_rows() {
            rows.push((
                b.column(0).as_primitive::<Int64Type>().value(r),
                names.is_valid(r).then(|| names.value(r).to_string()),
            ));
        }
    }
    rows.sort();
    let want: Vec<(i64, Option<String>)> = (0..300)
        .map(|i| (i, (i % 10 != 0).then(|| format!("n{i}"))))
        .collect();
    assert_eq!(rows, want);
    // A message that is not a datum of the schema names where it is.
    kafka.produce("avro-out", &[(0, None, vec![0x02, 0x02, 0x10, b'x'])]);
    let e = run(&format!("{tables}\nSELECT id FROM avro;")).unwrap_err();
    assert!(
        e.contains("topic 'avro-out' partition 0 offset 300") && e.contains("not an Avro record"),
        "{e}"
    );
}

/// A `raw` value is the whole message, line breaks and all (as Flink's
/// raw format reads a Kafka message), not a line of it.
#[test]
fn a_raw_message_with_line_breaks_is_one_row() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("lines", 1);
    let payloads = ["one\ntwo", "", "three\r\n", "four"];
    let messages: Vec<weir_tests::Produced> = payloads
        .iter()
        .map(|p| (0, None, p.as_bytes().to_vec()))
        .collect();
    kafka.produce("lines", &messages);
    let batches = run(&format!(
        "CREATE TABLE lines (line STRING, o BIGINT METADATA FROM 'offset' VIRTUAL)
 WITH ('connector' = 'kafka', 'topic' = 'lines', 'properties.bootstrap.servers' = '{}',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  'format' = 'raw');
SELECT o, line FROM lines;",
        kafka.bootstrap()
    ))
    .unwrap();
    let mut rows: Vec<(i64, String)> = vec![];
    for b in &batches {
        for r in 0..b.num_rows() {
            rows.push((
                b.column(0).as_primitive::<Int64Type>().value(r),
                b.column(1).as_string::<i32>().value(r).to_string(),
            ));
        }
    }
    rows.sort();
    let want: Vec<(i64, String)> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| (i as i64, p.to_string()))
        .collect();
    assert_eq!(rows, want);
}

/// A JSON message may span lines (a pretty-printed document); an empty
/// message is an error naming its offset, as Flink's json format fails
/// on it.
#[test]
fn a_json_message_may_span_lines() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("pretty", 1);
    let payloads = ["{\n  \"id\": 1\n}", "{\"id\":2}", "  {\"id\":\n3}  "];
    let messages: Vec<weir_tests::Produced> = payloads
        .iter()
        .map(|p| (0, None, p.as_bytes().to_vec()))
        .collect();
    kafka.produce("pretty", &messages);
    let table = |extra: &str| {
        format!(
            "CREATE TABLE pretty (id BIGINT, o BIGINT METADATA FROM 'offset' VIRTUAL)
 WITH ('connector' = 'kafka', 'topic' = 'pretty', 'properties.bootstrap.servers' = '{}',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  'format' = 'json'{extra});
SELECT id, o FROM pretty;",
            kafka.bootstrap()
        )
    };
    let rows = |batches: Vec<RecordBatch>| {
        let mut rows: Vec<(i64, i64)> = batches
            .iter()
            .flat_map(|b| {
                let id = b.column(0).as_primitive::<Int64Type>().clone();
                let o = b.column(1).as_primitive::<Int64Type>().clone();
                (0..b.num_rows()).map(move |r| (id.value(r), o.value(r)))
            })
            .collect();
        rows.sort_unstable();
        rows
    };
    assert_eq!(rows(run(&table("")).unwrap()), vec![(1, 0), (2, 1), (3, 2)]);
    kafka.produce(
        "pretty",
        &[(0, None, vec![]), (0, None, b"{\"id\":4}".to_vec())],
    );
    let e = run(&table("")).unwrap_err();
    assert!(
        e.contains("topic 'pretty' partition 0 offset 3") && e.contains("empty"),
        "{e}"
    );
    let got = rows(run(&table(", 'json.ignore-parse-errors' = 'true'")).unwrap());
    assert_eq!(got, vec![(1, 0), (2, 1), (3, 2), (4, 4)]);
}
