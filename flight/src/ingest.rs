//! Flight ingestion: the `flight` connector's source side.
//!
//! A Flight client pushes rows into a running job with `do_put` on the
//! process's Flight endpoint (the one serving Flight sinks: same address,
//! token and TLS). The descriptor is a *path*: `[table]` or
//! `[table, client]`. Each record batch's `app_metadata` carries its
//! sequence number (decimal text, strictly increasing per client); the
//! server answers on the put's result stream with
//! `{"client": …, "acked": N}` (JSON) whenever the highest sequence number
//! covered by a completed checkpoint moves — and once at the start, so a
//! client that restarts knows where to resume. A client that resends
//! everything after its last acknowledged batch gets each batch into the
//! job exactly once: a source subtask drops a batch whose number it has
//! already taken, and the numbers it took are its checkpointed position.
//! Without checkpoints, a batch is acknowledged when the source takes it.
//!
//! A client named in the descriptor must number its batches; an unnamed
//! one gets a fresh name per put and its batches are numbered 1, 2, … by
//! arrival (nothing to resume). The put's result stream ends once every
//! batch the client sent is acknowledged, so closing the writer waits for
//! it.
//!
//! Each table's queue to a source subtask is bounded (`source.queue-batches`):
//! a full queue stops the server reading the put, and HTTP/2 flow control
//! holds the client's writes — back-pressure reaches the client. A client
//! always lands on the same subtask of the process (by a hash of its name),
//! so its batches keep their order.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arrow::array::{Array, AsArray, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::{FlightData, PutResult};
use futures::stream::{BoxStream, Peekable, StreamExt};
use tokio::sync::{mpsc, watch};
use tonic::{Response, Status, Streaming};
use weir_core::{Result, WeirError};
use weir_operators::{Source, SourcePoll};

/// How long a put waits for the table's source to (re)start in this
/// process before it is refused.
const SOURCE_WAIT: Duration = Duration::from_secs(10);

/// One batch a client pushed, on its way to a source subtask.
#[derive(Debug)]
struct Put {
    client: String,
    seq: u64,
    batch: RecordBatch,
}

/// The tables Flight clients push into in this process.
#[derive(Debug, Default)]
pub struct IngestHub {
    tables: Mutex<HashMap<String, Arc<IngestTable>>>,
}

/// One `flight` source table: its running subtasks' queues and what has
/// been acknowledged to each client.
#[derive(Debug)]
struct IngestTable {
    name: String,
    state: Mutex<TableState>,
    /// Wakes puts waiting for a subtask to register.
    registered: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct TableState {
    schema: Option<SchemaRef>,
    parallelism: usize,
    /// Local subtask → (registration, its queue).
    inboxes: BTreeMap<usize, (u64, mpsc::Sender<Put>)>,
    /// Highest acknowledged sequence number per client.
    acks: HashMap<String, watch::Sender<Option<u64>>>,
}

static REGISTRATIONS: AtomicU64 = AtomicU64::new(1);

fn stable_hash(s: &str) -> u64 {
    // FNV-1a: the same in every process and run.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl IngestHub {
    /// The process-wide hub.
    pub fn global() -> &'static IngestHub {
        static HUB: OnceLock<IngestHub> = OnceLock::new();
        HUB.get_or_init(IngestHub::default)
    }

    fn table(&self, name: &str) -> Arc<IngestTable> {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(tables.entry(name.to_string()).or_insert_with(|| {
            Arc::new(IngestTable {
                name: name.to_string(),
                state: Mutex::default(),
                registered: tokio::sync::Notify::new(),
            })
        }))
    }
}

impl IngestTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, TableState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ack_watch(&self, client: &str) -> watch::Receiver<Option<u64>> {
        let mut state = self.lock();
        state
            .acks
            .entry(client.to_string())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// Acknowledge `client`'s batches up to `seq` (never backwards).
    fn ack(&self, client: &str, seq: u64) {
        let mut state = self.lock();
        let tx = state
            .acks
            .entry(client.to_string())
            .or_insert_with(|| watch::channel(None).0);
        tx.send_if_modified(|v| {
            if v.is_none_or(|old| old < seq) {
                *v = Some(seq);
                true
            } else {
                false
            }
        });
    }

