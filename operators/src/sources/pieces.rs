//! A text file (`csv`, `json`, `raw`) decoded in pieces side by side on
//! rayon's pool.
//!
//! Parsing is nearly all of the work of a job reading CSV or JSON lines,
//! so a source at parallelism 1 on a machine of several cores leaves the
//! others idle while it parses. A [`Pieces`] reader reads the file on the
//! task thread in pieces of about [`PIECE`] bytes, each ending at a line
//! break, and decodes them on the pool, a few at a time; the task takes
//! their rows in file order.
//!
//! A line break is not always the end of a record: a quoted CSV field
//! may hold one. Where a piece starts is therefore a guess that the piece
//! before it checks: decoded from a record's start (the file's start, or
//! a start checked the same way), it must end with no part of a record
//! held back ([`RowDecoder::between_records`]). When it does not, or a
//! piece does not decode (bad input), the pieces still out are dropped
//! and the file is read again in one piece from its start, the rows
//! already given skipped: its rows and its errors (with their line
//! numbers) are then exactly those of the sequential decoder.
//!
//! Rayon jobs never block: a job decodes its one piece and ends. The task
//! decodes a piece itself when it needs it and no job has taken it yet.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use arrow::record_batch::RecordBatch;
use weir_core::{Result, WeirError};

use crate::formats::RowDecoder;

/// About the bytes of a piece: it ends at the last line break of the
/// bytes read up to this size (past it when a record is longer).
///
/// Measured on 2 cores at parallelism 1 (Nexmark's 2 M events as CSV, a
/// GROUP BY over the bids): pieces of 4 MiB, three out, took 100 MB more
/// memory than reading in one piece, and fresh memory is slow on such
/// machines (the kernel zeroing pages was a third of the samples); 1 MiB,
/// four out, came out best of 256 KiB to 4 MiB.
pub(crate) const PIECE: usize = 1 << 20;

/// A new decoder of the file's rows, as for the file's start.
pub(crate) type MakeDecoder = Arc<dyn Fn() -> Result<Box<dyn RowDecoder>> + Send + Sync>;

/// The file read again from its start by one decoder.
pub(crate) type Whole = crate::formats::DecodeReader<std::io::BufReader<Box<dyn Read + Send>>>;

/// Whether a format's decoders can read pieces starting mid-file.
pub(crate) fn possible(make: &MakeDecoder) -> Result<bool> {
    Ok(make()?.start_mid_file())
}

/// A file's rows, decoded in pieces ahead of the reader.
pub(crate) struct Pieces {
    /// The file, until it is read to its end.
    file: Option<Box<dyn Read + Send>>,
    make: MakeDecoder,
    /// The next piece is the file's first.
    first: bool,
    /// Bytes read past the last piece's end.
    carry: Vec<u8>,
    /// Buffers of pieces decoded, for the next ones: memory the process
    /// has touched already (fresh pages cost the kernel's zeroing).
    spare: Vec<Vec<u8>>,
    /// Pieces started, in file order.
    out: VecDeque<Arc<Slot>>,
    /// Pieces started at most: one per pool thread, two more so that a
    /// thread finishing one finds another queued.
    most: usize,
    /// About the bytes of a piece ([`PIECE`]).
    piece: usize,
    /// Rows of the first piece taken, not yet given.
    ready: VecDeque<RecordBatch>,
    /// Rows given so far.
    given: u64,
    /// Records skipped (or mended) by the pieces taken.
    skipped: u64,
    /// Opens the file for one decoder, on a fall-back.
    reopen: Option<Box<dyn FnOnce() -> Result<Whole> + Send>>,
    /// After a fall-back: the file in one piece, and the rows of it to
    /// skip (given before).
    whole: Option<(Whole, u64)>,
    location: Arc<str>,
}

impl Pieces {
    /// Read `file` (at `location`) in pieces decoded by decoders from
    /// `make` (whose format [`possible`] accepts); `reopen` opens it again
    /// for one decoder, should a piece turn out to start inside a record.
    pub(crate) fn new(
        file: Box<dyn Read + Send>,
        make: MakeDecoder,
        location: &str,
        reopen: Box<dyn FnOnce() -> Result<Whole> + Send>,
    ) -> Self {
        super::read_ahead::name_pool_threads();
        Self {
            file: Some(file),
            make,
            first: true,
            carry: Vec::new(),
            spare: Vec::new(),
            out: VecDeque::new(),
            most: rayon::current_num_threads() + 2,
            piece: PIECE,
            ready: VecDeque::new(),
            given: 0,
            skipped: 0,
            reopen: Some(reopen),
            whole: None,
            location: location.into(),
        }
    }

