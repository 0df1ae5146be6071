//! Readable sinks: where a Flight sink keeps its output for clients.
//!
//! A sink named `n` collects the batches of all its subtasks in one buffer;
//! the Flight sink server (`weir-flight`) lists the buffers and streams
//! them to clients by an opaque, unguessable ticket. The buffer keeps
//! everything the job wrote (so a client that connects late still reads all
//! of it) and knows when every subtask has finished.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

/// The output of one readable sink.
#[derive(Debug)]
pub struct SinkBuffer {
    /// Sink name (unique within the process).
    pub name: String,
    /// Opaque ticket clients present to read it.
    pub ticket: String,
    /// Schema of every batch.
    pub schema: SchemaRef,
    batches: Mutex<Vec<RecordBatch>>,
    writers: AtomicUsize,
    opened: AtomicBool,
}

impl SinkBuffer {
    /// Batches from index `from` on.
    pub fn batches_from(&self, from: usize) -> Vec<RecordBatch> {
        let b = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        b.get(from..)
            .map(<[RecordBatch]>::to_vec)
            .unwrap_or_default()
    }

    /// Rows written so far.
    pub fn num_rows(&self) -> usize {
        let b = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        b.iter().map(|x| x.num_rows()).sum()
    }

    /// Append a batch (a sink subtask).
    pub fn push(&self, batch: RecordBatch) {
        self.batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(batch);
    }

    /// A sink subtask starts writing.
    pub fn open_writer(&self) {
        self.opened.store(true, Ordering::SeqCst);
        self.writers.fetch_add(1, Ordering::SeqCst);
    }

    /// A sink subtask finished.
    pub fn close_writer(&self) {
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether every subtask that opened the sink has finished.
    pub fn is_finished(&self) -> bool {
        self.opened.load(Ordering::SeqCst) && self.writers.load(Ordering::SeqCst) == 0
    }
}

/// All readable sinks of this process.
#[derive(Debug, Default)]
pub struct SinkHub {
    sinks: Mutex<HashMap<String, Arc<SinkBuffer>>>,
}

fn random_token() -> String {
    let mut out = String::new();
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

impl SinkHub {
    /// The process-wide hub.
    pub fn global() -> &'static SinkHub {
        static HUB: OnceLock<SinkHub> = OnceLock::new();
        HUB.get_or_init(SinkHub::default)
    }

    /// The buffer of sink `name`, created on first use with `schema`.
    pub fn sink(&self, name: &str, schema: SchemaRef) -> Arc<SinkBuffer> {
        let mut sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(sinks.entry(name.to_string()).or_insert_with(|| {
            Arc::new(SinkBuffer {
                name: name.to_string(),
                ticket: random_token(),
                schema,
                batches: Mutex::new(Vec::new()),
                writers: AtomicUsize::new(0),
                opened: AtomicBool::new(false),
            })
        }))
    }

    /// Every readable sink.
    pub fn list(&self) -> Vec<Arc<SinkBuffer>> {
        let sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = sinks.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The sink a ticket names, if the ticket is valid.
    pub fn by_ticket(&self, ticket: &str) -> Option<Arc<SinkBuffer>> {
        let sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        sinks.values().find(|s| s.ticket == ticket).cloned()
    }

    /// The sink named `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<SinkBuffer>> {
        let sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        sinks.get(name).cloned()
    }
}
