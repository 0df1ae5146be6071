//! The deterministic generator source.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::connectors::{ColumnGen, GeneratorSpec};
use arrow::array::{
    ArrayRef, Float64Array, Int64Array, StringArray, TimestampMillisecondArray, UInt64Array,
};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_core::{Result, WeirError};

use super::{Source, SourcePoll};
use crate::OperatorContext;

/// SplitMix64: a fast, well-mixed function of its input.
#[inline(always)]
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Generates events `n` in chunks of `batch_size`: subtask `i` of `p` owns
/// chunks `i, i + p, i + 2p, …` (a *progression*), so all subtasks advance through event time
/// together, and every value is a pure function of `(seed, column, n)`.
pub struct GeneratorSource {
    spec: GeneratorSpec,
    schema: SchemaRef,
    column_seeds: Vec<u64>,
    subtask: u64,
    parallelism: u64,
    /// The chunk sequences this subtask generates: its own, or after a
    /// rescale those of the old subtasks assigned to it.
    progressions: Vec<Progression>,
    rate_per_subtask: Option<f64>,
    linger: Duration,
    started: Option<Instant>,
    last_emit: Instant,
    emitted: u64,
}

impl GeneratorSource {
    /// The generator of one subtask.
    pub fn new(spec: GeneratorSpec, ctx: &OperatorContext) -> Self {
        let column_seeds = (0..spec.columns.len() as u64)
            .map(|c| splitmix64(spec.seed ^ splitmix64(c + 1)))
            .collect();
        let parallelism = ctx.parallelism as u64;
        let mut source = Self {
            schema: spec.schema(),
            rate_per_subtask: None,
            spec,
            column_seeds,
            subtask: ctx.subtask as u64,
            parallelism,
            progressions: vec![Progression {
                owner: ctx.subtask as u64,
                chunk_size: ctx.config.batch_size as u64,
                stride: parallelism,
                chunk: ctx.subtask as u64,
                offset: 0,
            }],
            linger: ctx.config.batch_linger,
            started: None,
            last_emit: Instant::now(),
            emitted: 0,
        };
        source.rate_per_subtask = source.rate_share();
        source
    }

    /// This subtask's part of the table's `rows-per-second`: the rate is
    /// the table's (as in Flink), so each subtask paces itself by the share
    /// of the rows it owns. With few rows one subtask may own them all and
    /// then runs at the whole rate, instead of a `1/p` of it.
    fn rate_share(&self) -> Option<f64> {
        let rate = self.spec.rate? as f64;
        let share: f64 = match self.spec.num_events {
            Some(0) => return None,
            Some(total) => {
                let owned: u64 = self
                    .progressions
                    .iter()
                    .map(|p| owned_events(p.owner % p.stride.max(1), p.stride, p.chunk_size, total))
                    .sum();
                owned as f64 / total as f64
            }
            None => self
                .progressions
                .iter()
                .map(|p| 1.0 / p.stride.max(1) as f64)
                .sum(),
        };
        (share > 0.0).then_some(rate * share)
    }

