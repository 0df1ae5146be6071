//! The Kafka sink: one message per row, the value (and key) encoded by the
//! table's formats a batch at a time.
//!
//! Delivery (`sink.delivery-guarantee`):
//! * `none` — messages are handed to the client and forgotten;
//! * `at-least-once` — every checkpoint waits until the brokers have
//!   acknowledged every message sent before its barrier (a failed delivery
//!   fails the checkpoint and the job);
//! * `exactly-once` — the rows of each checkpoint are part of its snapshot
//!   (table `pending`) and are written in one Kafka transaction when the
//!   checkpoint completes, by a transactional producer per subtask
//!   (`{sink.transactional-id-prefix}-{subtask}`). Every message of the
//!   transaction carries a header `weir.txn` = `{prefix}-{subtask}:{checkpoint}`,
//!   so a restore finds out, reading the topic from the checkpoint's time on
//!   with `read_committed`, whether that checkpoint's transaction committed,
//!   and writes it only if not. (Offsets sent within the transaction would
//!   be the lighter marker, but librdkafka's mock cluster, which the tests
//!   run against, does not keep them.)
//!
//! Flink's KafkaSink writes into the open transaction as rows arrive and,
//! after a failure, commits the prepared transaction by resuming its
//! producer id and epoch; librdkafka cannot resume another producer's
//! transaction (initialising one aborts it), so Weir keeps a checkpoint's
//! rows until it completes instead. Consumers with `read_committed` see
//! the same thing either way: each row once, one checkpoint interval late.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{Array, AsArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use arrow::record_batch::RecordBatch;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use weir_core::changelog::RowKind;
use weir_core::{Result, WeirError};
use weir_operators::formats::{RowEncoder, formats};
use weir_operators::{Operator, Output, StateTable};

use crate::plan::KafkaPlan;
use crate::source::client_config;

const TIMEOUT: Duration = Duration::from_secs(60);

/// The header naming the transaction a message was written in.
const TXN_HEADER: &str = "weir.txn";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Counts failed deliveries, keeping the first error.
#[derive(Default)]
pub(crate) struct Deliveries {
    failed: AtomicU64,
    first: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| e.to_string());
        }
    }
}

type Client = ThreadedProducer<Deliveries>;

/// One subtask's writer of a Kafka table.
pub(crate) struct KafkaSink {
    name: String,
    plan: KafkaPlan,
    subtask: usize,
    parallelism: usize,
    /// The columns written to the value, and their encoder.
    value: (Vec<usize>, Box<dyn RowEncoder>),
    /// The columns written to the key, and their encoder.
    key: Option<(Vec<usize>, Box<dyn RowEncoder>)>,
    producer: Option<Arc<Client>>,
    /// Partitions of the topic, for `fixed` and `round-robin`.
    partitions: Option<i32>,
    next_partition: i32,
    /// Rows since the last barrier (exactly-once).
    staged: Vec<RecordBatch>,
    /// Rows of checkpoints taken and not yet completed (exactly-once).
    pending: Vec<(u64, Vec<RecordBatch>)>,
    schema: SchemaRef,
    bytes: Vec<u8>,
    key_bytes: Vec<u8>,
    /// The line break ending each encoded value and key record (1), or
    /// none for a format framed by message (0).
    line_breaks: (usize, usize),
    ends: Vec<usize>,
    key_ends: Vec<usize>,
}

