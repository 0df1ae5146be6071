//! The Kafka source: each subtask reads the partitions Flink's rule gives
//! it, from the checkpointed offsets (or the startup mode), decoding the
//! payloads of a poll with the value format in one call.
//!
//! A partition belongs to subtask `(start(topic) + partition) mod p`, with
//! `start(topic) = (javaHash(topic) * 31 & 0x7FFFFFFF) mod p` — Flink's
//! `KafkaSourceEnumerator` — so the same partitions land on the same
//! subtasks as in Flink. The position (topic, partition, next offset) of
//! every partition a subtask reads is its checkpointed state; a restore at
//! another parallelism hands every subtask all positions and each keeps
//! its own. Offsets are committed to the group when a checkpoint
//! completes (for monitoring; recovery never reads them).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, Int32Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use weir_core::{Result, WeirError};
use weir_operators::{Source, SourcePoll};

use crate::plan::{Bounded, KafkaPlan, Startup};

mod decode;
use decode::Polled;

/// Whether a consumer error is the client reporting a broker it will
/// reconnect to (or the end of a partition): worth a log line, not a
/// failure — librdkafka keeps retrying.
pub(crate) fn transient(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::BrokerTransportFailure
                | C::AllBrokersDown
                | C::PartitionEOF
                | C::OperationTimedOut
                | C::RequestTimedOut
                | C::NetworkException
                | C::LeaderNotAvailable
                | C::NotLeaderForPartition
        )
    )
}

/// How long metadata and offset lookups may take.
const LOOKUP: Duration = Duration::from_secs(30);

/// Java's `String.hashCode`.
pub(crate) fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The subtask (of `parallelism`) that reads `partition` of `topic`.
pub(crate) fn owner(topic: &str, partition: i32, parallelism: usize) -> usize {
    let p = parallelism.max(1) as i64;
    let start = (i64::from(java_hash(topic).wrapping_mul(31) & 0x7FFF_FFFF)) % p;
    ((start + i64::from(partition)) % p) as usize
}

/// A client configuration from the table's properties.
pub(crate) fn client_config(plan: &KafkaPlan) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in &plan.properties {
        c.set(k, v);
    }
    c
}

/// upsert-kafka: a key's latest value, with the (topic, partition) it came from.
type Latest = (Arc<str>, i32, Vec<u8>);

/// Where a message comes from: (topic, partition, offset). The topic is
/// shared, so a message costs no allocation for it.
pub(crate) type Origin = (Arc<str>, i32, i64);

/// upsert-kafka: (key, value or tombstone, where it comes from).
type Change = (Vec<u8>, Option<Vec<u8>>, Origin);

/// A partition's next offset: ((topic, partition), offset).
type Position = ((String, i32), i64);

/// One partition this subtask reads.
#[derive(Debug, Clone)]
struct Partition {
    /// Its topic, shared by the origins of its messages.
    topic: Arc<str>,
    /// The next offset to emit.
    next: i64,
    /// Where a bounded read of it ends (exclusive).
    end: Option<i64>,
}

/// One subtask's reader of a Kafka table.
pub(crate) struct KafkaSource {
    plan: KafkaPlan,
    name: String,
    subtask: usize,
    parallelism: usize,
    batch_size: usize,
    consumer: Option<BaseConsumer>,
    partitions: BTreeMap<(String, i32), Partition>,
    /// Positions restored from a checkpoint, applied when partitions are
    /// assigned.
    restored: Option<BTreeMap<(String, i32), i64>>,
    next_discovery: Option<Instant>,
    /// Positions of checkpoints taken and not yet completed.
    pending: VecDeque<(u64, Vec<Position>)>,
    rows_schema: SchemaRef,
    skipped: u64,
    /// upsert-kafka: the latest value of every key read, with its
    /// partition (Flink's ChangelogNormalize, kept in the source: a key
    /// lives in one partition, so in one subtask).
    latest: Option<std::collections::HashMap<Vec<u8>, Latest>>,
    /// The partitions of the batch emitted last, as runs of rows (the
    /// task keeps a watermark per partition).
    last_runs: Option<Vec<(u64, usize)>>,
    /// How the value (and key) are decoded, found on the first poll.
    parts: Option<Arc<decode::Parts>>,
    /// Payload bytes of the last poll (to size the next one's buffer).
    last_bytes: usize,
    /// Records behind the partitions' latest offsets, as last asked, and
    /// when to ask again.
    lag: (Option<u64>, Option<Instant>),
}

