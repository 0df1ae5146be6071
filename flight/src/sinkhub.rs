//! Readable sinks: where a Flight sink keeps its output for clients.
//!
//! A sink named `n` collects the batches of all its subtasks in one buffer;
//! the Flight sink server (`weir-flight`) lists the buffers and streams
//! them to clients by an opaque, unguessable ticket. The buffer keeps what
//! the job wrote within its [`SinkRetention`] (the newest 256 MiB by
//! default, so a sink nobody reads stays bounded), numbers rows from the
//! first one the sink ever received, and knows when every subtask has
//! finished.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use weir_core::config::SinkRetention;

/// The output of one readable sink.
#[derive(Debug)]
pub struct SinkBuffer {
    /// Sink name (unique within the process).
    pub name: String,
    /// Opaque ticket clients present to read it.
    pub ticket: String,
    /// Schema of every batch.
    pub schema: SchemaRef,
    retention: SinkRetention,
    retained: Mutex<Retained>,
    /// Subtasks that opened the sink, and those that finished it. A
    /// subtask whose task was cancelled (a restart) finishes when a later
    /// attempt's instance does, so readers see the end only once every
    /// subtask has really ended.
    writers: Mutex<(
        std::collections::HashSet<usize>,
        std::collections::HashSet<usize>,
    )>,
    /// (subtask, checkpoint) whose rows were published (read-committed
    /// sinks), so a restore never publishes them twice.
    published: Mutex<std::collections::HashSet<(usize, u64)>>,
    /// Wakes readers waiting for rows or the end.
    changed: tokio::sync::Notify,
}

/// The retained tail of a sink's output.
#[derive(Debug, Default)]
struct Retained {
    /// Batches with the time they arrived and their memory size.
    batches: VecDeque<(RecordBatch, Instant, usize)>,
    /// Number (from 0) of the first retained row.
    first_row: usize,
    rows: usize,
    bytes: usize,
}

impl Retained {
    /// Drop the oldest rows beyond `limits`: whole batches for bytes and
    /// age, exactly the excess rows for a row limit.
    fn evict(&mut self, limits: &SinkRetention) {
        let now = Instant::now();
        while let Some((front, arrived, size)) = self.batches.front_mut() {
            let whole = limits.max_bytes.is_some_and(|m| self.bytes > m)
                || limits
                    .max_age
                    .is_some_and(|m| now.duration_since(*arrived) > m);
            let excess = limits.max_rows.map_or(0, |m| self.rows.saturating_sub(m));
            let drop = if whole {
                front.num_rows()
            } else {
                excess.min(front.num_rows())
            };
            if drop == 0 && !whole {
                break;
            }
            if drop < front.num_rows() {
                *front = front.slice(drop, front.num_rows() - drop);
            } else {
                self.bytes -= *size;
                self.batches.pop_front();
            }
            self.first_row += drop;
            self.rows -= drop;
        }
    }
}

/// A read asked for rows the sink's retention has already dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsDropped {
    /// The first row asked for.
    pub asked: usize,
    /// The first row still retained.
    pub first_retained: usize,
}

impl std::fmt::Display for RowsDropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rows {}..{} were dropped by the sink's retention; the oldest retained row is {}",
            self.asked, self.first_retained, self.first_retained
        )
    }
}

fn check_retained(asked: usize, first_retained: usize) -> std::result::Result<(), RowsDropped> {
    if asked < first_retained {
        return Err(RowsDropped {
            asked,
            first_retained,
        });
    }
    Ok(())
}