impl KafkaSink {
    pub(crate) fn new(
        name: String,
        plan: KafkaPlan,
        schema: SchemaRef,
        subtask: usize,
        parallelism: usize,
    ) -> Result<Self> {
        let changelog = weir_core::spec::is_changelog_schema(&schema);
        let all = formats();
        let (mut value_idx, value_schema) = plan.project(&plan.value_fields)?;
        let changelog_format = all.get(&plan.format)?.changelog();
        let value_schema = if changelog && changelog_format {
            // The changelog format takes the row kind too.
            value_idx.push(schema.fields().len() - 1);
            let mut f: Vec<Field> = value_schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            f.push(weir_core::spec::row_kind_field());
            Arc::new(Schema::new(f))
        } else {
            value_schema
        };
        let value = (
            value_idx,
            all.get(&plan.format)?
                .encoder(&value_schema, &plan.format_options)?,
        );
        let key = match &plan.key {
            Some(k) => {
                let (idx, key_schema) = plan.project(&k.fields)?;
                Some((idx, all.get(&k.format)?.encoder(&key_schema, &k.options)?))
            }
            None => None,
        };
        let framed = |f: &str| all.get(f).is_ok_and(|f| f.message_framed());
        let line_breaks = (
            usize::from(!framed(&plan.format)),
            usize::from(!plan.key.as_ref().is_some_and(|k| framed(&k.format))),
        );
        if plan.topics.is_empty() {
            return Err(WeirError::plan(format!(
                "Kafka sink '{name}': no topic to write (a sink takes 'topic')"
            )));
        }
        Ok(Self {
            line_breaks,
            name,
            plan,
            subtask,
            parallelism,
            value,
            key,
            producer: None,
            partitions: None,
            next_partition: subtask as i32,
            staged: vec![],
            pending: vec![],
            schema,
            bytes: vec![],
            key_bytes: vec![],
            ends: vec![],
            key_ends: vec![],
        })
    }

    fn fail(&self, what: impl std::fmt::Display) -> WeirError {
        WeirError::Execution(format!("Kafka sink '{}': {what}", self.name))
    }

    fn exactly_once(&self) -> bool {
        self.plan.delivery == "exactly-once"
    }

    fn transactional_id(&self, subtask: usize) -> String {
        format!("{}-{subtask}", self.plan.transactional_id_prefix)
    }

    fn topic(&self) -> &str {
        &self.plan.topics[0]
    }

    fn create_producer(&self, transactional_id: Option<&str>) -> Result<Client> {
        let mut config = client_config(&self.plan);
        // Keyed rows go where a Java client would put them.
        if !self.plan.properties.contains_key("partitioner") {
            config.set("partitioner", "murmur2_random");
        }
        if let Some(id) = transactional_id {
            config.set("transactional.id", id);
        } else if self.plan.delivery == "at-least-once"
            && !self.plan.properties.contains_key("enable.idempotence")
        {
            config.set("enable.idempotence", "true");
        }
        let producer: Client = config
            .create_with_context(Deliveries::default())
            .map_err(|e| self.fail(format!("cannot create the producer: {e}")))?;
        if transactional_id.is_some() {
            producer
                .init_transactions(TIMEOUT)
                .map_err(|e| self.fail(format!("cannot start transactions: {e}")))?;
        }
        Ok(producer)
    }

    fn producer(&mut self) -> Result<Arc<Client>> {
        if self.producer.is_none() {
            let id = self
                .exactly_once()
                .then(|| self.transactional_id(self.subtask));
            let p = self.create_producer(id.as_deref())?;
            if self.plan.partitioner != "default" {
                let meta = p
                    .client()
                    .fetch_metadata(Some(self.topic()), TIMEOUT)
                    .map_err(|e| self.fail(format!("metadata of topic '{}': {e}", self.topic())))?;
                let n = meta
                    .topics()
                    .first()
                    .map(|t| t.partitions().len() as i32)
                    .unwrap_or(0);
                if n == 0 {
                    return Err(self.fail(format!("topic '{}' has no partitions", self.topic())));
                }
                self.partitions = Some(n);
            }
            self.producer = Some(Arc::new(p));
        }
        Ok(Arc::clone(self.producer.as_ref().expect("created above")))
    }