impl KafkaSource {
    pub(crate) fn new(
        plan: KafkaPlan,
        name: String,
        subtask: usize,
        parallelism: usize,
        batch_size: usize,
    ) -> Self {
        let upsert = !plan.upsert_key.is_empty();
        let rows_schema = rows_schema(&plan);
        Self {
            latest: upsert.then(Default::default),
            last_runs: None,
            parts: None,
            last_bytes: 0,
            lag: (None, None),
            plan,
            name,
            subtask,
            parallelism,
            batch_size: batch_size.max(1),
            consumer: None,
            partitions: BTreeMap::new(),
            restored: None,
            next_discovery: None,
            pending: VecDeque::new(),
            rows_schema,
            skipped: 0,
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> WeirError {
        WeirError::Execution(format!("Kafka source '{}': {what}", self.name))
    }

    fn consumer(&mut self) -> Result<&BaseConsumer> {
        if self.consumer.is_none() {
            let mut config = client_config(&self.plan);
            // Offsets are Weir's state; the group only mirrors them.
            config.set("enable.auto.commit", "false");
            config.set("enable.auto.offset.store", "false");
            if !self.plan.properties.contains_key("group.id") {
                config.set("group.id", format!("weir-{}", self.name));
            }
            config.set("auto.offset.reset", "earliest");
            // librdkafka stops fetching a partition for this long once its
            // local queue is full (1 s by default): a source that drains it
            // at full speed would stall for most of that second.
            if !self.plan.properties.contains_key("fetch.queue.backoff.ms") {
                config.set("fetch.queue.backoff.ms", "10");
            }
            let consumer: BaseConsumer = config
                .create()
                .map_err(|e| self.fail(format!("cannot create the consumer: {e}")))?;
            self.consumer = Some(consumer);
        }
        Ok(self.consumer.as_ref().expect("created above"))
    }

    /// Look up the topics' partitions; assign the new ones of this subtask.
    fn discover(&mut self) -> Result<()> {
        let mut found = vec![];
        let lookups: Vec<Option<String>> = match &self.plan.topic_pattern {
            // Every topic of the cluster, kept when its name matches.
            Some(_) => vec![None],
            None => self.plan.topics.iter().cloned().map(Some).collect(),
        };
        let pattern = match &self.plan.topic_pattern {
            Some(p) => Some(crate::plan::topic_matcher(p).map_err(|e| self.fail(e))?),
            None => None,
        };
        for topic in &lookups {
            let meta = self
                .consumer()?
                .fetch_metadata(topic.as_deref(), LOOKUP)
                .map_err(|e| match topic {
                    Some(topic) => self.fail(format!("metadata of topic '{topic}': {e}")),
                    None => self.fail(format!("metadata of the cluster's topics: {e}")),
                })?;
            for t in meta.topics() {
                if pattern.as_ref().is_some_and(|p| !p.is_match(t.name())) {
                    continue;
                }
                if let Some(e) = t.error() {
                    return Err(self.fail(format!("topic '{}': {e:?}", t.name())));
                }
                for p in t.partitions() {
                    found.push((t.name().to_string(), p.id()));
                }
            }
        }
        let fresh: Vec<(String, i32)> = found
            .into_iter()
            .filter(|(t, p)| owner(t, *p, self.parallelism) == self.subtask)
            .filter(|k| !self.partitions.contains_key(k))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let first_assignment = self.partitions.is_empty();
        for key in fresh {
            let start = self.start_offset(&key, first_assignment)?;
            let end = self.end_offset(&key)?;
            tracing::info!(
                "Kafka source '{}' ({}/{}) reads {}-{} from offset {start}{}",
                self.name,
                self.subtask + 1,
                self.parallelism,
                key.0,
                key.1,
                end.map(|e| format!(" to {e}")).unwrap_or_default()
            );
            let topic = Arc::from(key.0.as_str());
            self.partitions.insert(
                key,
                Partition {
                    topic,
                    next: start,
                    end,
                },
            );
        }
        let mut tpl = TopicPartitionList::new();
        for ((t, p), part) in &self.partitions {
            tpl.add_partition_offset(t, *p, Offset::Offset(part.next))
                .map_err(|e| self.fail(e))?;
        }
        self.consumer()?
            .assign(&tpl)
            .map_err(|e| self.fail(format!("cannot assign partitions: {e}")))
    }

    /// Where a newly assigned partition starts: its restored offset, else
    /// the startup mode (a partition found later by discovery starts at
    /// the earliest offset, as in Flink).
    fn start_offset(&mut self, key: &(String, i32), first: bool) -> Result<i64> {
        if let Some(offset) = self.restored.as_ref().and_then(|r| r.get(key)) {
            return Ok(*offset);
        }
        let (low, high) = self.watermarks(key)?;
        let mode = if first || self.restored.is_some() {
            self.plan.startup.clone()
        } else {
            Startup::EarliestOffset
        };
        Ok(match mode {
            Startup::EarliestOffset => low,
            Startup::LatestOffset => high,
            Startup::GroupOffsets => self.committed(key)?.unwrap_or(low),
            Startup::Timestamp(ms) => self.offset_for_time(key, ms)?.unwrap_or(high),
            Startup::SpecificOffsets(m) => m.get(&key.1).copied().unwrap_or(low),
        })
    }

    /// Where a bounded read of a partition ends.
    fn end_offset(&mut self, key: &(String, i32)) -> Result<Option<i64>> {
        Ok(match self.plan.bounded.clone() {
            Bounded::Unbounded => None,
            Bounded::LatestOffset => Some(self.watermarks(key)?.1),
            Bounded::GroupOffsets => Some(match self.committed(key)? {
                Some(o) => o,
                None => self.watermarks(key)?.1,
            }),
            Bounded::Timestamp(ms) => Some(match self.offset_for_time(key, ms)? {
                Some(o) => o,
                None => self.watermarks(key)?.1,
            }),
            Bounded::SpecificOffsets(m) => Some(match m.get(&key.1) {
                Some(o) => *o,
                None => self.watermarks(key)?.1,
            }),
        })
    }

    fn watermarks(&mut self, (topic, partition): &(String, i32)) -> Result<(i64, i64)> {
        let got = self.consumer()?.fetch_watermarks(topic, *partition, LOOKUP);
        got.map_err(|e| self.fail(format!("offsets of {topic}-{partition}: {e}")))
    }

    fn committed(&mut self, (topic, partition): &(String, i32)) -> Result<Option<i64>> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, *partition);
        let got = self.consumer()?.committed_offsets(tpl, LOOKUP);
        let got =
            got.map_err(|e| self.fail(format!("committed offset of {topic}-{partition}: {e}")))?;
        Ok(got
            .find_partition(topic, *partition)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            }))
    }

    fn offset_for_time(
        &mut self,
        (topic, partition): &(String, i32),
        ms: i64,
    ) -> Result<Option<i64>> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, *partition, Offset::Offset(ms))
            .map_err(|e| self.fail(e))?;
        let got = self.consumer()?.offsets_for_times(tpl, LOOKUP);
        let got =
            got.map_err(|e| self.fail(format!("offset by time of {topic}-{partition}: {e}")))?;
        Ok(got
            .find_partition(topic, *partition)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            }))
    }

    fn all_done(&self) -> bool {
        self.plan.bounded != Bounded::Unbounded
            && self
                .partitions
                .values()
                .all(|p| p.end.is_some_and(|e| p.next >= e))
    }
}

