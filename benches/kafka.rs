//! Kafka source and sink throughput, side by side with a bare `rdkafka`
//! consumer reading the same topic (the client's own limit).
//!
//! ```text
//! taskset -c 0 cargo bench -p weir-benches --bench kafka   # one core
//! ```
//!
//! A topic of `WEIR_BENCH_MESSAGES` (default 1,000,000) 100-byte JSON
//! messages over 24 partitions is written once into librdkafka's mock
//! cluster, in this process (the broker's threads share the core with
//! whatever reads, alike for every reader). Then, each read from the start
//! to the end offsets, at parallelism 1:
//!
//! - bare consumer: `BaseConsumer` polling every message, touching its
//!   payload;
//! - (a0) Weir: kafka (`raw`: each payload a STRING) → blackhole — the
//!   source's own cost, no decoding;
//! - (a) Weir: kafka (`json`) → blackhole (the source and JSON decoding);
//! - (b) Weir: kafka → filter (a tenth) → kafka (at-least-once);
//! - (c) Weir: kafka → 1 s tumbling count per key (100 keys) → blackhole.
//!
//! Prints messages/s (wall clock), messages per CPU-second of the process
//! (user + system from /proc/self/stat) and each figure's ratio to the
//! bare consumer measured in the same run. Best of 3.

use std::time::{Duration, Instant};

use mimalloc::MiMalloc;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
use weir_sql::SqlSession;

#[path = "cpu.rs"]
mod cpu;
use cpu::cpu_seconds;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// The mock cluster keeps about 5 MB a partition (older messages are
/// dropped, as retention would): enough partitions to hold the topic.
const PARTITIONS: i32 = 24;

/// Client properties both the bare consumer and Weir's source get
/// (`properties.*` on the Weir tables), from `WEIR_BENCH_CONSUMER`
/// (`key=value,…`). By default `fetch.queue.backoff.ms=10`, which Weir's
/// source sets when not given: librdkafka's own default (1 s) stalls a
/// reader that drains its queue as fast as these do.
static CONSUMER: std::sync::LazyLock<Vec<(&'static str, &'static str)>> =
    std::sync::LazyLock::new(|| {
        let spec: &'static str = Box::leak(
            std::env::var("WEIR_BENCH_CONSUMER")
                .unwrap_or_else(|_| "fetch.queue.backoff.ms=10".into())
                .into_boxed_str(),
        );
        spec.split(',')
            .filter_map(|kv| kv.split_once('='))
            .collect()
    });

/// Message `i`: 100 bytes of JSON.
fn message(i: u64) -> Vec<u8> {
    let ts = 1_700_000_000_000u64 + i / 10;
    let head = format!(
        "{{\"id\":{i},\"customer\":\"c{:03}\",\"amount\":{},\"ts\":{ts},\"note\":\"",
        i % 100,
        i % 1000
    );
    let pad = 100usize.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad)).into_bytes()
}

fn produce(bootstrap: &str, topic: &str, n: u64) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "20")
        .set("batch.num.messages", "2000")
        .create()
        .expect("producer");
    for i in 0..n {
        let payload = message(i);
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
            .payload(payload.as_slice())
            .partition((i % PARTITIONS as u64) as i32);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    producer.poll(Duration::from_millis(5));
                    record = r;
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    let written: i64 = (0..PARTITIONS)
        .map(|p| {
            producer
                .client()
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .sum();
    assert_eq!(written, n as i64, "messages lost while writing the topic");
}

/// The messages the topic holds now (what every reader reads).
fn retained(bootstrap: &str, topic: &str) -> u64 {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("consumer");
    (0..PARTITIONS)
        .map(|p| {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("watermarks");
            (high - low) as u64
        })
        .sum()
}

/// The bare client: every message polled, its payload length summed.
fn bare_consumer(bootstrap: &str, topic: &str, n: u64) -> u64 {
    let mut config = rdkafka::ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-bare")
        .set("enable.auto.commit", "false");
    for (k, v) in CONSUMER.iter() {
        config.set(*k, *v);
    }
    let consumer: BaseConsumer = config.create().expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let (mut seen, mut bytes) = (0u64, 0u64);
    let mut quiet = Instant::now();
    while seen < n {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                bytes += m.payload().map_or(0, |p| p.len() as u64);
                seen += 1;
                quiet = Instant::now();
            }
            Some(Err(e)) => panic!("bare consumer: {e}"),
            None => assert!(
                quiet.elapsed() < Duration::from_secs(30),
                "bare consumer: nothing for 30 s after {seen} of {n} messages"
            ),
        }
    }
    bytes
}

