//! Parquet row groups decoded on rayon's pool ahead of the task that
//! reads them.
//!
//! The Parquet source's task thread would otherwise decode each batch
//! (decompression, dictionary and level decoding) and then run the chained
//! operators on it, one after the other. A [`ReadAhead`] runs the split's
//! reader on the process's rayon pool and hands the task decoded batches,
//! so decoding overlaps the operators on another core.
//!
//! Rayon jobs never block: a job decodes until [`AHEAD`] batches wait
//! unread, then parks the reader and ends; the reading side starts a new
//! job when it has taken half of them. A blocked job would hold one of the
//! pool's few threads while its task waits on back-pressure from a task
//! whose own decoding needs that thread.
//!
//! CSV and JSON files are not read ahead: parsing is nearly all of such a
//! job's work, so there is little to overlap, and the hand-off cost more
//! than it saved (a GROUP BY over lineitem as 770 MB of CSV at parallelism
//! 1 on 2 cores: 3.8 s parsed inline, 3.9-4.0 s read ahead). They are
//! parsed in pieces side by side instead ([`super::pieces`]).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

/// Whether `tasks` threads leave cores idle (the cores this process may
/// run on): a source of that many subtasks reads ahead. Handing
/// decoded batches to another core costs their cache locality: TPC-H q1
/// over lineitem in batch mode on 2 cores took 0.28 s instead of 0.40 s at
/// parallelism 1, but 0.25 s instead of 0.21 s at parallelism 2, where both
/// cores already decode.
pub(crate) fn worth_it(parallelism: usize) -> bool {
    parallelism < std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How a source words a reader's error.
pub(crate) type Describe = fn(&ArrowError) -> String;

/// A split's reader: decoded on the task thread, or ahead of it.
pub(crate) enum SplitReader<R> {
    Inline(R, Describe),
    Ahead(ReadAhead<R>),
}

impl<R> SplitReader<R>
where
    R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send + 'static,
{
    pub(crate) fn new(reader: R, location: &str, ahead: bool, describe: Describe) -> Self {
        if ahead {
            SplitReader::Ahead(ReadAhead::start(reader, location, describe))
        } else {
            SplitReader::Inline(reader, describe)
        }
    }
}

impl<R> Iterator for SplitReader<R>
where
    R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send + 'static,
{
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        match self {
            SplitReader::Inline(r, describe) => r.next().map(|r| r.map_err(|e| describe(&e))),
            SplitReader::Ahead(r) => r.next(),
        }
    }
}

/// Batches decoded ahead of the reader, at most, per split.
const AHEAD: usize = 8;

type Item = std::result::Result<RecordBatch, String>;

struct State<R> {
    /// The reader while no job runs it; `None` while one does or at the end.
    parked: Option<R>,
    decoded: VecDeque<Item>,
    running: bool,
    finished: bool,
    /// The reading side is gone: a running job stops.
    abandoned: bool,
}

struct Shared<R> {
    state: Mutex<State<R>>,
    ready: Condvar,
}

impl<R> Shared<R> {
    fn lock(&self) -> MutexGuard<'_, State<R>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A split's batches, decoded by rayon jobs. Errors are the reader's, as
/// the source words them; a panic in the decoder is `malformed data: …` (as
/// [`weir_core::error::guard_decoder`] reports it).
pub(crate) struct ReadAhead<R> {
    shared: Arc<Shared<R>>,
    location: Arc<str>,
    describe: Describe,
}

impl<R> ReadAhead<R>
where
    R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send + 'static,
{
    /// Start decoding `reader` (the split at `location`) now.
    pub(crate) fn start(reader: R, location: &str, describe: Describe) -> Self {
        let this = Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    parked: Some(reader),
                    decoded: VecDeque::new(),
                    running: false,
                    finished: false,
                    abandoned: false,
                }),
                ready: Condvar::new(),
            }),
            location: location.into(),
            describe,
        };
        let mut state = this.shared.lock();
        this.resume(&mut state);
        drop(state);
        this
    }

    /// Start a job on the parked reader, if there is one.
    fn resume(&self, state: &mut State<R>) {
        let Some(reader) = state.parked.take() else {
            return;
        };
        state.running = true;
        let shared = Arc::clone(&self.shared);
        let (location, describe) = (Arc::clone(&self.location), self.describe);
        name_pool_threads();
        rayon::spawn(move || decode(shared, reader, &location, describe));
    }
}