    /// Generate events `[from, to)`.
    pub fn generate(&self, from: u64, to: u64) -> Result<RecordBatch> {
        if let Some(config) = &self.spec.nexmark {
            return super::nexmark::generate(config, &self.schema, from, to);
        }
        let columns = self
            .spec
            .columns
            .iter()
            .zip(&self.column_seeds)
            .map(|((_, g), &seed)| generate_column(g, seed, from, to))
            .collect();
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

fn generate_column(g: &ColumnGen, seed: u64, from: u64, to: u64) -> ArrayRef {
    let h = move |n: u64| splitmix64(n ^ seed);
    match g {
        ColumnGen::Sequence => Arc::new(Int64Array::from_iter_values((from..to).map(|n| n as i64))),
        ColumnGen::Key { cardinality } => {
            let c = *cardinality;
            Arc::new(Int64Array::from_iter_values(
                (from..to).map(|n| (h(n) % c) as i64),
            ))
        }
        ColumnGen::UniformInt { min, max } => {
            // The span as u64 wraps to 0 only for the full i64 range, where
            // the hash itself is uniform.
            let span = (*max as i128 - *min as i128 + 1) as u64;
            let min = *min;
            Arc::new(Int64Array::from_iter_values((from..to).map(|n| {
                let offset = if span == 0 { h(n) } else { h(n) % span };
                min.wrapping_add(offset as i64)
            })))
        }
        ColumnGen::UniformFloat { min, max } => {
            let (min, span) = (*min, *max - *min);
            Arc::new(Float64Array::from_iter_values((from..to).map(|n| {
                min + (h(n) >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * span
            })))
        }
        ColumnGen::EventTime {
            start_ms,
            events_per_second,
            max_out_of_orderness_ms,
        } => {
            let (start, eps, jitter) = (
                *start_ms,
                *events_per_second,
                *max_out_of_orderness_ms as u64,
            );
            // n * 1000 fits in u64 below 1.8e16 events; beyond, go wide.
            let offset = move |n: u64| match n.checked_mul(1000) {
                Some(ms) => (ms / eps) as i64,
                None => (n as u128 * 1000 / eps as u128) as i64,
            };
            Arc::new(TimestampMillisecondArray::from_iter_values((from..to).map(
                |n| {
                    let base = start + offset(n);
                    if jitter == 0 {
                        base
                    } else {
                        base - (h(n) % (jitter + 1)) as i64
                    }
                },
            )))
        }
        ColumnGen::RandomString { length } => {
            const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
            let length = *length;
            let mut out = arrow::array::StringBuilder::with_capacity(
                (to - from) as usize,
                (to - from) as usize * length,
            );
            let mut s = String::with_capacity(length);
            for n in from..to {
                s.clear();
                let mut bits = h(n);
                for i in 0..length {
                    if i % 10 == 9 {
                        bits = splitmix64(bits ^ i as u64);
                    }
                    s.push(ALPHABET[(bits % 36) as usize] as char);
                    bits /= 36;
                }
                out.append_value(&s);
            }
            Arc::new(out.finish())
        }
        ColumnGen::Choice(choices) => {
            let len = choices.len() as u64;
            Arc::new(StringArray::from_iter_values(
                (from..to).map(|n| choices[(h(n) % len) as usize].as_str()),
            ))
        }
    }
}

/// One sequence of chunks: `chunk, chunk + stride, …`, each `chunk_size`
/// events, the first `offset` events of `chunk` already emitted.
#[derive(Debug, Clone, Copy)]
struct Progression {
    /// The subtask that started it (at the parallelism `stride`).
    owner: u64,
    chunk_size: u64,
    stride: u64,
    chunk: u64,
    offset: u64,
}

impl Progression {
    fn start(&self) -> u64 {
        self.chunk * self.chunk_size
    }

    fn next_index(&self) -> u64 {
        self.start() + self.offset
    }
}

/// How many of `total` events fall into chunks `first, first + stride, …`
/// of `chunk_size` events each.
fn owned_events(first: u64, stride: u64, chunk_size: u64, total: u64) -> u64 {
    let (stride, chunk_size) = (stride.max(1), chunk_size.max(1));
    let chunks = total.div_ceil(chunk_size);
    if first >= chunks {
        return 0;
    }
    let count = (chunks - 1 - first) / stride + 1;
    let last = chunks - 1;
    let short = if (last - first).is_multiple_of(stride) {
        chunks * chunk_size - total
    } else {
        0
    };
    count * chunk_size - short
}

fn position_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    Arc::new(Schema::new(
        ["owner", "chunk_size", "stride", "chunk", "offset_in_chunk"]
            .map(|n| Field::new(n, DataType::UInt64, false))
            .to_vec(),
    ))
}

impl Source for GeneratorSource {
    /// One row per progression: the `owner` subtask that started it,
    /// `chunk_size`, `stride` (the parallelism it started at), the next
    /// `chunk` and `offset_in_chunk`. After a rescale the progressions are
    /// divided by owner (`owner mod new parallelism`), as Flink divides
    /// operator list state evenly.
    fn snapshot_position(&mut self, _checkpoint: u64) -> Result<RecordBatch> {
        let column = |f: fn(&Progression) -> u64| -> arrow::array::ArrayRef {
            Arc::new(UInt64Array::from_iter_values(
                self.progressions.iter().map(f),
            ))
        };
        Ok(RecordBatch::try_new(
            position_schema(),
            vec![
                column(|p| p.owner),
                column(|p| p.chunk_size),
                column(|p| p.stride),
                column(|p| p.chunk),
                column(|p| p.offset),
            ],
        )?)
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        let mut mine = Vec::new();
        for batch in positions {
            let col = |n: &str| -> Result<&UInt64Array> {
                batch
                    .column_by_name(n)
                    .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                    .ok_or_else(|| WeirError::Execution(format!("generator position lacks '{n}'")))
            };
            let (owner, size, stride) = (col("owner")?, col("chunk_size")?, col("stride")?);
            let (chunk, offset) = (col("chunk")?, col("offset_in_chunk")?);
            for row in 0..batch.num_rows() {
                if owner.value(row) % self.parallelism == self.subtask {
                    mine.push(Progression {
                        owner: owner.value(row),
                        chunk_size: size.value(row),
                        stride: stride.value(row),
                        chunk: chunk.value(row),
                        offset: offset.value(row),
                    });
                }
            }
        }
        // A subtask that inherits nothing (more subtasks than before) ends.
        self.progressions = mine;
        self.rate_per_subtask = self.rate_share();
        Ok(())
    }

    fn poll_next(&mut self) -> Result<SourcePoll> {
        // The progression furthest behind in event index goes first, so a
        // subtask holding several (after a rescale) keeps them in step.
        let total = self.spec.num_events;
        let Some(k) = (0..self.progressions.len())
            .filter(|&k| total.is_none_or(|t| self.progressions[k].start() < t))
            .min_by_key(|&k| self.progressions[k].next_index())
        else {
            return Ok(SourcePoll::Finished);
        };
        let p = self.progressions[k];
        let chunk_start = p.start();
        let chunk_end = match total {
            Some(t) => (chunk_start + p.chunk_size).min(t),
            None => chunk_start + p.chunk_size,
        };
        let from = chunk_start + p.offset;
        let mut to = chunk_end;
        if let Some(rate) = self.rate_per_subtask {
            let now = Instant::now();
            let started = *self.started.get_or_insert(now);
            let due = (now.duration_since(started).as_secs_f64() * rate) as u64;
            let allowed = due.saturating_sub(self.emitted);
            let wanted = to - from;
            if allowed == 0 {
                return Ok(SourcePoll::Pending(
                    Duration::from_secs_f64(1.0 / rate).min(self.linger),
                ));
            }
            if allowed < wanted && now.duration_since(self.last_emit) < self.linger {
                // Wait for a fuller batch, but never longer than the linger.
                return Ok(SourcePoll::Pending(
                    self.linger - now.duration_since(self.last_emit),
                ));
            }
            to = from + allowed.min(wanted);
            self.last_emit = now;
        }
        let batch = self.generate(from, to)?;
        self.emitted += to - from;
        let p = &mut self.progressions[k];
        if to == chunk_end {
            p.chunk += p.stride;
            p.offset = 0;
        } else {
            p.offset = to - chunk_start;
        }
        Ok(SourcePoll::Batch(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::config::WeirConfig;
    use weir_core::keys::KeyGroupRange;

    fn source(rate: u64, rows: Option<u64>, subtask: usize, parallelism: usize) -> GeneratorSource {
        let spec = GeneratorSpec::new(rows)
            .column("n", ColumnGen::Sequence)
            .rate(rate);
        let config = WeirConfig {
            batch_size: 8192,
            ..WeirConfig::default()
        };
        let ctx = OperatorContext {
            task_name: "gen".into(),
            subtask,
            parallelism,
            key_groups: KeyGroupRange::for_subtask(subtask, parallelism, 128),
            config,
            connectors: Default::default(),
            memory: Default::default(),
            local_tasks: 1,
        };
        GeneratorSource::new(spec, &ctx)
    }

    #[test]
    fn owned_events_of_a_progression() {
        assert_eq!(owned_events(0, 4, 8192, 1000), 1000);
        assert_eq!(owned_events(1, 4, 8192, 1000), 0);
        assert_eq!(owned_events(0, 2, 10, 35), 20);
        assert_eq!(owned_events(1, 2, 10, 35), 15);
        assert_eq!(owned_events(0, 1, 10, 35), 35);
    }

    #[test]
    fn rows_per_second_is_the_tables_rate() {
        // 1000 rows fit in one chunk: subtask 0 of 4 owns them all and
        // runs at the whole 100 rows/s (it once ran at 25).
        assert_eq!(source(100, Some(1000), 0, 4).rate_per_subtask, Some(100.0));
        assert_eq!(source(100, Some(1000), 1, 4).rate_per_subtask, None);
        // Rows spread over subtasks: the shares add up to the table's rate.
        let total: f64 = (0..3)
            .filter_map(|i| source(300, Some(20_000), i, 3).rate_per_subtask)
            .sum();
        assert!((total - 300.0).abs() < 1e-9, "{total}");
        assert_eq!(source(100, None, 1, 4).rate_per_subtask, Some(25.0));
    }
}
