//! Kafka tables and messages shared by the Kafka test binaries.

/// `n` orders as JSON, spread over `partitions` partitions.
pub fn orders(n: i64, partitions: i32) -> Vec<weir_tests::Produced> {
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

pub fn table(bootstrap: &str, topic: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE orders (id BIGINT, customer STRING, amount BIGINT) WITH (
  'connector' = 'kafka', 'topic' = '{topic}',
  'properties.bootstrap.servers' = '{bootstrap}',
  'scan.startup.mode' = 'earliest-offset', 'format' = 'json'{extra});"
    )
}