/// A partition's next offset (`key` NULL), or — upsert-kafka — the latest
/// value of a key read from that partition.
fn position_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("topic", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("offset", DataType::Int64, false),
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
    ]))
}

/// A partition as a split number for per-split watermarks.
fn split_id(topic: &str, partition: i32) -> u64 {
    (u64::from(java_hash(topic) as u32) << 32) | u64::from(partition as u32)
}

impl KafkaSource {
    /// The runs of rows of one partition in a poll's rows, in order.
    fn runs(origins: &[Origin]) -> Vec<(u64, usize)> {
        let mut runs: Vec<(u64, usize)> = vec![];
        let mut last: Option<&Origin> = None;
        for o in origins {
            match (last, runs.last_mut()) {
                (Some(l), Some(run)) if l.1 == o.1 && l.0 == o.0 => run.1 += 1,
                _ => runs.push((split_id(&o.0, o.1), 1)),
            }
            last = Some(o);
        }
        runs
    }
}

/// What a Kafka table's source yields: a changelog for a changelog format
/// or an upsert table (its upserts are turned into retractions with the
/// rows it keeps per key), else rows to append.
pub(crate) fn changelog_mode(plan: &KafkaPlan) -> weir_core::spec::ChangelogMode {
    if plan.upsert_key.is_empty() {
        weir_operators::formats::produced_changelog(&plan.format)
    } else {
        weir_core::spec::ChangelogMode::Retract
    }
}