    /// The queue `client` lands on: its subtask by hash when that subtask
    /// runs here, else one of those that do (by the same hash).
    fn inbox_for(&self, client: &str) -> Option<(SchemaRef, mpsc::Sender<Put>)> {
        let state = self.lock();
        let schema = state.schema.clone()?;
        let h = stable_hash(client);
        let owner = (h % state.parallelism.max(1) as u64) as usize;
        let (_, tx) = state.inboxes.get(&owner).or_else(|| {
            let n = state.inboxes.len();
            (n > 0).then(|| {
                state
                    .inboxes
                    .values()
                    .nth((h % n as u64) as usize)
                    .expect("n > 0")
            })
        })?;
        Some((schema, tx.clone()))
    }
}

/// A put's client name: the descriptor's second path element, or a fresh
/// one.
fn client_name(path: &[String]) -> (String, bool) {
    match path.get(1) {
        Some(c) => (c.clone(), true),
        None => {
            static N: AtomicU64 = AtomicU64::new(0);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::time::SystemTime::now().hash(&mut h);
            std::process::id().hash(&mut h);
            N.fetch_add(1, Ordering::Relaxed).hash(&mut h);
            (format!("anonymous-{:016x}", h.finish()), false)
        }
    }
}

fn ack_message(client: &str, acked: Option<u64>) -> PutResult {
    PutResult {
        app_metadata: serde_json::json!({ "client": client, "acked": acked })
            .to_string()
            .into(),
    }
}

/// The rows of a pushed batch as the table declares them: the same column
/// names in order, each column cast to the declared type.
fn conform(
    batch: RecordBatch,
    schema: &SchemaRef,
    table: &str,
    index: u64,
) -> std::result::Result<RecordBatch, Status> {
    let bad = |m: String| Status::invalid_argument(format!("table '{table}', batch {index}: {m}"));
    if batch.num_columns() != schema.fields().len() {
        return Err(bad(format!(
            "{} columns, the table has {} ({})",
            batch.num_columns(),
            schema.fields().len(),
            names(schema)
        )));
    }
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (i, want) in schema.fields().iter().enumerate() {
        let got = batch.schema().field(i).clone();
        if !got.name().eq_ignore_ascii_case(want.name()) {
            return Err(bad(format!(
                "column {} is '{}', the table's is '{}' ({})",
                i + 1,
                got.name(),
                want.name(),
                names(schema)
            )));
        }
        let column = batch.column(i);
        if !want.is_nullable() && column.null_count() > 0 {
            return Err(bad(format!(
                "column '{}' holds NULLs but is NOT NULL",
                want.name()
            )));
        }
        let cast = arrow::compute::cast_with_options(
            column,
            want.data_type(),
            &arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            },
        )
        .map_err(|e| {
            bad(format!(
                "column '{}' ({}) does not convert to {}: {e}",
                want.name(),
                got.data_type(),
                want.data_type()
            ))
        })?;
        columns.push(cast);
    }
    RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| bad(e.to_string()))
}

fn names(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sequence number in a batch's `app_metadata`.
fn sequence(metadata: &[u8], table: &str, index: u64) -> std::result::Result<u64, Status> {
    std::str::from_utf8(metadata)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "table '{table}', batch {index}: app_metadata must be the batch's sequence \
                 number (decimal text), got {:?}",
                String::from_utf8_lossy(&metadata[..metadata.len().min(40)])
            ))
        })
}

type PutStream = BoxStream<'static, std::result::Result<PutResult, Status>>;

