//! The `kafka` connector against a Kafka-protocol broker the test starts
//! (librdkafka's mock cluster on loopback): bounded reads, malformed
//! messages, and Kafka → Kafka with exactly-once through checkpoints.

use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_sql::SqlSession;
use weir_tests::KafkaBroker;

/// `n` orders as JSON, spread over `partitions` partitions.
fn orders(n: i64, partitions: i32) -> Vec<weir_tests::Produced> {
    (0..n)
        .map(|i| {
            (
                (i % i64::from(partitions)) as i32,
                Some(format!("{{\"id\":{i}}}").into_bytes()),
                format!(
                    "{{\"id\":{i},\"customer\":\"c{}\",\"amount\":{}}}",
                    i % 7,
                    i * 10
                )
                .into_bytes(),
            )
        })
        .collect()
}

fn table(bootstrap: &str, topic: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE orders (id BIGINT, customer STRING, amount BIGINT) WITH (
  'connector' = 'kafka', 'topic' = '{topic}',
  'properties.bootstrap.servers' = '{bootstrap}',
  'scan.startup.mode' = 'earliest-offset', 'format' = 'json'{extra});"
    )
}

/// Run `script` (its last statement a query) in this process at
/// parallelism 2; the first column of every row, sorted.
fn query(script: &str) -> Result<Vec<i64>, String> {
    let mut s = SqlSession::new();
    s.execute_script(script).map_err(|e| e.to_string())?;
    let env = weir_worker::local_environment().map_err(|e| e.to_string())?;
    env.set_parallelism(2);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .map_err(|e| e.to_string())?;
    env.execute("query").map_err(|e| e.to_string())?;
    let mut got: Vec<i64> = rows
        .batches()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    got.sort_unstable();
    Ok(got)
}

#[test]
fn a_bounded_read_gives_every_message_once() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("orders", 3);
    kafka.produce("orders", &orders(3000, 3));
    let bounded = ", 'scan.bounded.mode' = 'latest-offset'";
    let got = query(&format!(
        "{}\nSELECT id FROM orders;",
        table(&kafka.bootstrap(), "orders", bounded)
    ))
    .unwrap();
    assert_eq!(got, (0..3000).collect::<Vec<i64>>());
    // A filter and an aggregate over the same topic, in batch mode.
    let got = query(&format!(
        "SET 'execution.runtime-mode' = 'batch';\n{}\n\
         SELECT COUNT(*) FROM orders WHERE customer = 'c3';",
        table(&kafka.bootstrap(), "orders", bounded)
    ))
    .unwrap();
    assert_eq!(got, vec![(0..3000).filter(|i| i % 7 == 3).count() as i64]);
    // Specific offsets: partition 0 from offset 990 (its 1000 messages are
    // ids 0, 3, 6, …), the others from the start.
    let got = query(&format!(
        "{}\nSELECT id FROM orders;",
        table(
            &kafka.bootstrap(),
            "orders",
            ", 'scan.bounded.mode' = 'latest-offset', \
             'scan.startup.mode' = 'specific-offsets', \
             'scan.startup.specific-offsets' = 'partition:0,offset:990'"
        )
        .replace("'scan.startup.mode' = 'earliest-offset', ", "")
    ))
    .unwrap();
    let want: Vec<i64> = (0..3000).filter(|i| i % 3 != 0 || *i >= 2970).collect();
    assert_eq!(got, want);
}

#[test]
fn a_malformed_message_names_its_partition_and_offset() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("bad", 2);
    let mut messages = orders(10, 2);
    messages[7].2 = b"{\"id\": 7, \"customer\": oops}".to_vec();
    kafka.produce("bad", &messages);
    let e = query(&format!(
        "{}\nSELECT id FROM orders;",
        table(
            &kafka.bootstrap(),
            "bad",
            ", 'scan.bounded.mode' = 'latest-offset'"
        )
    ))
    .unwrap_err();
    // Message 7 went to partition 1 as its fourth message: offset 3.
    assert!(e.contains("topic 'bad' partition 1 offset 3"), "{e}");
    // With ignore-parse-errors it is skipped.
    let got = query(&format!(
        "{}\nSELECT id FROM orders;",
        table(
            &kafka.bootstrap(),
            "bad",
            ", 'scan.bounded.mode' = 'latest-offset', 'json.ignore-parse-errors' = 'true'"
        )
    ))
    .unwrap();
    assert_eq!(got, vec![0, 1, 2, 3, 4, 5, 6, 8, 9]);
}

#[test]
fn kafka_to_kafka_exactly_once_is_read_committed_once() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("in", 3);
    kafka.create_topic("out", 2);
    kafka.produce("in", &orders(5000, 3));
    let tmp = tempfile::tempdir().unwrap();
    let script = format!(
        "SET 'execution.checkpointing.interval' = '200 ms';
SET 'execution.checkpointing.dir' = '{chk}';
{src}
CREATE TABLE big (id BIGINT, customer STRING, amount BIGINT) WITH (
  'connector' = 'kafka', 'topic' = 'out',
  'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json',
  'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'big',
  'key.format' = 'json', 'key.fields' = 'id');
INSERT INTO big SELECT id, customer, amount FROM orders WHERE amount >= 20000;",
        chk = tmp.path().join("chk").display(),
        src = table(
            &kafka.bootstrap(),
            "in",
            ", 'scan.bounded.mode' = 'latest-offset'"
        ),
        bootstrap = kafka.bootstrap(),
    );
    let mut s = SqlSession::new();
    s.execute_script(&script).unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    s.build_with(&env, &|| unreachable!("no query")).unwrap();
    env.execute("kafka to kafka").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut ids: Vec<i64> = kafka
        .consume_all("out", true)
        .iter()
        .map(|(_, _, key, payload)| {
            let v: serde_json::Value = serde_json::from_slice(payload).unwrap();
            let k: serde_json::Value = serde_json::from_slice(key.as_ref().unwrap()).unwrap();
            assert_eq!(k["id"], v["id"]);
            v["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (2000..5000).collect::<Vec<i64>>());
}