/// The rows a Kafka table's source produces: the physical columns, the
/// metadata columns (named as declared, of the connector's types), then
/// the row kind for a changelog format or an upsert table.
pub(crate) fn rows_schema(plan: &KafkaPlan) -> SchemaRef {
    let changelog = changelog_mode(plan).is_updating();
    let mut f: Vec<Field> = plan
        .schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let keys = crate::plan::metadata_keys();
    for m in &plan.metadata {
        let t = keys
            .iter()
            .find(|k| k.key == m.key)
            .map_or_else(|| m.data_type.clone(), |k| k.data_type.clone());
        f.push(Field::new(&m.name, t, true));
    }
    if changelog {
        f.push(weir_core::spec::row_kind_field());
    }
    Arc::new(Schema::new(f))
}

impl KafkaSource {
    /// Ask the brokers for each assigned partition's latest offset, at
    /// most every [`LAG_INTERVAL`] (a round trip per partition); a broker
    /// that does not answer within [`LAG_LOOKUP`] leaves the last figure.
    fn refresh_lag(&mut self) {
        if self.lag.1.is_some_and(|t| t.elapsed() < LAG_INTERVAL) {
            return;
        }
        self.lag.1 = Some(Instant::now());
        let Some(consumer) = self.consumer.as_ref() else {
            return;
        };
        let mut behind = 0u64;
        for ((topic, partition), p) in &self.partitions {
            match consumer.fetch_watermarks(topic, *partition, LAG_LOOKUP) {
                Ok((_, high)) => behind += u64::try_from(high - p.next).unwrap_or(0),
                Err(e) => {
                    tracing::debug!("latest offset of {topic}-{partition}: {e}");
                    return;
                }
            }
        }
        self.lag.0 = Some(behind);
    }
}

/// How often a source asks for its partitions' latest offsets.
const LAG_INTERVAL: Duration = Duration::from_secs(1);
/// How long it waits for the answer.
const LAG_LOOKUP: Duration = Duration::from_secs(1);

impl Source for KafkaSource {
    fn splits_of_last_batch(&self) -> Option<&[(u64, usize)]> {
        self.last_runs.as_deref()
    }

    /// Records behind the latest offsets of the assigned partitions
    /// (Flink's `pendingRecords`).
    fn lag(&self) -> Option<u64> {
        self.lag.0
    }

    /// The assigned partitions not yet read to a bounded end (upsert
    /// tables emit whole polls and name no splits).
    fn active_splits(&self) -> Option<Vec<u64>> {
        if self.latest.is_some() {
            return None;
        }
        Some(
            self.partitions
                .iter()
                .filter(|(_, p)| p.end.is_none_or(|e| p.next < e))
                .map(|(k, _)| split_id(&k.0, k.1))
                .collect(),
        )
    }

    /// Assigned no partitions (more subtasks than partitions).
    fn is_idle(&self) -> bool {
        self.consumer.is_some() && self.partitions.is_empty()
    }