/// Take one client's put (the node's `do_put` for a path descriptor).
pub(crate) async fn do_put(
    path: Vec<String>,
    stream: Peekable<Streaming<FlightData>>,
) -> std::result::Result<Response<PutStream>, Status> {
    let name = path
        .first()
        .cloned()
        .ok_or_else(|| Status::invalid_argument("the descriptor must name a table (path)"))?;
    let table = IngestHub::global().table(&name);
    let (client, named) = client_name(&path);
    let deadline = tokio::time::Instant::now() + SOURCE_WAIT;
    let (schema, inbox) = loop {
        let registered = table.registered.notified();
        tokio::pin!(registered);
        registered.as_mut().enable();
        if let Some(found) = table.inbox_for(&client) {
            break found;
        }
        if tokio::time::timeout_at(deadline, registered).await.is_err() {
            return Err(Status::unavailable(format!(
                "no source of table '{name}' runs in this process"
            )));
        }
    };
    let acks = table.ack_watch(&client);
    let (tx, rx) = mpsc::channel::<std::result::Result<PutResult, Status>>(16);
    let initial = *acks.borrow();
    let _ = tx.send(Ok(ack_message(&client, initial))).await;
    let put = PutReader {
        table: Arc::clone(&table),
        schema,
        inbox,
        client,
        named,
        acks,
        results: tx,
    };
    tokio::spawn(put.run(stream));
    let results = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(Response::new(results.boxed()))
}

/// Moves one put's batches into the table's queue and its acknowledgements
/// back to the client.
struct PutReader {
    table: Arc<IngestTable>,
    schema: SchemaRef,
    inbox: mpsc::Sender<Put>,
    client: String,
    named: bool,
    acks: watch::Receiver<Option<u64>>,
    results: mpsc::Sender<std::result::Result<PutResult, Status>>,
}

impl PutReader {
    async fn run(mut self, stream: Peekable<Streaming<FlightData>>) {
        if let Err(status) = self.forward(stream).await {
            tracing::info!(
                "put of client '{}' into '{}' ended: {}",
                self.client,
                self.table.name,
                status.message()
            );
            let _ = self.results.send(Err(status)).await;
        }
    }

    async fn forward(
        &mut self,
        stream: Peekable<Streaming<FlightData>>,
    ) -> std::result::Result<(), Status> {
        let name = self.table.name.clone();
        let flights = stream.map(|r| {
            let data = r.map_err(|s| arrow_flight::error::FlightError::Tonic(Box::new(s)))?;
            weir_core::wire::check_ipc_message(&data.data_header, &data.data_body)
                .map_err(|e| arrow_flight::error::FlightError::DecodeError(e.to_string()))?;
            Ok(data)
        });
        let mut decoder = FlightDataDecoder::new(flights);
        let mut index = 0u64;
        let mut last: Option<u64> = None;
        let mut input_done = false;
        let gone = || {
            Status::unavailable(format!(
                "the source of table '{name}' stopped (the job restarted or ended); \
                 reconnect and resend from the last acknowledged batch"
            ))
        };
        loop {
            if input_done && last.is_none_or(|l| self.acks.borrow().is_some_and(|a| a >= l)) {
                return Ok(());
            }
            tokio::select! {
                changed = self.acks.changed() => {
                    if changed.is_err() {
                        return Err(gone());
                    }
                    let acked = *self.acks.borrow_and_update();
                    if self.results.send(Ok(ack_message(&self.client, acked))).await.is_err() {
                        return Ok(());
                    }
                }
                item = decoder.next(), if !input_done => {
                    let Some(item) = item else {
                        input_done = true;
                        continue;
                    };
                    let decoded = item.map_err(|e| {
                        Status::invalid_argument(format!("table '{name}', batch {}: {e}", index + 1))
                    })?;
                    let DecodedPayload::RecordBatch(batch) = decoded.payload else {
                        continue;
                    };
                    index += 1;
                    let seq = if self.named {
                        sequence(&decoded.inner.app_metadata, &name, index)?
                    } else {
                        index
                    };
                    if last.is_some_and(|l| seq <= l) {
                        return Err(Status::invalid_argument(format!(
                            "table '{name}', batch {index}: sequence number {seq} does not \
                             follow {} (they must increase)",
                            last.unwrap_or_default()
                        )));
                    }
                    last = Some(seq);
                    let batch = conform(batch, &self.schema, &name, index)?;
                    let put = Put { client: self.client.clone(), seq, batch };
                    // A full queue stops reading here: HTTP/2 flow control
                    // holds the client.
                    self.inbox.send(put).await.map_err(|_| gone())?;
                }
                _ = self.inbox.closed(), if input_done => return Err(gone()),
                _ = self.results.closed() => return Ok(()),
            }
        }
    }
}

