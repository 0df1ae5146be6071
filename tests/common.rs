//! Helpers shared by Weir's end-to-end tests.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::TryStreamExt;

/// Every row of `batches` rendered as text, sorted: a canonical form for
/// comparing results regardless of batch boundaries and subtask order.
pub fn sorted_rows(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for b in batches {
        let formatters: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = formatters.iter().map(|f| f.value(r).to_string()).collect();
            rows.push(cells.join("|"));
        }
    }
    rows.sort();
    rows
}

/// Schema of the (key, value, ts) test events.
pub fn event_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("value", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// A batch of (key, value, ts) events.
pub fn event_batch(rows: &[(i64, i64, i64)]) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
        Arc::new(TimestampMillisecondArray::from_iter_values(
            rows.iter().map(|r| r.2),
        )),
    ];
    RecordBatch::try_new(event_schema(), cols).unwrap()
}

/// The `FlightInfo` that `list_flights` gives for the sink `name`.
pub async fn listed(
    client: &mut arrow_flight::FlightClient,
    name: &str,
) -> arrow_flight::FlightInfo {
    let infos: Vec<arrow_flight::FlightInfo> = client
        .list_flights("")
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    infos
        .into_iter()
        .find(|i| {
            i.flight_descriptor
                .as_ref()
                .is_some_and(|d| d.path == [name])
        })
        .unwrap_or_else(|| panic!("the sink {name} is listed"))
}

/// Every batch `do_get` streams for `ticket`.
pub async fn read(
    client: &mut arrow_flight::FlightClient,
    ticket: arrow_flight::Ticket,
) -> Vec<RecordBatch> {
    client
        .do_get(ticket)
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
}

/// An S3-compatible server (moto) on loopback with one bucket, for the
/// `s3://` checkpoint tests; killed on drop. The `AWS_*` variables of this
/// process point at it, so jobs and child processes started afterwards use
/// it. Needs `WEIR_TEST_MOTO_SERVER` (set by `scripts/test.sh`).
pub struct S3Server(std::process::Child);

