//! Kafka source and sink throughput, side by side with a bare `rdkafka`
//! consumer reading the same topic (the client's own limit).
//!
//! ```text
//! taskset -c 0 cargo bench -p weir-benches --bench kafka   # one core
//! ```
//!
//! A topic of `WEIR_BENCH_MESSAGES` (default 2,000,000) 100-byte JSON
//! messages over 4 partitions is written once into librdkafka's mock
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

const PARTITIONS: i32 = 4;

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
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
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
}

/// The bare client: every message polled, its payload length summed.
fn bare_consumer(bootstrap: &str, topic: &str, n: u64) -> u64 {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-bare")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let (mut seen, mut bytes) = (0u64, 0u64);
    while seen < n {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            bytes += m.payload().map_or(0, |p| p.len() as u64);
            seen += 1;
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
        .unwrap_or(2_000_000);
    let cluster = MockCluster::<'static, DefaultProducerContext>::new(1).expect("mock cluster");
    let b = cluster.bootstrap_servers();
    cluster.create_topic("in", PARTITIONS, 1).expect("topic");
    cluster.create_topic("out", PARTITIONS, 1).expect("topic");
    let t = Instant::now();
    produce(&b, "in", n);
    println!(
        "wrote {n} messages of 100 bytes over {PARTITIONS} partitions in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let source = format!(
        "CREATE TABLE src (id BIGINT, customer STRING, amount BIGINT, ts BIGINT, note STRING,
  rowtime AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rowtime AS rowtime - INTERVAL '1' SECOND)
 WITH ('connector' = 'kafka', 'topic' = 'in', 'properties.bootstrap.servers' = '{b}',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  'format' = 'json');"
    );
    let bare = measure(&|| {
        bare_consumer(&b, "in", n);
    });
    let report = |name: &str, (wall, cpu): (f64, f64)| {
        let rate = n as f64 / wall;
        let per_cpu = n as f64 / cpu.max(1e-9);
        println!(
            "{name:<48} {:>6.2} M msg/s   {:>6.2} M msg/CPU-s   {:>5.0}% of bare (per CPU-s {:>4.0}%)",
            rate / 1e6,
            per_cpu / 1e6,
            100.0 * bare.0 / wall,
            100.0 * per_cpu / (n as f64 / bare.1.max(1e-9)),
        );
    };
    report("bare rdkafka consumer", bare);
    report(
        "(a0) kafka (raw: payload as STRING) -> blackhole",
        measure(&|| {
            weir_job(&format!(
                "CREATE TABLE raw_src (line STRING) WITH ('connector' = 'kafka', 'topic' = 'in',
  'properties.bootstrap.servers' = '{b}', 'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'latest-offset', 'format' = 'raw');
CREATE TABLE bh (line STRING) WITH ('connector' = 'blackhole');
INSERT INTO bh SELECT line FROM raw_src;"
            ))
        }),
    );
    report(
        "(a) kafka -> blackhole",
        measure(&|| {
            weir_job(&format!(
                "{source}
CREATE TABLE bh (id BIGINT, customer STRING, amount BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO bh SELECT id, customer, amount FROM src;"
            ))
        }),
    );
    report(
        "(b) kafka -> filter (1/10) -> kafka",
        measure(&|| {
            weir_job(&format!(
                "{source}
CREATE TABLE dst (id BIGINT, customer STRING, amount BIGINT) WITH ('connector' = 'kafka',
  'topic' = 'out', 'properties.bootstrap.servers' = '{b}', 'format' = 'json');
INSERT INTO dst SELECT id, customer, amount FROM src WHERE amount < 100;"
            ))
        }),
    );
    report(
        "(c) kafka -> 1 s tumbling count per key -> blackhole",
        measure(&|| {
            weir_job(&format!(
                "{source}
CREATE TABLE bh (customer STRING, window_start TIMESTAMP_LTZ(3), n BIGINT)
 WITH ('connector' = 'blackhole');
INSERT INTO bh SELECT customer, window_start, COUNT(*) FROM
  TABLE(TUMBLE(TABLE src, DESCRIPTOR(rowtime), INTERVAL '1' SECOND))
  GROUP BY customer, window_start, window_end;"
            ))
        }),
    );
}