/// Rayon's pool threads are named `weir-rayon-N` (in `top`, `perf` and
/// panics), not after the task thread that happened to start the pool.
pub(crate) fn name_pool_threads() {
    static NAMED: std::sync::Once = std::sync::Once::new();
    NAMED.call_once(|| {
        // Fails only when the pool already runs (started by other code in
        // the process): its names stay as they are.
        let _ = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("weir-rayon-{i}"))
            .build_global();
    });
}

fn decode<R>(shared: Arc<Shared<R>>, mut reader: R, location: &str, describe: Describe)
where
    R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>>,
{
    loop {
        let next = weir_core::error::guard_decoder(|| location.to_string(), || Ok(reader.next()));
        let mut state = shared.lock();
        let (item, last) = match next {
            Ok(Some(Ok(batch))) => (Some(Ok(batch)), false),
            Ok(Some(Err(e))) => (Some(Err(describe(&e))), true),
            Ok(None) => (None, true),
            Err(weir_core::WeirError::BadInput { message, .. }) => (Some(Err(message)), true),
            Err(other) => (Some(Err(other.to_string())), true),
        };
        state.decoded.extend(item);
        if last {
            state.finished = true;
        }
        let stop = last || state.abandoned || state.decoded.len() >= AHEAD;
        if stop {
            state.running = false;
            if !last && !state.abandoned {
                state.parked = Some(reader);
            }
            shared.ready.notify_all();
            return;
        }
        shared.ready.notify_all();
    }
}

impl<R> Iterator for ReadAhead<R>
where
    R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send + 'static,
{
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        let mut state = self.shared.lock();
        loop {
            if let Some(item) = state.decoded.pop_front() {
                // A parked job resumes when half the batches ahead are
                // taken, not at each one: fewer jobs, fewer wake-ups.
                if !state.running && !state.finished && state.decoded.len() <= AHEAD / 2 {
                    self.resume(&mut state);
                }
                return Some(item);
            }
            if state.finished {
                return None;
            }
            if !state.running {
                self.resume(&mut state);
            }
            state = self
                .shared
                .ready
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl<R> Drop for ReadAhead<R> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.abandoned = true;
        state.parked = None;
        state.decoded.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};

    fn batches(n: i64) -> impl Iterator<Item = std::result::Result<RecordBatch, ArrowError>> {
        (0..n).map(|i| {
            Ok(
                RecordBatch::try_from_iter([(
                    "n",
                    Arc::new(Int64Array::from(vec![i])) as ArrayRef,
                )])
                .unwrap(),
            )
        })
    }

    fn values(items: impl Iterator<Item = Item>) -> Vec<std::result::Result<i64, String>> {
        use arrow::array::AsArray;
        use arrow::datatypes::Int64Type;
        items
            .map(|r| r.map(|b| b.column(0).as_primitive::<Int64Type>().value(0)))
            .collect()
    }

    #[test]
    fn every_batch_arrives_in_order_across_parked_jobs() {
        // Many more batches than are decoded ahead: jobs park and resume.
        let got = values(ReadAhead::start(batches(1000), "f", |e| e.to_string()));
        assert_eq!(got, (0..1000).map(Ok).collect::<Vec<_>>());
    }

    #[test]
    fn an_error_ends_the_split_and_a_panic_is_malformed_data() {
        let failing = batches(3).chain(std::iter::once(Err(ArrowError::ParseError(
            "bad page".into(),
        ))));
        let got = values(ReadAhead::start(failing.chain(batches(5)), "f", |e| {
            e.to_string()
        }));
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got[3].as_ref().unwrap_err().contains("bad page"), "{got:?}");

        let panicking = batches(2).chain(std::iter::from_fn(|| -> Option<_> {
            panic!("index out of bounds in the decoder")
        }));
        let got = values(ReadAhead::start(panicking, "f", |e| e.to_string()));
        assert_eq!(got.len(), 3, "{got:?}");
        let error = got[2].as_ref().unwrap_err();
        assert!(
            error.contains("malformed data: index out of bounds"),
            "{error}"
        );
    }

    #[test]
    fn dropping_the_reader_stops_decoding() {
        let decoded = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&decoded);
        let counted = batches(1_000_000).inspect(move |_| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let mut reader = ReadAhead::start(counted, "f", |e| e.to_string());
        reader.next().unwrap().unwrap();
        drop(reader);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let n = decoded.load(std::sync::atomic::Ordering::Relaxed);
        assert!(n <= 1 + 2 * AHEAD, "{n} batches decoded");
    }
}