    fn poll_next(&mut self) -> Result<SourcePoll> {
        let due = self.next_discovery.is_none_or(|t| Instant::now() >= t);
        if due {
            self.discover()?;
            self.next_discovery = Some(match self.plan.discovery_ms {
                Some(ms) => Instant::now() + Duration::from_millis(ms),
                None => Instant::now() + Duration::from_secs(u64::MAX / 4),
            });
        }
        if self.all_done() {
            return Ok(SourcePoll::Finished);
        }
        self.refresh_lag();
        let parts = self.parts()?;
        let mut polled = Polled::new(&parts, &self.plan.metadata, self.last_bytes);
        // Every assigned partition of one topic: a message's partition
        // alone finds it.
        let one_topic = self
            .partitions
            .keys()
            .next()
            .is_some_and(|(t, _)| self.partitions.keys().all(|(u, _)| u == t));
        let with_metadata = !self.plan.metadata.is_empty();
        let mut ended = vec![];
        {
            let consumer = self.consumer.as_ref().expect("discovered above");
            let partitions = &mut self.partitions;
            // The partition of the current run of messages.
            let mut current: Option<(&(String, i32), &mut Partition)> = None;
            while polled.origins.len() < self.batch_size {
                // The first message of a poll may wait a moment for the
                // fetcher (the task would otherwise sleep a whole tick).
                let first = polled.origins.is_empty() && polled.changes.is_empty();
                let wait = if first {
                    Duration::from_millis(2)
                } else {
                    Duration::ZERO
                };
                let Some(next) = consumer.poll(wait) else {
                    break;
                };
                let m = match next {
                    Ok(m) => m,
                    Err(e) if transient(&e) => {
                        tracing::warn!("Kafka source '{}': {e} (retrying)", self.name);
                        break;
                    }
                    Err(e) => {
                        return Err(WeirError::Execution(format!(
                            "Kafka source '{}': {e}",
                            self.name
                        )));
                    }
                };
                // Messages come in runs of one partition: look it up by
                // name only when the run changes (no allocation per message).
                let same =
                    |k: &(String, i32)| k.1 == m.partition() && (one_topic || k.0 == m.topic());
                if !current.as_ref().is_some_and(|(k, _)| same(k)) {
                    current = partitions.iter_mut().find(|(k, _)| same(k));
                }
                let Some((key, part)) = current.as_mut() else {
                    continue;
                };
                let key = *key;
                if part.end.is_some_and(|e| m.offset() >= e) || m.offset() < part.next {
                    // Past a bounded end, or before the position (a seek's echo).
                    if part.end.is_some_and(|e| m.offset() >= e) {
                        part.next = part.next.max(part.end.unwrap_or(part.next));
                        ended.push(key.clone());
                    }
                    continue;
                }
                part.next = m.offset() + 1;
                let origin = (Arc::clone(&part.topic), key.1, m.offset());
                if self.latest.is_some() {
                    let Some(k) = m.key() else {
                        return Err(WeirError::Execution(format!(
                            "Kafka source '{}': topic '{}' partition {} offset {}: an upsert-kafka \
                             message without a key",
                            self.name,
                            key.0,
                            key.1,
                            m.offset()
                        )));
                    };
                    polled
                        .changes
                        .push((k.to_vec(), m.payload().map(<[u8]>::to_vec), origin));
                    if polled.changes.len() >= self.batch_size {
                        break;
                    }
                    continue;
                }
                // A tombstone (no payload) carries no row.
                if let Some(p) = m.payload() {
                    polled.values.push(p);
                    polled.keys.push(m.key().unwrap_or_default());
                    polled.origins.push(origin);
                    if with_metadata {
                        polled.meta.push(&m);
                    }
                }
            }
        }
        if !ended.is_empty() {
            let mut tpl = TopicPartitionList::new();
            for (t, p) in &ended {
                tpl.add_partition(t, *p);
            }
            let _ = self.consumer.as_ref().expect("created").pause(&tpl);
        }
        let mut kinds = None;
        if self.latest.is_some() {
            kinds = Some(self.normalize(&mut polled));
        }
        if polled.origins.is_empty() {
            if self.all_done() {
                return Ok(SourcePoll::Finished);
            }
            // The poll above waited already.
            return Ok(SourcePoll::Pending(Duration::ZERO));
        }
        let upsert = kinds.is_some();
        self.last_bytes = polled.values.len() + polled.values.len() / 8;
        let (batch, kept) = self.decode(&polled, kinds)?;
        if batch.num_rows() == 0 {
            return Ok(SourcePoll::Pending(Duration::ZERO));
        }
        // The whole poll as one batch, its rows' partitions named as runs
        // for per-partition watermarks — not for upsert tables (their
        // changes are normalised per key, not per partition).
        self.last_runs = None;
        if !upsert {
            let origins = match &kept {
                Some(kept) => kept.iter().map(|&i| polled.origins[i].clone()).collect(),
                None => std::mem::take(&mut polled.origins),
            };
            if origins.len() == batch.num_rows() {
                self.last_runs = Some(Self::runs(&origins));
            }
        }
        Ok(SourcePoll::Batch(batch))
    }