    /// Records skipped for errors so far (`*.ignore-parse-errors`).
    pub(crate) fn skipped(&self) -> u64 {
        match &self.whole {
            Some((whole, _)) => whole.skipped(),
            None => self.skipped,
        }
    }

    /// Read and start pieces until [`Self::most`] are out or the file
    /// ends.
    fn start_pieces(&mut self) -> Result<()> {
        while self.out.len() < self.most {
            let Some(file) = &mut self.file else {
                return Ok(());
            };
            let mut bytes = self.spare.pop().unwrap_or_default();
            bytes.clear();
            bytes.append(&mut self.carry);
            bytes.reserve(self.piece);
            let last = loop {
                let want = self
                    .piece
                    .saturating_sub(bytes.len())
                    .max(self.piece.min(64 << 10));
                let got = file
                    .by_ref()
                    .take(want as u64)
                    .read_to_end(&mut bytes)
                    .map_err(|e| WeirError::Execution(format!("read: {e}")))?;
                if got < want {
                    break true;
                }
                if bytes.len() >= self.piece && memchr::memrchr(b'\n', &bytes).is_some() {
                    break false;
                }
            };
            if last {
                self.file = None;
                if bytes.is_empty() {
                    return Ok(());
                }
            } else if let Some(end) = memchr::memrchr(b'\n', &bytes) {
                self.carry.extend_from_slice(&bytes[end + 1..]);
                bytes.truncate(end + 1);
            }
            let mut decoder = (self.make)()?;
            if !std::mem::replace(&mut self.first, false) && !decoder.start_mid_file() {
                return Err(WeirError::Execution(
                    "this format cannot be read in pieces".into(),
                ));
            }
            let slot = Arc::new(Slot {
                step: Mutex::new(Step::Queued(Job {
                    bytes,
                    decoder,
                    last,
                })),
                done: Condvar::new(),
            });
            self.out.push_back(Arc::clone(&slot));
            let location = Arc::clone(&self.location);
            rayon::spawn(move || slot.run_queued(&location));
        }
        Ok(())
    }

    /// Drop the pieces out and read the file again in one piece, skipping
    /// the rows given.
    fn fall_back(&mut self) -> Result<()> {
        for slot in self.out.drain(..) {
            let mut step = slot.lock();
            if matches!(*step, Step::Queued(_)) {
                *step = Step::Gone;
            }
        }
        self.file = None;
        self.carry = Vec::new();
        self.ready.clear();
        let reopen = self
            .reopen
            .take()
            .ok_or_else(|| WeirError::Execution("the file was read in one piece already".into()))?;
        tracing::debug!(
            "{}: a piece did not start at a record or did not decode; reading the file in one piece",
            self.location
        );
        self.whole = Some((reopen()?, self.given));
        Ok(())
    }
}

impl Iterator for Pieces {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((whole, skip)) = &mut self.whole {
                return skip_rows(whole, skip);
            }
            if let Some(batch) = self.ready.pop_front() {
                self.given += batch.num_rows() as u64;
                return Some(Ok(batch));
            }
            if let Err(e) = self.start_pieces() {
                return Some(Err(e));
            }
            let slot = self.out.pop_front()?;
            match slot.outcome(&self.location) {
                Outcome::Rows {
                    batches,
                    skipped,
                    bytes,
                } => {
                    self.ready.extend(batches);
                    self.skipped += skipped;
                    self.spare.push(bytes);
                }
                Outcome::Doubtful => {
                    if let Err(e) = self.fall_back() {
                        return Some(Err(e));
                    }
                }
            }
        }
    }
}