/// One subtask's reader of a `flight` table.
pub(crate) struct FlightSource {
    table: Arc<IngestTable>,
    subtask: usize,
    registration: u64,
    inbox: mpsc::Receiver<Put>,
    checkpointing: bool,
    /// Highest sequence number taken per client (restored ones included).
    taken: HashMap<String, u64>,
    /// Positions of checkpoints taken and not yet completed.
    pending: VecDeque<(u64, Vec<(String, u64)>)>,
    /// Resent batches dropped because their number was taken already.
    duplicates: u64,
}

impl FlightSource {
    /// Register subtask `subtask` of `parallelism` as a reader of table
    /// `name` with `schema`, taking up to `queue` batches ahead.
    pub(crate) fn open(
        name: &str,
        schema: SchemaRef,
        subtask: usize,
        parallelism: usize,
        queue: usize,
        checkpointing: bool,
    ) -> Self {
        let table = IngestHub::global().table(name);
        let (tx, rx) = mpsc::channel(queue.max(1));
        let registration = REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
        {
            let mut state = table.lock();
            state.schema = Some(schema);
            state.parallelism = parallelism;
            state.inboxes.insert(subtask, (registration, tx));
        }
        table.registered.notify_waiters();
        Self {
            table,
            subtask,
            registration,
            inbox: rx,
            checkpointing,
            taken: HashMap::new(),
            pending: VecDeque::new(),
            duplicates: 0,
        }
    }
}

impl Drop for FlightSource {
    fn drop(&mut self) {
        let mut state = self.table.lock();
        if state
            .inboxes
            .get(&self.subtask)
            .is_some_and(|(r, _)| *r == self.registration)
        {
            state.inboxes.remove(&self.subtask);
        }
    }
}

fn position_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("client", DataType::Utf8, false),
        Field::new("seq", DataType::UInt64, false),
    ]))
}