    fn snapshot_position(&mut self, checkpoint: u64) -> Result<RecordBatch> {
        // Before the first poll: what was restored is still the position.
        let rows: Vec<Position> = if self.partitions.is_empty() {
            self.restored
                .as_ref()
                .map(|r| r.iter().map(|(k, o)| (k.clone(), *o)).collect())
                .unwrap_or_default()
        } else {
            // Every row decoded has been emitted: a poll is one batch.
            self.partitions
                .iter()
                .map(|(k, p)| (k.clone(), p.next))
                .collect()
        };
        let mut topics: Vec<&str> = rows.iter().map(|r| r.0.0.as_str()).collect();
        let mut parts: Vec<i32> = rows.iter().map(|r| r.0.1).collect();
        let mut offsets: Vec<i64> = rows.iter().map(|r| r.1).collect();
        let mut keys: Vec<Option<&[u8]>> = vec![None; rows.len()];
        let mut values: Vec<Option<&[u8]>> = vec![None; rows.len()];
        for (k, (t, p, v)) in self.latest.iter().flatten() {
            topics.push(&**t);
            parts.push(*p);
            offsets.push(-1);
            keys.push(Some(k));
            values.push(Some(v));
        }
        let batch = RecordBatch::try_new(
            position_schema(),
            vec![
                Arc::new(StringArray::from(topics)),
                Arc::new(Int32Array::from(parts)),
                Arc::new(Int64Array::from(offsets)),
                Arc::new(arrow::array::BinaryArray::from(keys)),
                Arc::new(arrow::array::BinaryArray::from(values)),
            ],
        )?;
        self.pending.push_back((checkpoint, rows));
        Ok(batch)
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        let mut restored = BTreeMap::new();
        if let Some(latest) = self.latest.as_mut() {
            latest.clear();
        }
        for b in positions {
            let malformed = || self.fail("malformed checkpointed position");
            let topics = b.column(0).as_string_opt::<i32>().ok_or_else(malformed)?;
            let parts = b
                .column(1)
                .as_primitive_opt::<Int32Type>()
                .ok_or_else(malformed)?;
            let offsets = b
                .column(2)
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(malformed)?;
            let upserts = (b.num_columns() == 5).then(|| {
                (
                    b.column(3).as_binary_opt::<i32>(),
                    b.column(4).as_binary_opt::<i32>(),
                )
            });
            for r in 0..b.num_rows() {
                let key = (topics.value(r).to_string(), parts.value(r));
                // At another parallelism every subtask sees every position.
                if owner(&key.0, key.1, self.parallelism) != self.subtask {
                    continue;
                }
                match upserts {
                    Some((Some(k), Some(v))) if k.is_valid(r) => {
                        if let Some(latest) = self.latest.as_mut() {
                            latest.insert(
                                k.value(r).to_vec(),
                                (Arc::from(key.0.as_str()), key.1, v.value(r).to_vec()),
                            );
                        }
                    }
                    _ => {
                        restored.insert(key, offsets.value(r));
                    }
                }
            }
        }
        self.partitions.clear();
        self.consumer = None;
        self.next_discovery = None;
        self.restored = Some(restored);
        Ok(())
    }

    /// Mirror the completed checkpoint's offsets into the group.
    fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        let mut covered = None;
        while self.pending.front().is_some_and(|(c, _)| *c <= checkpoint) {
            covered = self.pending.pop_front().map(|(_, rows)| rows);
        }
        let (Some(rows), Some(consumer)) = (covered, self.consumer.as_ref()) else {
            return Ok(());
        };
        if rows.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for ((t, p), o) in &rows {
            let _ = tpl.add_partition_offset(t, *p, Offset::Offset(*o));
        }
        if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(
                "Kafka source '{}': offsets not committed to the group: {e}",
                self.name
            );
        }
        Ok(())
    }
}