    /// Hand the rows of `batch` to the producer, one message each, marked
    /// as part of a checkpoint's transaction when `txn` is given.
    fn send(&mut self, batch: &RecordBatch, txn: Option<&str>) -> Result<()> {
        let producer = self.producer()?;
        // upsert-kafka: -U rows are dropped (none come from an upserting
        // input), -D rows become tombstones.
        let upsert = !self.plan.upsert_key.is_empty()
            && weir_core::spec::is_changelog_schema(&batch.schema());
        let filtered;
        let batch = if upsert {
            let kinds = batch.column(batch.num_columns() - 1);
            let before = arrow::array::Int8Array::new_scalar(RowKind::UpdateBefore.as_i8());
            let keep = arrow::compute::kernels::cmp::neq(kinds, &before)?;
            filtered = arrow::compute::filter_record_batch(batch, &keep)?;
            &filtered
        } else {
            batch
        };
        let deletes: Vec<bool> = if upsert {
            let kinds = batch.column(batch.num_columns() - 1);
            let delete = arrow::array::Int8Array::new_scalar(RowKind::Delete.as_i8());
            arrow::compute::kernels::cmp::eq(kinds, &delete)?
                .values()
                .iter()
                .collect()
        } else {
            vec![]
        };
        let value_cols = batch.project(&self.value.0)?;
        self.bytes.clear();
        self.ends.clear();
        self.value
            .1
            .encode_records(&value_cols, &mut self.bytes, &mut self.ends)?;
        self.key_bytes.clear();
        self.key_ends.clear();
        if let Some((idx, enc)) = &mut self.key {
            let key_cols = batch.project(idx)?;
            enc.encode_records(&key_cols, &mut self.key_bytes, &mut self.key_ends)?;
        }
        let (timestamps, headers) = self.written_metadata(batch)?;
        let topic = self.topic().to_string();
        let mut start = 0;
        let mut key_start = 0;
        for (row, &end) in self.ends.iter().enumerate() {
            // A line format's record ends with its line break, not sent.
            let payload = &self.bytes[start..(end - self.line_breaks.0).max(start)];
            start = end;
            let key = self.key_ends.get(row).map(|&e| {
                let k = &self.key_bytes[key_start..(e - self.line_breaks.1).max(key_start)];
                key_start = e;
                k
            });
            let partition = match (self.plan.partitioner.as_str(), self.partitions) {
                ("fixed", Some(n)) => Some(self.subtask as i32 % n),
                ("round-robin", Some(n)) => {
                    self.next_partition = (self.next_partition + 1) % n;
                    Some(self.next_partition)
                }
                _ => None,
            };
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&topic);
            if !deletes.get(row).copied().unwrap_or(false) {
                record = record.payload(payload);
            }
            if let Some(k) = key {
                record = record.key(k);
            }
            if let Some(p) = partition {
                record = record.partition(p);
            }
            if let Some(ts) = &timestamps
                && ts.is_valid(row)
            {
                record = record.timestamp(ts.value(row));
            }
            let mut written = None;
            if let Some(h) = &headers
                && h.is_valid(row)
            {
                let entries = h.value(row);
                let (keys, values) = (entries.column(0).as_string::<i32>(), entries.column(1));
                let values = values.as_binary::<i32>();
                let mut all = OwnedHeaders::new_with_capacity(keys.len() + 1);
                for i in 0..keys.len() {
                    all = all.insert(Header {
                        key: keys.value(i),
                        value: values.is_valid(i).then(|| values.value(i)),
                    });
                }
                written = Some(all);
            }
            if let Some(t) = txn {
                written = Some(written.unwrap_or_default().insert(Header {
                    key: TXN_HEADER,
                    value: Some(t.as_bytes()),
                }));
            }
            if let Some(h) = written {
                record = record.headers(h);
            }
            let mut record = record;
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((
                        KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                        r,
                    )) => {
                        // The client's queue is full: wait for deliveries.
                        std::thread::sleep(Duration::from_millis(1));
                        record = r;
                    }
                    Err((e, _)) => return Err(self.fail(format!("cannot send to '{topic}': {e}"))),
                }
            }
        }
        Ok(())
    }

    /// Wait until every message sent is acknowledged; fail on a delivery error.
    fn flush(&mut self) -> Result<()> {
        let Some(p) = self.producer.clone() else {
            return Ok(());
        };
        p.flush(TIMEOUT)
            .map_err(|e| self.fail(format!("flush: {e}")))?;
        self.check_deliveries(&p)
    }

    fn check_deliveries(&self, p: &Client) -> Result<()> {
        let failed = p.context().failed.load(Ordering::Relaxed);
        if failed > 0 {
            let first = p
                .context()
                .first
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_default();
            return Err(self.fail(format!("{failed} messages were not delivered: {first}")));
        }
        Ok(())
    }

    fn txn_name(&self, owner: usize, checkpoint: u64) -> String {
        format!("{}:{checkpoint}", self.transactional_id(owner))
    }

    /// Write the rows of checkpoint `checkpoint` of (old) subtask `owner` in
    /// one transaction, each message marked with it.
    fn commit(&mut self, owner: usize, checkpoint: u64, rows: &[RecordBatch]) -> Result<()> {
        if rows.iter().all(|b| b.num_rows() == 0) {
            return Ok(());
        }
        let producer = self.producer()?;
        producer
            .begin_transaction()
            .map_err(|e| self.fail(format!("begin transaction: {e}")))?;
        let txn = self.txn_name(owner, checkpoint);
        for b in rows {
            self.send(b, Some(&txn))?;
        }
        producer
            .commit_transaction(TIMEOUT)
            .map_err(|e| self.fail(format!("commit of checkpoint {checkpoint}: {e}")))?;
        self.check_deliveries(&producer)
    }

    /// Whether the transaction of checkpoint `checkpoint` of (old) subtask
    /// `owner` committed: a committed message of the topic, written at or
    /// after `since_ms`, carries its name.
    fn committed(&self, owner: usize, checkpoint: u64, since_ms: i64) -> Result<bool> {
        let mut config = client_config(&self.plan);
        config.set(
            "group.id",
            format!("weir-sink-check-{}", self.plan.transactional_id_prefix),
        );
        config.set("enable.auto.commit", "false");
        config.set("isolation.level", "read_committed");
        let consumer: BaseConsumer = config
            .create()
            .map_err(|e| self.fail(format!("transaction check consumer: {e}")))?;
        let topic = self.topic().to_string();
        let meta = consumer
            .fetch_metadata(Some(&topic), TIMEOUT)
            .map_err(|e| self.fail(format!("metadata of '{topic}': {e}")))?;
        let wanted = self.txn_name(owner, checkpoint);
        let mut start = TopicPartitionList::new();
        let mut ends = std::collections::BTreeMap::new();
        for p in meta.topics().iter().flat_map(|t| t.partitions()) {
            let (_, high) = consumer
                .fetch_watermarks(&topic, p.id(), TIMEOUT)
                .map_err(|e| self.fail(format!("offsets of {topic}-{}: {e}", p.id())))?;
            ends.insert(p.id(), high);
            start
                .add_partition_offset(&topic, p.id(), Offset::Offset(since_ms))
                .map_err(|e| self.fail(e))?;
        }
        // From the checkpoint's time on (everything when the broker cannot say).
        let mut from = TopicPartitionList::new();
        let by_time = consumer.offsets_for_times(start, TIMEOUT).ok();
        for &p in ends.keys() {
            let offset = by_time
                .as_ref()
                .and_then(|t| t.find_partition(&topic, p))
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) if o >= 0 => Some(Offset::Offset(o)),
                    _ => None,
                })
                .unwrap_or(Offset::Beginning);
            from.add_partition_offset(&topic, p, offset)
                .map_err(|e| self.fail(e))?;
        }
        consumer
            .assign(&from)
            .map_err(|e| self.fail(format!("transaction check: {e}")))?;
        let deadline = std::time::Instant::now() + TIMEOUT;
        let mut done = std::collections::BTreeSet::new();
        while done.len() < ends.len() {
            if std::time::Instant::now() > deadline {
                return Err(self.fail(format!(
                    "could not read '{topic}' to its end to learn whether checkpoint \
                     {checkpoint}'s transaction committed"
                )));
            }
            if let Some(m) = consumer.poll(Duration::from_millis(50)) {
                let m = match m {
                    Ok(m) => m,
                    Err(e) if crate::source::transient(&e) => {
                        tracing::warn!(
                            "Kafka sink '{}': transaction check: {e} (retrying)",
                            self.name
                        );
                        continue;
                    }
                    Err(e) => return Err(self.fail(format!("transaction check: {e}"))),
                };
                let marked = m.headers().is_some_and(|h| {
                    (0..h.count()).any(|i| {
                        let header = h.get(i);
                        header.key == TXN_HEADER && header.value == Some(wanted.as_bytes())
                    })
                });
                if marked {
                    return Ok(true);
                }
            }
            let position = consumer
                .position()
                .map_err(|e| self.fail(format!("transaction check: {e}")))?;
            for e in position.elements() {
                let end = ends.get(&e.partition()).copied().unwrap_or(0);
                let at_end = match e.offset() {
                    Offset::Offset(o) => o >= end,
                    _ => end == 0,
                };
                if at_end {
                    done.insert(e.partition());
                }
            }
        }
        Ok(false)
    }

    /// The persisted metadata columns of `batch` a message takes: its
    /// timestamp (ms) and its headers, cast to the connector's types.
    fn written_metadata(
        &self,
        batch: &RecordBatch,
    ) -> Result<(
        Option<arrow::array::TimestampMillisecondArray>,
        Option<arrow::array::MapArray>,
    )> {
        let mut timestamps = None;
        let mut headers = None;
        for m in self.plan.metadata.iter().filter(|m| !m.is_virtual) {
            let Ok(at) = batch.schema().index_of(&m.name) else {
                continue;
            };
            match m.key.as_str() {
                "timestamp" => {
                    let c = arrow::compute::cast(
                        batch.column(at),
                        &DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
                    )?;
                    timestamps = Some(c.as_primitive().clone());
                }
                "headers" => {
                    let c = arrow::compute::cast(batch.column(at), &crate::plan::headers_type())?;
                    headers = Some(c.as_map().clone());
                }
                other => {
                    return Err(self.fail(format!(
                        "column '{}': metadata '{other}' cannot be written",
                        m.name
                    )));
                }
            }
        }
        Ok((timestamps, headers))
    }

    fn pending_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("__checkpoint", DataType::UInt64, false));
        fields.push(Field::new("__subtask", DataType::UInt64, false));
        fields.push(Field::new("__staged_ms", DataType::Int64, false));
        Arc::new(Schema::new(fields))
    }
}