impl S3Server {
    /// Start the server and create `bucket`.
    pub fn start(bucket: &str) -> Self {
        use std::io::{Read, Write};
        use std::time::{Duration, Instant};
        let server = std::env::var("WEIR_TEST_MOTO_SERVER").expect(
            "WEIR_TEST_MOTO_SERVER must name a moto_server binary: run the tests with scripts/test.sh",
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let guard = S3Server(
            std::process::Command::new(server)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start moto_server"),
        );
        // Wait for it, then create the bucket (moto accepts unsigned requests).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                let sent = write!(
                    s,
                    "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let mut reply = String::new();
                if sent.is_ok() {
                    let _ = s.read_to_string(&mut reply);
                }
                if reply.starts_with("HTTP/1.1 200") {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: set before any job starts; the tests using the server are
        // the only readers of these variables in their test binary.
        unsafe {
            std::env::set_var("AWS_ENDPOINT", format!("http://127.0.0.1:{port}"));
            std::env::set_var("AWS_ALLOW_HTTP", "true");
            std::env::set_var("AWS_ACCESS_KEY_ID", "weir");
            std::env::set_var("AWS_SECRET_ACCESS_KEY", "weir-secret");
        }
        guard
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An Azure Blob Storage emulator (Azurite) on loopback with one
/// container, for the `az://` tests; killed on drop. The `AZURE_*`
/// variables of this process point at it (object_store's emulator mode,
/// Azurite's well-known development account). Needs `WEIR_TEST_AZURITE`
/// (the `azurite-blob` script, installed by `scripts/test.sh`).
pub struct BlobServer(std::process::Child);

/// Azurite's published development account key.
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

impl BlobServer {
    /// Start the emulator and create `container`.
    pub fn start(container: &str) -> Self {
        use base64::Engine;
        use std::io::{Read, Write};
        use std::time::{Duration, Instant};
        let server = std::env::var("WEIR_TEST_AZURITE").expect(
            "WEIR_TEST_AZURITE must name the azurite-blob script: run the tests with scripts/test.sh",
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let guard = BlobServer(
            std::process::Command::new(server)
                .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                .args(["--inMemoryPersistence", "--silent", "--disableTelemetry"])
                .arg("--skipApiVersionCheck")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start azurite-blob"),
        );
        // Create the container: the one request signed here (Shared Key).
        let engine = base64::engine::general_purpose::STANDARD;
        let key = ring::hmac::Key::new(
            ring::hmac::HMAC_SHA256,
            &engine.decode(AZURITE_KEY).unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                let date = chrono::Utc::now()
                    .format("%a, %d %b %Y %H:%M:%S GMT")
                    .to_string();
                let version = "2021-08-06";
                let to_sign = format!(
                    "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n\
                     /devstoreaccount1/devstoreaccount1/{container}\nrestype:container"
                );
                let signature = engine.encode(ring::hmac::sign(&key, to_sign.as_bytes()));
                // A server still starting may reset the connection: retry.
                let sent = write!(
                    s,
                    "PUT /devstoreaccount1/{container}?restype=container HTTP/1.1\r\n\
                     Host: 127.0.0.1:{port}\r\nx-ms-date: {date}\r\nx-ms-version: {version}\r\n\
                     Authorization: SharedKey devstoreaccount1:{signature}\r\n\
                     Content-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let mut reply = String::new();
                if sent.is_ok() {
                    let _ = s.read_to_string(&mut reply);
                }
                if reply.starts_with("HTTP/1.1 201") {
                    break;
                }
                assert!(
                    !reply.starts_with("HTTP/1.1 403"),
                    "Azurite refused the container request: {reply}"
                );
            }
            assert!(Instant::now() < deadline, "azurite-blob did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: set before any job starts; the tests using the emulator
        // are the only readers of these variables in their test binary.
        unsafe {
            std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
            std::env::set_var(
                "AZURITE_BLOB_STORAGE_URL",
                format!("http://127.0.0.1:{port}"),
            );
        }
        guard
    }
}

impl Drop for BlobServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A message to produce: (partition, key, payload).
pub type Produced = (i32, Option<Vec<u8>>, Vec<u8>);

/// A message to produce that may be a tombstone: (partition, key, payload).
pub type Upserted = (i32, Option<Vec<u8>>, Option<Vec<u8>>);

/// A message with its timestamp and headers: (partition, offset (ignored
/// when producing), timestamp ms, headers, payload).
pub type WithHeaders = (i32, i64, Option<i64>, Vec<(String, Vec<u8>)>, Vec<u8>);

/// A message read: (partition, offset, key, payload).
pub type Consumed = (i32, i64, Option<Vec<u8>>, Vec<u8>);

/// A Kafka-protocol broker on loopback: librdkafka's mock cluster, in this
/// process, reached over TCP by its bootstrap address (also by worker
/// processes this test starts). Transactions, consumer groups and offset
/// commits work; `broker_down`/`broker_up` inject faults.
pub struct KafkaBroker {
    /// The mock cluster.
    pub cluster: rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
}

impl KafkaBroker {
    /// A cluster of `brokers` brokers.
    pub fn start(brokers: i32) -> Self {
        Self {
            cluster: rdkafka::mocking::MockCluster::new(brokers).expect("a mock Kafka cluster"),
        }
    }

    /// `host:port,…` of its brokers.
    pub fn bootstrap(&self) -> String {
        self.cluster.bootstrap_servers()
    }

    /// Create `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.cluster.create_topic(topic, partitions, 1).unwrap();
    }

    /// Produce `(partition, key, payload)` messages and wait for them.
    pub fn produce(&self, topic: &str, messages: &[Produced]) {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .create()
            .unwrap();
        for (partition, key, payload) in messages {
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
                .payload(payload.as_slice())
                .partition(*partition);
            if let Some(k) = key {
                record = record.key(k.as_slice());
            }
            let mut record = record;
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        producer.poll(std::time::Duration::from_millis(10));
                        record = r;
                    }
                }
            }
        }
        producer.flush(std::time::Duration::from_secs(30)).unwrap();
    }

    /// Produce `(partition, key, payload or tombstone)` messages.
    pub fn produce_with_tombstones(&self, topic: &str, messages: &[Upserted]) {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .create()
            .unwrap();
        for (partition, key, payload) in messages {
            let mut record: BaseRecord<'_, [u8], [u8]> =
                BaseRecord::to(topic).partition(*partition);
            if let Some(k) = key {
                record = record.key(k.as_slice());
            }
            if let Some(p) = payload {
                record = record.payload(p.as_slice());
            }
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(std::time::Duration::from_secs(30)).unwrap();
    }

    /// Every message of `topic` now: `(partition, offset, key, payload)`,
    /// committed ones only when `read_committed`.
    pub fn consume_all(&self, topic: &str, read_committed: bool) -> Vec<Consumed> {
        use rdkafka::message::Message;
        let mut out = vec![];
        self.read_topic(topic, read_committed, |m| {
            out.push((
                m.partition(),
                m.offset(),
                m.key().map(<[u8]>::to_vec),
                m.payload().unwrap_or_default().to_vec(),
            ));
        });
        out
    }

    /// Every message of `topic` now with its timestamp (ms) and headers:
    /// `(partition, offset, timestamp, headers, payload)`.
    pub fn consume_with_headers(&self, topic: &str) -> Vec<WithHeaders> {
        use rdkafka::message::{Headers, Message};
        let mut out = vec![];
        self.read_topic(topic, false, |m| {
            let headers = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default();
            out.push((
                m.partition(),
                m.offset(),
                m.timestamp().to_millis(),
                headers,
                m.payload().unwrap_or_default().to_vec(),
            ));
        });
        out
    }

    /// Produce `(partition, timestamp ms, headers, payload)` messages.
    pub fn produce_with_headers(&self, topic: &str, messages: &[WithHeaders]) {
        use rdkafka::message::{Header, OwnedHeaders};
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .create()
            .unwrap();
        for (partition, _, ts, headers, payload) in messages {
            let mut h = OwnedHeaders::new();
            for (k, v) in headers {
                h = h.insert(Header {
                    key: k.as_str(),
                    value: Some(v.as_slice()),
                });
            }
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
                .payload(payload.as_slice())
                .partition(*partition)
                .headers(h);
            if let Some(ts) = ts {
                record = record.timestamp(*ts);
            }
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(std::time::Duration::from_secs(30)).unwrap();
    }

    fn read_topic(
        &self,
        topic: &str,
        read_committed: bool,
        mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
    ) {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("group.id", "weir-test-reader")
            .set("enable.auto.commit", "false")
            .set(
                "isolation.level",
                if read_committed {
                    "read_committed"
                } else {
                    "read_uncommitted"
                },
            )
            .create()
            .unwrap();
        let timeout = std::time::Duration::from_secs(10);
        let meta = consumer.fetch_metadata(Some(topic), timeout).unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        let mut ends = std::collections::BTreeMap::new();
        for p in meta.topics()[0].partitions() {
            let (_, high) = consumer.fetch_watermarks(topic, p.id(), timeout).unwrap();
            if high > 0 {
                ends.insert(p.id(), high);
                tpl.add_partition_offset(topic, p.id(), rdkafka::Offset::Beginning)
                    .unwrap();
            }
        }
        if ends.is_empty() {
            return;
        }
        consumer.assign(&tpl).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut done = std::collections::BTreeSet::new();
        while done.len() < ends.len() && std::time::Instant::now() < deadline {
            match consumer.poll(std::time::Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    each(&m);
                    // Transaction markers take offsets too: a partition is
                    // read when the position reaches its end.
                }
                Some(Err(e)) => panic!("consuming {topic}: {e}"),
                None => {}
            }
            if let Ok(position) = consumer.position() {
                for e in position.elements() {
                    if let rdkafka::Offset::Offset(o) = e.offset()
                        && ends.get(&e.partition()).is_some_and(|end| o >= *end)
                    {
                        done.insert(e.partition());
                    }
                }
            }
        }
    }
}