fn weir_job(script: &str) {
    let mut s = SqlSession::new();
    s.execute_script(script).expect("script");
    let env = weir_worker::local_environment().expect("config");
    env.set_parallelism(1);
    s.build_with(&env, &|| unreachable!("no query"))
        .expect("plan");
    env.execute("kafka bench").expect("run");
}

/// Best of 3: (seconds, CPU seconds).
fn measure(f: &dyn Fn()) -> (f64, f64) {
    let mut best = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let cpu0 = cpu_seconds();
        let t = Instant::now();
        f();
        let wall = t.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        if wall < best.0 {
            best = (wall, cpu);
        }
    }
    best
}

fn main() {
    let n: u64 = std::env::var("WEIR_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let cluster = MockCluster::<'static, DefaultProducerContext>::new(1).expect("mock cluster");
    let b = cluster.bootstrap_servers();
    cluster.create_topic("in", PARTITIONS, 1).expect("topic");
    cluster.create_topic("out", PARTITIONS, 1).expect("topic");
    let t = Instant::now();
    produce(&b, "in", n);
    let written = n;
    let n = retained(&b, "in");
    println!(
        "wrote {written} messages of 100 bytes over {PARTITIONS} partitions in {:.1} s; \
         the topic holds {n}",
        t.elapsed().as_secs_f64()
    );
    let props: String = CONSUMER
        .iter()
        .map(|(k, v)| format!(", 'properties.{k}' = '{v}'"))
        .collect();
    let with = format!(
        "WITH ('connector' = 'kafka', 'topic' = 'in', 'properties.bootstrap.servers' = '{b}'{props},
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  'format' = 'json')"
    );
    let source = format!(
        "CREATE TABLE src (id BIGINT, customer STRING, amount BIGINT, ts BIGINT, note STRING)
 {with};"
    );
    let timed = format!(
        "CREATE TABLE src (id BIGINT, customer STRING, amount BIGINT, ts BIGINT, note STRING,
  rowtime AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rowtime AS rowtime - INTERVAL '1' SECOND)
 {with};"
    );
    let only = std::env::var("WEIR_BENCH_ONLY").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || name.contains(only.as_str());
    let bare = measure(&|| {
        bare_consumer(&b, "in", n);
    });
    let report = |name: &str, f: &dyn Fn()| {
        if !wanted(name) {
            return;
        }
        let (wall, cpu) = measure(f);
        let rate = n as f64 / wall;
        let per_cpu = n as f64 / cpu.max(1e-9);
        println!(
            "{name:<52} {:>6.2} M msg/s   {:>6.2} M msg/CPU-s   {:>5.0}% of bare (per CPU-s {:>4.0}%)",
            rate / 1e6,
            per_cpu / 1e6,
            100.0 * bare.0 / wall,
            100.0 * per_cpu / (n as f64 / bare.1.max(1e-9)),
        );
    };
    println!(
        "{:<52} {:>6.2} M msg/s   {:>6.2} M msg/CPU-s",
        "bare rdkafka consumer",
        n as f64 / bare.0 / 1e6,
        n as f64 / bare.1.max(1e-9) / 1e6
    );
    report("(a0) kafka (raw: payload as STRING) -> blackhole", &|| {
        weir_job(&format!(
            "CREATE TABLE raw_src (line STRING) WITH ('connector' = 'kafka', 'topic' = 'in',
  'properties.bootstrap.servers' = '{b}'{props}, 'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'latest-offset', 'format' = 'raw');
CREATE TABLE bh (line STRING) WITH ('connector' = 'blackhole');
INSERT INTO bh SELECT line FROM raw_src;"
        ))
    });
    report("(a) kafka -> blackhole", &|| {
        weir_job(&format!(
            "{source}
CREATE TABLE bh (id BIGINT, customer STRING, amount BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO bh SELECT id, customer, amount FROM src;"
        ))
    });
    report("(b) kafka -> filter (1/10) -> kafka", &|| {
        weir_job(&format!(
            "{source}
CREATE TABLE dst (id BIGINT, customer STRING, amount BIGINT) WITH ('connector' = 'kafka',
  'topic' = 'out', 'properties.bootstrap.servers' = '{b}', 'format' = 'json');
INSERT INTO dst SELECT id, customer, amount FROM src WHERE amount < 100;"
        ))
    });
    report(
        "(c) kafka -> 1 s tumbling count per key -> blackhole",
        &|| {
            weir_job(&format!(
                "{timed}
CREATE TABLE bh (customer STRING, window_start TIMESTAMP_LTZ(3), n BIGINT)
 WITH ('connector' = 'blackhole');
INSERT INTO bh SELECT customer, window_start, COUNT(*) FROM
  TABLE(TUMBLE(TABLE src, DESCRIPTOR(rowtime), INTERVAL '1' SECOND))
  GROUP BY customer, window_start, window_end;"
            ))
        },
    );
}