impl Source for FlightSource {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        loop {
            match self.inbox.try_recv() {
                Ok(put) => {
                    if self.taken.get(&put.client).is_some_and(|t| *t >= put.seq) {
                        self.duplicates += 1;
                        tracing::debug!(
                            "table '{}': batch {} of client '{}' was taken already; dropped \
                             ({} resent batches dropped)",
                            self.table.name,
                            put.seq,
                            put.client,
                            self.duplicates
                        );
                        continue;
                    }
                    self.taken.insert(put.client.clone(), put.seq);
                    if !self.checkpointing {
                        self.table.ack(&put.client, put.seq);
                    }
                    return Ok(SourcePoll::Batch(put.batch));
                }
                Err(_) => return Ok(SourcePoll::Pending(Duration::from_millis(1))),
            }
        }
    }

    /// One row per client whose batches this subtask has seen: the highest
    /// sequence number taken.
    fn snapshot_position(&mut self, checkpoint: u64) -> Result<RecordBatch> {
        let mut rows: Vec<(String, u64)> =
            self.taken.iter().map(|(c, s)| (c.clone(), *s)).collect();
        rows.sort();
        let batch = RecordBatch::try_new(
            position_schema(),
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.0))),
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )?;
        self.pending.push_back((checkpoint, rows));
        Ok(batch)
    }

    /// Every old subtask's numbers (the position is union state): a client
    /// may land on another subtask after a rescale.
    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        self.taken.clear();
        self.pending.clear();
        for b in positions {
            let malformed = || {
                WeirError::Execution(format!(
                    "flight source '{}': malformed checkpointed position",
                    self.table.name
                ))
            };
            let clients = b.column(0).as_string_opt::<i32>().ok_or_else(malformed)?;
            let seqs = b
                .column(1)
                .as_primitive_opt::<UInt64Type>()
                .ok_or_else(malformed)?;
            for r in 0..b.num_rows() {
                let seq = self.taken.entry(clients.value(r).to_string()).or_default();
                *seq = (*seq).max(seqs.value(r));
            }
        }
        // The restored checkpoint completed: what it covers is acknowledged.
        for (client, seq) in &self.taken {
            self.table.ack(client, *seq);
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        let mut covered = None;
        while self.pending.front().is_some_and(|(c, _)| *c <= checkpoint) {
            covered = self.pending.pop_front().map(|(_, rows)| rows);
        }
        for (client, seq) in covered.unwrap_or_default() {
            self.table.ack(&client, seq);
        }
        Ok(())
    }

    fn position_is_union(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn batch(values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "n",
            Arc::new(Int64Array::from(values.to_vec())) as arrow::array::ArrayRef,
        )])
        .unwrap()
    }

    fn take(source: &mut FlightSource) -> Vec<i64> {
        let mut out = vec![];
        while let SourcePoll::Batch(b) = source.poll_next().unwrap() {
            out.extend(
                b.column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values(),
            );
        }
        out
    }

    #[test]
    fn resent_batches_are_dropped_and_acks_follow_completed_checkpoints() {
        let schema = batch(&[]).schema();
        let mut source = FlightSource::open("dedup", schema, 0, 1, 8, true);
        let (_, tx) = source.table.inbox_for("c").unwrap();
        let acks = source.table.ack_watch("c");
        let send = |seq, v: &[i64]| {
            tx.try_send(Put {
                client: "c".into(),
                seq,
                batch: batch(v),
            })
            .unwrap()
        };
        send(1, &[1]);
        send(2, &[2]);
        assert_eq!(take(&mut source), vec![1, 2]);
        let position = source.snapshot_position(7).unwrap();
        send(3, &[3]);
        assert_eq!(take(&mut source), vec![3]);
        assert_eq!(
            *acks.borrow(),
            None,
            "nothing is acknowledged before completion"
        );
        source.notify_checkpoint_complete(7).unwrap();
        assert_eq!(*acks.borrow(), Some(2));
        // The client resends from its last acknowledgement: 3 is dropped.
        send(3, &[3]);
        send(4, &[4]);
        assert_eq!(take(&mut source), vec![4]);
        // A restore to checkpoint 7 takes 3 again, once.
        let mut restored = FlightSource::open("dedup", batch(&[]).schema(), 0, 1, 8, true);
        restored.restore_position(vec![position]).unwrap();
        let (_, tx) = restored.table.inbox_for("c").unwrap();
        for (seq, v) in [(3, 3), (4, 4), (3, 3)] {
            tx.try_send(Put {
                client: "c".into(),
                seq,
                batch: batch(&[v]),
            })
            .unwrap();
        }
        assert_eq!(take(&mut restored), vec![3, 4]);
    }

    #[test]
    fn pushed_columns_are_checked_and_cast() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let ints = RecordBatch::try_from_iter([(
            "N",
            Arc::new(arrow::array::Int32Array::from(vec![1, 2])) as arrow::array::ArrayRef,
        )])
        .unwrap();
        let cast = conform(ints, &schema, "t", 1).unwrap();
        assert_eq!(cast.schema(), schema);
        let wrong = RecordBatch::try_from_iter([(
            "m",
            Arc::new(Int64Array::from(vec![1])) as arrow::array::ArrayRef,
        )])
        .unwrap();
        let e = conform(wrong, &schema, "t", 4).unwrap_err();
        assert!(e.message().contains("batch 4: column 1 is 'm'"), "{e}");
        let nulls = RecordBatch::try_from_iter([(
            "n",
            Arc::new(Int64Array::from(vec![Some(1), None])) as arrow::array::ArrayRef,
        )])
        .unwrap();
        let e = conform(nulls, &schema, "t", 2).unwrap_err();
        assert!(e.message().contains("NOT NULL"), "{e}");
        let e = sequence(b"x1", "t", 3).unwrap_err();
        assert!(e.message().contains("batch 3: app_metadata"), "{e}");
    }
}