impl Operator for KafkaSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        if self.exactly_once() {
            self.staged.push(batch);
            return Ok(());
        }
        self.send(&batch, None)
    }

    fn finish(&mut self, _out: &mut dyn Output) -> Result<()> {
        if self.exactly_once() {
            // The end of input commits what is left, in checkpoint order.
            let mut all = std::mem::take(&mut self.pending);
            let staged = std::mem::take(&mut self.staged);
            let last = all.last().map_or(0, |(c, _)| *c) + 1;
            if !staged.is_empty() {
                all.push((last, staged));
            }
            for (c, rows) in all {
                self.commit(self.subtask, c, &rows)?;
            }
            return Ok(());
        }
        self.flush()
    }

    /// At-least-once: every message sent before the barrier is
    /// acknowledged. Exactly-once: table `pending`, the rows of this
    /// checkpoint (the sink's columns plus `__checkpoint`, `__subtask`).
    fn snapshot_state(&mut self, checkpoint: u64) -> Result<Vec<StateTable>> {
        if !self.exactly_once() {
            if self.plan.delivery == "at-least-once" {
                self.flush()?;
            }
            return Ok(vec![]);
        }
        let rows = std::mem::take(&mut self.staged);
        let data = arrow::compute::concat_batches(&self.schema, &rows)?;
        self.pending.push((checkpoint, rows));
        let n = data.num_rows();
        let mut columns = data.columns().to_vec();
        columns.push(Arc::new(UInt64Array::from(vec![checkpoint; n])));
        columns.push(Arc::new(UInt64Array::from(vec![self.subtask as u64; n])));
        columns.push(Arc::new(arrow::array::Int64Array::from(vec![now_ms(); n])));
        let mut tables = vec![StateTable::new(
            "pending",
            RecordBatch::try_new(self.pending_schema(), columns)?,
        )];
        if n == 0 {
            // The checkpoint still says which subtask it was.
            tables[0] = StateTable::new("pending", RecordBatch::new_empty(self.pending_schema()));
        }
        Ok(tables)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        if !self.exactly_once() {
            return Ok(());
        }
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(c, _)| *c <= checkpoint);
        self.pending = waiting;
        for (c, rows) in done {
            self.commit(self.subtask, c, &rows)?;
        }
        Ok(())
    }

    /// The restored checkpoint completed: the rows of its transactions that
    /// the topic shows uncommitted are written now (by the subtask
    /// that takes over the old one); old transactional ids no subtask uses
    /// any more are fenced, aborting what they left open.
    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        if !self.exactly_once() {
            return Ok(());
        }
        let width = self.schema.fields().len();
        // (old subtask, checkpoint) → (when staged, rows).
        let mut by_owner: std::collections::BTreeMap<(usize, u64), (i64, Vec<RecordBatch>)> =
            Default::default();
        for t in tables.into_iter().filter(|t| t.name == "pending") {
            let b = t.batch;
            if b.num_columns() != width + 3 {
                return Err(self.fail("malformed pending state"));
            }
            let checkpoints = b.column(width).as_primitive::<UInt64Type>();
            let owners = b.column(width + 1).as_primitive::<UInt64Type>();
            let times = b
                .column(width + 2)
                .as_primitive::<arrow::datatypes::Int64Type>();
            // Runs of rows of one (subtask, checkpoint), sliced whole.
            let mut start = 0;
            while start < b.num_rows() {
                let run = (owners.value(start), checkpoints.value(start));
                let mut end = start + 1;
                while end < b.num_rows() && (owners.value(end), checkpoints.value(end)) == run {
                    end += 1;
                }
                let owner = run.0 as usize;
                if owner % self.parallelism == self.subtask {
                    let rows = RecordBatch::try_new(
                        Arc::clone(&self.schema),
                        b.columns()[..width]
                            .iter()
                            .map(|c| c.slice(start, end - start))
                            .collect(),
                    )?;
                    let entry = by_owner.entry((owner, run.1)).or_default();
                    entry.0 = times.value(start);
                    entry.1.push(rows);
                }
                start = end;
            }
        }
        let owners: std::collections::BTreeSet<usize> = by_owner.keys().map(|(o, _)| *o).collect();
        for owner in owners {
            if owner != self.subtask {
                // Fence the old id: its open transaction is aborted.
                drop(self.create_producer(Some(&self.transactional_id(owner)))?);
            }
            for ((o, c), (staged_ms, rows)) in by_owner.range((owner, 0)..=(owner, u64::MAX)) {
                debug_assert_eq!(*o, owner);
                // Its transaction began after the checkpoint completed,
                // which is after the rows were staged.
                if self.committed(owner, *c, *staged_ms - 1000)? {
                    continue;
                }
                let schema = Arc::clone(&self.schema);
                let merged = arrow::compute::concat_batches(&schema, rows)?;
                tracing::info!(
                    "Kafka sink '{}': committing the {} rows of checkpoint {c} (subtask {owner}) \
                     that its transaction had not",
                    self.name,
                    merged.num_rows()
                );
                self.commit(owner, *c, &[merged])?;
            }
        }
        Ok(())
    }
}