impl SinkBuffer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Retained> {
        self.retained.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The retained rows from row `from` on (from the oldest retained row
    /// when `None`), as batches, and the number of the row after them.
    pub fn read_from(
        &self,
        from: Option<usize>,
    ) -> std::result::Result<(Vec<RecordBatch>, usize), RowsDropped> {
        let mut retained = self.lock();
        retained.evict(&self.retention);
        let first = retained.first_row;
        let from = from.unwrap_or(first);
        check_retained(from, first)?;
        let mut skip = from - first;
        let mut out = Vec::new();
        for (batch, _, _) in &retained.batches {
            let n = batch.num_rows();
            if skip >= n {
                skip -= n;
            } else {
                out.push(batch.slice(skip, n - skip));
                skip = 0;
            }
        }
        let end = first + retained.rows;
        Ok((out, end.max(from)))
    }

    /// Whether row `from` is still retained (or yet to come), without
    /// reading anything.
    pub fn check_retained(&self, from: usize) -> std::result::Result<(), RowsDropped> {
        let mut retained = self.lock();
        retained.evict(&self.retention);
        check_retained(from, retained.first_row)
    }

    /// Rows retained now.
    pub fn num_rows(&self) -> usize {
        self.lock().rows
    }

    /// Append a batch (a sink subtask), dropping what retention no longer keeps.
    pub fn push(&self, batch: RecordBatch) {
        let size = batch.get_array_memory_size();
        let mut retained = self.lock();
        retained.rows += batch.num_rows();
        retained.bytes += size;
        retained.batches.push_back((batch, Instant::now(), size));
        retained.evict(&self.retention);
        drop(retained);
        self.changed.notify_waiters();
    }

    /// Resolves at the next push or writer close; create it (and `enable`
    /// it) before checking for rows so no change is missed.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// Publish the rows subtask `subtask` staged up to checkpoint
    /// `checkpoint`, once: false when they were published already.
    pub fn publish(&self, subtask: usize, checkpoint: u64, batches: Vec<RecordBatch>) -> bool {
        let fresh = self
            .published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((subtask, checkpoint));
        if fresh {
            for b in batches {
                self.push(b);
            }
        }
        fresh
    }

    /// Sink subtask `subtask` starts writing.
    pub fn open_writer(&self, subtask: usize) {
        let mut w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        w.0.insert(subtask);
        w.1.remove(&subtask);
    }

    /// Sink subtask `subtask` reached the end of its input.
    pub fn close_writer(&self, subtask: usize) {
        self.writers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .insert(subtask);
        self.changed.notify_waiters();
    }

    /// Whether every subtask that opened the sink has finished.
    pub fn is_finished(&self) -> bool {
        let w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        !w.0.is_empty() && w.0.is_subset(&w.1)
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

    /// The buffer of sink `name`, created on first use with `schema` and
    /// `retention`.
    pub fn sink(&self, name: &str, schema: SchemaRef, retention: SinkRetention) -> Arc<SinkBuffer> {
        let mut sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(sinks.entry(name.to_string()).or_insert_with(|| {
            Arc::new(SinkBuffer {
                name: name.to_string(),
                ticket: random_token(),
                schema,
                retention,
                retained: Mutex::new(Retained::default()),
                writers: Mutex::default(),
                published: Mutex::default(),
                changed: tokio::sync::Notify::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};

    fn batch(values: std::ops::Range<i64>) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "n",
            Arc::new(Int64Array::from_iter_values(values)) as ArrayRef,
        )])
        .unwrap()
    }

    #[test]
    fn reads_resume_at_a_row_across_batches() {
        let hub = SinkHub::default();
        let sink = hub.sink("all", batch(0..1).schema(), SinkRetention::default());
        sink.push(batch(0..3));
        sink.push(batch(3..8));
        let (batches, next) = sink.read_from(Some(4)).unwrap();
        assert_eq!(batches, vec![batch(4..8)]);
        assert_eq!(next, 8);
        let (batches, next) = sink.read_from(Some(8)).unwrap();
        assert!(batches.is_empty());
        assert_eq!(next, 8);
        assert_eq!(sink.num_rows(), 8);
    }

    #[test]
    fn retention_drops_the_oldest_batches_and_says_so() {
        let hub = SinkHub::default();
        let limits = SinkRetention {
            max_rows: Some(5),
            ..Default::default()
        };
        let sink = hub.sink("bounded", batch(0..1).schema(), limits);
        sink.push(batch(0..3));
        sink.push(batch(3..6));
        sink.push(batch(6..9));
        // 9 rows > 5: exactly the newest five rows, 4..9, remain.
        assert_eq!(sink.num_rows(), 5);
        let (batches, next) = sink.read_from(None).unwrap();
        assert_eq!((batches, next), (vec![batch(4..6), batch(6..9)], 9));
        let err = sink.read_from(Some(2)).unwrap_err();
        assert_eq!(err.first_retained, 4);
        assert!(err.to_string().contains("rows 2..4 were dropped"), "{err}");
    }

    #[test]
    fn retention_is_bounded_by_default_and_by_bytes() {
        assert_eq!(
            SinkRetention::default().max_bytes,
            Some(weir_core::config::DEFAULT_SINK_RETENTION_BYTES)
        );
        let hub = SinkHub::default();
        let one = batch(0..1000).get_array_memory_size();
        let limits = SinkRetention {
            max_bytes: Some(one * 3),
            ..Default::default()
        };
        let sink = hub.sink("bytes", batch(0..1).schema(), limits);
        for i in 0..100 {
            sink.push(batch(i * 1000..(i + 1) * 1000));
        }
        // A hundred batches pushed with no reader: three are kept.
        assert_eq!(sink.num_rows(), 3000);
        let (batches, next) = sink.read_from(None).unwrap();
        assert_eq!(batches.first(), Some(&batch(97_000..98_000)));
        assert_eq!(next, 100_000);
    }

    #[test]
    fn retention_by_age() {
        let hub = SinkHub::default();
        let limits = SinkRetention {
            max_age: Some(std::time::Duration::ZERO),
            ..Default::default()
        };
        let sink = hub.sink("aged", batch(0..1).schema(), limits);
        sink.push(batch(0..3));
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (batches, next) = sink.read_from(None).unwrap();
        assert!(batches.is_empty());
        assert_eq!(next, 3);
    }
}
