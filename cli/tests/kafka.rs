//! The `kafka` connector against a Kafka-protocol broker the test starts
//! (librdkafka's mock cluster on loopback): bounded reads, malformed
//! messages, and Kafka → Kafka with exactly-once through checkpoints.

use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_sql::SqlSession;
use weir_tests::KafkaBroker;

mod common;

use common::kafka::{orders, table};

/// Run `script` (its last statement a query) in this process at
/// parallelism 2; the first column of every row, sorted.
fn query(script: &str) -> Result<Vec<i64>, String> {
    let mut got: Vec<i64> = common::run_sql(script, 2)?
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

/// Orders with event times: order `i` at `base + i * 2` ms, so a one-second
/// window holds 500 orders; customer `i % 5`.
fn timed_orders(range: std::ops::Range<i64>, partitions: i32) -> Vec<weir_tests::Produced> {
    let base = 1_700_000_000_000i64;
    range
        .map(|i| {
            let ts = chrono::DateTime::from_timestamp_millis(base + i * 2)
                .unwrap()
                .format("%Y-%m-%d %H:%M:%S%.3f");
            (
                (i % i64::from(partitions)) as i32,
                None,
                format!("{{\"id\":{i},\"customer\":\"c{}\",\"ts\":\"{ts}\"}}", i % 5).into_bytes(),
            )
        })
        .collect()
}

/// A streaming job on two worker processes reads a topic as it is written,
/// counts per customer in one-second tumbling windows and writes the counts
/// to Kafka exactly once; a worker is killed with `kill -9` after two
/// checkpoints. Read with `read_committed`, the output holds every window
/// of every customer once, with the count a failure-free run gives.
#[test]
fn a_killed_worker_under_kafka_to_kafka_leaves_each_window_once() {
    use std::time::Instant;
    const ROWS: i64 = 12_000;
    const PARTITIONS: i32 = 3;
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("clicks", PARTITIONS);
    kafka.create_topic("counts", 2);
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = common::Cluster::start(2, 2, None);
    let ends: Vec<String> = (0..PARTITIONS)
        .map(|p| format!("partition:{p},offset:{}", ROWS / i64::from(PARTITIONS)))
        .collect();
    let script = format!(
        "SET 'parallelism.default' = '2';
SET 'execution.checkpointing.interval' = '300 ms';
SET 'execution.checkpointing.dir' = '{chk}';
CREATE TABLE clicks (id BIGINT, customer STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '0.1' SECOND) WITH (
  'connector' = 'kafka', 'topic' = 'clicks', 'properties.bootstrap.servers' = '{b}',
  'scan.startup.mode' = 'earliest-offset', 'format' = 'json',
  'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = '{ends}');
CREATE TABLE counts (customer STRING, window_start TIMESTAMP(3), n BIGINT) WITH (
  'connector' = 'kafka', 'topic' = 'counts', 'properties.bootstrap.servers' = '{b}',
  'format' = 'json', 'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = 'counts');
INSERT INTO counts SELECT customer, window_start, COUNT(*) FROM
  TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' SECOND))
  GROUP BY customer, window_start, window_end;",
        chk = tmp.path().join("chk").display(),
        b = kafka.bootstrap(),
        ends = ends.join(";"),
    );
    let file = tmp.path().join("job.sql");
    std::fs::write(&file, &script).unwrap();
    let o = cluster.cli(&["submit", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let id = String::from_utf8(o.stdout).unwrap().trim().to_string();
    // Write the topic over about three seconds; kill a worker once two
    // checkpoints completed.
    let mut killed = false;
    for chunk in 0..30 {
        let from = chunk * ROWS / 30;
        kafka.produce("clicks", &timed_orders(from..from + ROWS / 30, PARTITIONS));
        std::thread::sleep(Duration::from_millis(100));
        if !killed {
            let (_, d) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
            if d["checkpoints"].as_array().map_or(0, Vec::len) >= 2 {
                let worker = &mut cluster.procs.0[2];
                worker.kill().unwrap();
                worker.wait().unwrap();
                killed = true;
            }
        }
    }
    assert!(killed, "no two checkpoints while the topic was written");
    let deadline = Instant::now() + Duration::from_secs(120);
    let d = loop {
        let (_, d) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
        if matches!(
            d["status"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        ) {
            break d;
        }
        assert!(Instant::now() < deadline, "the job did not finish: {d:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(d["status"], "FINISHED", "{d:#}");
    assert!(d["restarts"].as_u64().unwrap() >= 1, "{d:#}");
    let mut got: Vec<(String, String, i64)> = kafka
        .consume_all("counts", true)
        .iter()
        .map(|(_, _, _, payload)| {
            let v: serde_json::Value = serde_json::from_slice(payload).unwrap();
            (
                v["customer"].as_str().unwrap().to_string(),
                v["window_start"].as_str().unwrap().to_string(),
                v["n"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    // The failure-free answer, computed here.
    let mut want = std::collections::BTreeMap::new();
    for i in 0..ROWS {
        let ts = 1_700_000_000_000i64 + i * 2;
        // Whole seconds, written as Flink writes them (no fraction).
        let start = chrono::DateTime::from_timestamp_millis(ts - ts.rem_euclid(1000))
            .unwrap()
            .format("%Y-%m-%d %H:%M:%S")
            .to_string();
        *want.entry((format!("c{}", i % 5), start)).or_insert(0i64) += 1;
    }
    let want: Vec<(String, String, i64)> = want.into_iter().map(|((c, w), n)| (c, w, n)).collect();
    let extra: Vec<_> = got.iter().filter(|g| !want.contains(g)).collect();
    let missing: Vec<_> = want.iter().filter(|w| !got.contains(w)).collect();
    assert_eq!(
        got.len(),
        want.len(),
        "windows written more or less than once: unexpected {extra:?}, missing {missing:?}"
    );
    assert_eq!(got, want);
}

/// Rows of a query with their row kinds (`+I[…]`), in arrival order.
fn changelog(script: &str) -> Vec<String> {
    let mut s = SqlSession::new();
    s.execute_script(script).unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(1);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .unwrap();
    env.execute("changelog").unwrap();
    let mut out = vec![];
    for b in rows.batches() {
        let n = b.num_columns();
        for r in 0..b.num_rows() {
            let values: Vec<String> = (0..n - 1)
                .map(|c| arrow::util::display::array_value_to_string(b.column(c), r).unwrap())
                .collect();
            let kinds = weir_core::changelog::row_kinds(&b).unwrap();
            let kind = weir_core::changelog::row_kind_at(kinds, r).unwrap();
            out.push(format!("{kind}[{}]", values.join(", ")));
        }
    }
    out
}

fn upsert_table(name: &str, topic: &str, bootstrap: &str, columns: &str, key: &str) -> String {
    format!(
        "CREATE TABLE {name} ({columns}, PRIMARY KEY ({key}) NOT ENFORCED) WITH (
  'connector' = 'upsert-kafka', 'topic' = '{topic}',
  'properties.bootstrap.servers' = '{bootstrap}',
  'key.format' = 'json', 'value.format' = 'json',
  'scan.bounded.mode' = 'latest-offset');"
    )
}

#[test]
fn an_upsert_topic_reads_as_a_changelog_per_key() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("users", 1);
    let msg = |k: i64, v: Option<&str>| {
        (
            0,
            Some(format!("{{\"id\":{k}}}").into_bytes()),
            v.map(|v| format!("{{\"id\":{k},\"name\":\"{v}\"}}").into_bytes()),
        )
    };
    let messages = [
        msg(1, Some("ann")),
        msg(2, Some("bob")),
        msg(1, Some("anna")),
        msg(2, None),
        msg(3, Some("cy")),
        msg(9, None),
    ];
    // The helper produces payloads; a tombstone is an empty one here, so
    // produce through the broker helper with explicit tombstones.
    kafka.produce_with_tombstones("users", &messages);
    let got = changelog(&format!(
        "{}\nSELECT id, name FROM users;",
        upsert_table(
            "users",
            "users",
            &kafka.bootstrap(),
            "id BIGINT, name STRING",
            "id"
        )
    ));
    assert_eq!(
        got,
        [
            "+I[1, ann]",
            "+I[2, bob]",
            "-U[1, ann]",
            "+U[1, anna]",
            "-D[2, bob]",
            "+I[3, cy]"
        ]
    );
}

#[test]
fn an_updating_group_by_round_trips_through_upsert_kafka() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("in", 3);
    kafka.create_topic("totals", 2);
    kafka.produce("in", &orders(2100, 3));
    let b = kafka.bootstrap();
    let mut s = SqlSession::new();
    s.execute_script(&format!(
        "{}\n{}\nINSERT INTO totals SELECT customer, COUNT(*), SUM(amount) FROM orders GROUP BY customer;",
        table(&b, "in", ", 'scan.bounded.mode' = 'latest-offset'"),
        upsert_table("totals", "totals", &b, "customer STRING, n BIGINT, total BIGINT", "customer"),
    ))
    .unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    s.build_with(&env, &|| unreachable!("no query")).unwrap();
    env.execute("upserts").unwrap();
    // The topic: keyed upserts, the last one per key the final total.
    let mut last = std::collections::BTreeMap::new();
    for (_, _, key, payload) in kafka.consume_all("totals", false) {
        let k: serde_json::Value = serde_json::from_slice(&key.unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(k["customer"], v["customer"]);
        last.insert(
            k["customer"].as_str().unwrap().to_string(),
            (v["n"].as_i64().unwrap(), v["total"].as_i64().unwrap()),
        );
    }
    let mut want = std::collections::BTreeMap::new();
    for i in 0..2100i64 {
        let e = want.entry(format!("c{}", i % 7)).or_insert((0i64, 0i64));
        e.0 += 1;
        e.1 += i * 10;
    }
    assert_eq!(last, want);
    // Read back as a table: the changelog folds to the same totals.
    let rows = changelog(&format!(
        "{}\nSELECT customer, n, total FROM totals;",
        upsert_table(
            "totals",
            "totals",
            &b,
            "customer STRING, n BIGINT, total BIGINT",
            "customer"
        ),
    ));
    let mut state = std::collections::BTreeMap::new();
    for r in rows {
        let (kind, rest) = r.split_at(2);
        let fields: Vec<&str> = rest.trim_matches(['[', ']']).split(", ").collect();
        let row = (
            fields[1].parse::<i64>().unwrap(),
            fields[2].parse::<i64>().unwrap(),
        );
        match kind {
            "+I" | "+U" => {
                state.insert(fields[0].to_string(), row);
            }
            _ => {
                state.remove(fields[0]);
            }
        }
    }
    assert_eq!(state, want);
}

/// The broker goes down for two seconds while a checkpointed job reads and
/// writes through it: the job waits and resumes, and the output holds every
/// row once.
/// Clicks at event times `times` (ms after a base) into `partition`.
fn clicks_at(partition: i32, times: impl Iterator<Item = i64>) -> Vec<weir_tests::Produced> {
    times
        .map(|t| {
            let ts = chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + t)
                .unwrap()
                .format("%Y-%m-%d %H:%M:%S%.3f");
            (
                partition,
                None,
                format!("{{\"id\":{t},\"customer\":\"c\",\"ts\":\"{ts}\"}}").into_bytes(),
            )
        })
        .collect()
}

/// A streaming window count over topic `topic` at `parallelism`, running;
/// its rows arrive in the returned handle.
fn window_counts(
    kafka: &KafkaBroker,
    topic: &str,
    parallelism: usize,
    extra: &str,
) -> (Box<dyn weir_core::graph::JobClient>, CollectHandle) {
    let b = kafka.bootstrap();
    let mut s = SqlSession::new();
    s.execute_script(&format!(
        "CREATE TABLE clicks (id BIGINT, customer STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts) WITH (
  'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{b}',
  'scan.startup.mode' = 'earliest-offset', 'format' = 'json'{extra});
SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' SECOND))
  GROUP BY window_start, window_end;"
    ))
    .unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism);
    env.configure(|c| c.watermark_interval = Duration::from_millis(20));
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .unwrap();
    (env.execute_async("windows").unwrap(), rows)
}

fn wait_rows(rows: &CollectHandle, n: usize, why: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while rows.num_rows() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{why}: {} rows",
            rows.num_rows()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Windows fire by the slowest partition's watermark, also when one
/// subtask reads both the fast and the slow partition.
#[test]
fn watermarks_follow_the_slowest_partition() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("clicks", 3);
    // At parallelism 2, partitions 0 and 2 go to the same subtask.
    assert_eq!(
        weir_kafka_owner("clicks", 0, 2),
        weir_kafka_owner("clicks", 2, 2)
    );
    let (job, rows) = window_counts(&kafka, "clicks", 2, "");
    // Partitions 0 and 1 run ahead to 9.5 s; partition 2 only to 1.5 s.
    kafka.produce("clicks", &clicks_at(0, (0..20).map(|i| i * 500)));
    kafka.produce("clicks", &clicks_at(1, (0..20).map(|i| i * 500)));
    kafka.produce("clicks", &clicks_at(2, (0..4).map(|i| i * 500)));
    wait_rows(&rows, 1, "no window fired");
    // Only the first window (to 1 s) is past the slow partition's
    // watermark (1.5 s); give later windows time to fire wrongly.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(rows.num_rows(), 1, "a window fired past the slow partition");
    // The slow partition catches up: the windows to 9 s fire.
    kafka.produce("clicks", &clicks_at(2, (4..20).map(|i| i * 500)));
    wait_rows(&rows, 9, "the windows did not fire");
    job.cancel();
    let _ = job.wait();
    let counts: Vec<i64> = rows
        .batches()
        .iter()
        .flat_map(|b| b.column(1).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert!(counts.iter().all(|&n| n == 6), "{counts:?}");
}

/// A subtask that reads no partition is idle: it does not hold back the
/// windows of the others.
#[test]
fn a_subtask_without_partitions_does_not_hold_windows_back() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("one", 1);
    let (job, rows) = window_counts(&kafka, "one", 3, "");
    kafka.produce("one", &clicks_at(0, (0..20).map(|i| i * 500)));
    wait_rows(&rows, 9, "an empty subtask held the windows back");
    job.cancel();
    let _ = job.wait();
}

/// A partition that stops receiving data is idle after the table's
/// `scan.watermark.idle-timeout`: the other partitions' windows fire.
#[test]
fn an_idle_partition_stops_holding_windows_back() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("quiet", 2);
    // Partition 1 stops at 1.5 s; partition 0 goes on to 9.5 s. Both are
    // written before the job starts, so both are read before the timeout.
    kafka.produce("quiet", &clicks_at(1, (0..4).map(|i| i * 500)));
    kafka.produce("quiet", &clicks_at(0, (0..20).map(|i| i * 500)));
    let (job, rows) = window_counts(
        &kafka,
        "quiet",
        1,
        ", 'scan.watermark.idle-timeout' = '1 s'",
    );
    wait_rows(&rows, 9, "an idle partition held the windows back");
    job.cancel();
    let _ = job.wait();
    let mut counts: Vec<(i64, i64)> = rows
        .batches()
        .iter()
        .flat_map(|b| {
            let start = b
                .column(0)
                .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
                .clone();
            let n = b.column(1).as_primitive::<Int64Type>().clone();
            (0..b.num_rows()).map(move |r| (start.value(r), n.value(r)))
        })
        .collect();
    counts.sort_unstable();
    // Each second has two clicks of partition 0; the first two seconds also
    // two of partition 1, from before it went quiet.
    let n: Vec<i64> = counts.iter().map(|c| c.1).take(9).collect();
    assert_eq!(n, vec![4, 4, 2, 2, 2, 2, 2, 2, 2]);
}

/// The subtask Flink's rule gives a partition (as the source assigns).
fn weir_kafka_owner(topic: &str, partition: i32, parallelism: usize) -> usize {
    let h = topic
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    let start = i64::from(h.wrapping_mul(31) & 0x7FFF_FFFF) % parallelism as i64;
    ((start + i64::from(partition)) % parallelism as i64) as usize
}

#[test]
fn a_kafka_source_reports_how_far_behind_the_latest_offsets_it_is() {
    let kafka = KafkaBroker::start(1);
    kafka.create_topic("orders", 2);
    kafka.produce("orders", &orders(20_000, 2));
    let cluster = common::Cluster::start(1, 2, None);
    // A slow sink holds the source back: it cannot read far ahead.
    let script = format!(
        "{}\nCREATE TABLE slow (id BIGINT) WITH ('connector' = 'blackhole', \
         'rows-per-second' = '2000');\nINSERT INTO slow SELECT id FROM orders;",
        table(&kafka.bootstrap(), "orders", "")
    );
    let (status, reply) = cluster.rest("POST", "/v1/sql", &script);
    assert_eq!(status, 201, "{reply}");
    let id = reply["job_id"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let pending = loop {
        let (_, m) = cluster.rest(
            "GET",
            &format!("/v1/jobs/{id}/vertices/0/subtasks/metrics?get=pendingRecords"),
            "",
        );
        if let Some(v) = m[0]["sum"].as_f64().filter(|v| *v > 0.0) {
            break v;
        }
        if std::time::Instant::now() >= deadline {
            let (_, job) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
            panic!("no pendingRecords: {m}; the job: {job:#}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // Behind, and by no more than the topic holds.
    assert!(pending <= 20_000.0, "{pending}");
    let (status, _) = cluster.rest("POST", &format!("/v1/jobs/{id}/cancel"), "");
    assert_eq!(status, 202);
}