/// The next batch of `rows` after the first `skip` of them.
pub(crate) fn skip_rows<I>(rows: &mut I, skip: &mut u64) -> Option<I::Item>
where
    I: Iterator<Item = Result<RecordBatch>>,
{
    loop {
        let batch = match rows.next()? {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let n = batch.num_rows() as u64;
        if *skip == 0 {
            return Some(Ok(batch));
        }
        if n <= *skip {
            *skip -= n;
            continue;
        }
        let rest = batch.slice(*skip as usize, (n - *skip) as usize);
        *skip = 0;
        return Some(Ok(rest));
    }
}

/// A piece and its decoder.
struct Job {
    bytes: Vec<u8>,
    decoder: Box<dyn RowDecoder>,
    /// The file ends with this piece.
    last: bool,
}

/// What a piece decoded to.
enum Outcome {
    Rows {
        batches: Vec<RecordBatch>,
        skipped: u64,
        /// The piece's buffer, for another.
        bytes: Vec<u8>,
    },
    /// The piece did not end at a record's end, or did not decode (the
    /// error is found again by the one-piece read, with its line).
    Doubtful,
}

enum Step {
    Queued(Job),
    Running,
    Done(Outcome),
    /// Taken, or dropped.
    Gone,
}

struct Slot {
    step: Mutex<Step>,
    done: Condvar,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Step> {
        self.step.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// On the pool: decode the piece unless the task took it already.
    fn run_queued(&self, location: &str) {
        let mut step = self.lock();
        let Step::Queued(job) = std::mem::replace(&mut *step, Step::Running) else {
            *step = Step::Gone;
            return;
        };
        drop(step);
        let outcome = job.run(location);
        let mut step = self.lock();
        if matches!(*step, Step::Running) {
            *step = Step::Done(outcome);
        }
        self.done.notify_all();
    }

    /// The piece's rows: waited for, or decoded here when no job has
    /// started on it.
    fn outcome(&self, location: &str) -> Outcome {
        let mut step = self.lock();
        loop {
            match std::mem::replace(&mut *step, Step::Gone) {
                Step::Queued(job) => {
                    drop(step);
                    return job.run(location);
                }
                Step::Running => {
                    *step = Step::Running;
                    step = self.done.wait(step).unwrap_or_else(|e| e.into_inner());
                }
                Step::Done(outcome) => return outcome,
                Step::Gone => return Outcome::Doubtful,
            }
        }
    }
}

impl Job {
    fn run(self, location: &str) -> Outcome {
        let Job {
            bytes,
            mut decoder,
            last,
        } = self;
        let decoded = weir_core::error::guard_decoder(
            || location.to_string(),
            || decode_piece(decoder.as_mut(), &bytes, last),
        );
        match decoded {
            Ok(Some(batches)) => Outcome::Rows {
                batches,
                skipped: decoder.skipped(),
                bytes,
            },
            Ok(None) | Err(_) => Outcome::Doubtful,
        }
    }
}

/// All rows of `bytes`, or `None` when the piece is not the file's `last`
/// and ends inside a record.
fn decode_piece(
    decoder: &mut dyn RowDecoder,
    bytes: &[u8],
    last: bool,
) -> Result<Option<Vec<RecordBatch>>> {
    let mut batches = Vec::new();
    let mut at = 0;
    let mut idle = false;
    loop {
        let mut took = false;
        while let Some(b) = decoder.next_batch()? {
            took = true;
            if b.num_rows() > 0 {
                batches.push(b);
            }
        }
        if at == bytes.len() {
            break;
        }
        let used = decoder.decode(&bytes[at..])?;
        if used == 0 && !took && idle {
            return Err(WeirError::Execution(
                "the decoder takes no more bytes and gives no rows".into(),
            ));
        }
        idle = used == 0;
        at += used;
    }
    if !last && !decoder.between_records() {
        return Ok(None);
    }
    while let Some(b) = decoder.finish()? {
        if b.num_rows() > 0 {
            batches.push(b);
        }
    }
    Ok(Some(batches))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use proptest::prelude::*;
    use weir_core::connector::Options;

    fn maker(format: &str, schema: Schema, options: &[(&str, &str)]) -> MakeDecoder {
        let schema = Arc::new(schema);
        let options: Options = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let format = format.to_string();
        Arc::new(move || {
            crate::formats::formats()
                .get(&format)?
                .decoder(&schema, &options, 7)
        })
    }

    fn whole(make: &MakeDecoder, text: &[u8]) -> Whole {
        let file: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(text.to_vec()));
        crate::formats::DecodeReader::new(
            std::io::BufReader::with_capacity(16, file),
            make().unwrap(),
        )
    }

    /// Rows (as one batch) and the error a reader ends with.
    fn read_all(
        rows: impl Iterator<Item = Result<RecordBatch>>,
    ) -> (Vec<RecordBatch>, Option<String>) {
        let mut batches = Vec::new();
        for r in rows {
            match r {
                Ok(b) => batches.push(b),
                Err(e) => return (batches, Some(e.to_string())),
            }
        }
        (batches, None)
    }

    fn pieces(make: &MakeDecoder, text: &[u8], piece: usize) -> Pieces {
        let (again, copy) = (Arc::clone(make), text.to_vec());
        let mut p = Pieces::new(
            Box::new(std::io::Cursor::new(text.to_vec())),
            Arc::clone(make),
            "test.csv",
            Box::new(move || Ok(whole(&again, &copy))),
        );
        p.piece = piece;
        p
    }

    fn same_rows(a: &[RecordBatch], b: &[RecordBatch]) -> bool {
        let rows = |x: &[RecordBatch]| -> Vec<String> {
            x.iter()
                .flat_map(|batch| {
                    (0..batch.num_rows()).map(move |r| {
                        batch
                            .columns()
                            .iter()
                            .map(|c| arrow::util::display::array_value_to_string(c, r).unwrap())
                            .collect::<Vec<_>>()
                            .join("|")
                    })
                })
                .collect()
        };
        rows(a) == rows(b)
    }

    fn csv_record() -> impl Strategy<Value = String> {
        let field = prop_oneof![
            "[a-z0-9]{0,6}",
            "[0-9]{1,3}",
            // Quoted, with delimiters, line breaks and doubled quotes.
            "[a-z,\n\r]{0,6}".prop_map(|s| format!("\"{s}\"")),
            "[a-z]{0,3}".prop_map(|s| format!("\"{s}\"\"x\"")),
        ];
        (field.clone(), "[0-9]{1,4}", field).prop_map(|(a, n, c)| format!("{a},{n},{c}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever the piece size, the rows and the error are the
        /// one-piece decoder's: quoted line breaks across cuts, blank
        /// lines, a header, a bad record.
        #[test]
        fn pieces_read_what_one_decoder_reads(
            records in proptest::collection::vec(csv_record(), 0..60),
            blank in proptest::collection::vec(any::<bool>(), 60),
            header in any::<bool>(),
            bad in proptest::option::of(0usize..60),
            piece in 1usize..200,
        ) {
            let mut text = String::new();
            if header {
                text.push_str("a,n,c\n");
            }
            for (i, r) in records.iter().enumerate() {
                if Some(i) == bad {
                    text.push_str("x,notanumber,y\n");
                }
                text.push_str(r);
                text.push_str(if blank[i] { "\n\n" } else { "\r\n" });
            }
            let schema = Schema::new(vec![
                Field::new("a", DataType::Utf8, true),
                Field::new("n", DataType::Int64, true),
                Field::new("c", DataType::Utf8, true),
            ]);
            let header = header.to_string();
            let make = maker("csv", schema, &[("csv.header", header.as_str())]);
            let (expected, expected_error) = read_all(whole(&make, text.as_bytes()));
            let (got, error) = read_all(pieces(&make, text.as_bytes(), piece));
            prop_assert_eq!(&error, &expected_error);
            if error.is_none() {
                prop_assert!(same_rows(&got, &expected));
            } else {
                // Rows before the error may come in smaller batches than
                // one decoder's (whose batch holding the bad record fails
                // whole): they are the rows of the file before it.
                let good = text.replacen("x,notanumber,y\n", "", 1);
                let (all, _) = read_all(whole(&make, good.as_bytes()));
                let n: usize = got.iter().map(RecordBatch::num_rows).sum();
                let all = arrow::compute::concat_batches(&all[0].schema(), &all).unwrap();
                prop_assert!(same_rows(&got, &[all.slice(0, n)]));
            }
        }
    }

    /// A file whose line breaks all end records is decoded in pieces to
    /// its end, never read again in one.
    #[test]
    fn plain_lines_never_fall_back() {
        let text: String = (0..5_000)
            .map(|i| format!("{{\"id\": {i}, \"name\": \"n{}\"}}\n", i % 7))
            .collect();
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]);
        let make = maker("json", schema, &[]);
        let mut p = pieces(&make, text.as_bytes(), 1_000);
        let (got, error) = read_all(&mut p);
        assert_eq!(error, None);
        assert!(p.whole.is_none(), "fell back to one piece");
        let (expected, _) = read_all(whole(&make, text.as_bytes()));
        assert!(same_rows(&got, &expected));
        assert_eq!(got.iter().map(RecordBatch::num_rows).sum::<usize>(), 5_000);
    }

    /// A quoted line break at a cut: the file is read again in one piece,
    /// the rows given before not given twice.
    #[test]
    fn a_record_across_a_cut_falls_back_without_repeating_rows() {
        // Pieces of one byte end at the first line break read: the 21st
        // inside a quoted field.
        let text = format!("{}{}", "a,1,b\n".repeat(20), "c,2,\"x\ny\"\n".repeat(20));
        let schema = Schema::new(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("c", DataType::Utf8, true),
        ]);
        let make = maker("csv", schema, &[]);
        let mut p = pieces(&make, text.as_bytes(), 1);
        let (got, error) = read_all(&mut p);
        assert_eq!(error, None);
        assert!(p.whole.is_some(), "a cut inside a record went unnoticed");
        let (expected, _) = read_all(whole(&make, text.as_bytes()));
        assert!(same_rows(&got, &expected));
        assert_eq!(got.iter().map(RecordBatch::num_rows).sum::<usize>(), 40);
    }
}
