//! The deterministic generator source.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, StringArray, TimestampMillisecondArray, UInt64Array,
};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_core::spec::{ColumnGen, GeneratorSpec};
use weir_core::{Result, WeirError};

use super::{Source, SourcePoll};
use crate::OperatorContext;

/// SplitMix64: a fast, well-mixed function of its input.
#[inline(always)]
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Generates events `n` in chunks of `batch_size`: subtask `i` of `p` owns
/// chunks `i, i + p, i + 2p, …`, so all subtasks advance through event time
/// together, and every value is a pure function of `(seed, column, n)`.
pub struct GeneratorSource {
    spec: GeneratorSpec,
    schema: SchemaRef,
    column_seeds: Vec<u64>,
    batch_size: u64,
    parallelism: u64,
    chunk: u64,
    offset_in_chunk: u64,
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
        Self {
            schema: spec.schema(),
            rate_per_subtask: spec.rate.map(|r| r as f64 / parallelism as f64),
            spec,
            column_seeds,
            batch_size: ctx.config.batch_size as u64,
            parallelism,
            chunk: ctx.subtask as u64,
            offset_in_chunk: 0,
            linger: ctx.config.batch_linger,
            started: None,
            last_emit: Instant::now(),
            emitted: 0,
        }
    }

    /// Generate events `[from, to)`.
    pub fn generate(&self, from: u64, to: u64) -> Result<RecordBatch> {
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
        ColumnGen::Choice(choices) => {
            let len = choices.len() as u64;
            Arc::new(StringArray::from_iter_values(
                (from..to).map(|n| choices[(h(n) % len) as usize].as_str()),
            ))
        }
    }
}

fn position_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    Arc::new(Schema::new(
        [
            "subtask",
            "parallelism",
            "chunk",
            "offset_in_chunk",
            "emitted",
        ]
        .map(|n| Field::new(n, DataType::UInt64, false))
        .to_vec(),
    ))
}

impl Source for GeneratorSource {
    /// One row: `subtask`, `parallelism`, the next `chunk` and
    /// `offset_in_chunk`, and the events `emitted` so far (the rate limit
    /// continues from there).
    fn snapshot_position(&mut self) -> Result<RecordBatch> {
        let value = |v: u64| -> arrow::array::ArrayRef { Arc::new(UInt64Array::from(vec![v])) };
        Ok(RecordBatch::try_new(
            position_schema(),
            vec![
                value(self.chunk % self.parallelism),
                value(self.parallelism),
                value(self.chunk),
                value(self.offset_in_chunk),
                value(self.emitted),
            ],
        )?)
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        let mine = self.chunk % self.parallelism;
        for batch in positions {
            let col = |n: &str| -> Result<&UInt64Array> {
                batch
                    .column_by_name(n)
                    .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                    .ok_or_else(|| WeirError::Execution(format!("generator position lacks '{n}'")))
            };
            let (subtask, parallelism) = (col("subtask")?, col("parallelism")?);
            for row in 0..batch.num_rows() {
                if parallelism.value(row) != self.parallelism {
                    return Err(WeirError::Execution(format!(
                        "the generator was checkpointed at parallelism {} and cannot resume at {}",
                        parallelism.value(row),
                        self.parallelism
                    )));
                }
                if subtask.value(row) == mine {
                    self.chunk = col("chunk")?.value(row);
                    self.offset_in_chunk = col("offset_in_chunk")?.value(row);
                    self.emitted = col("emitted")?.value(row);
                }
            }
        }
        Ok(())
    }

    fn poll_next(&mut self) -> Result<SourcePoll> {
        let chunk_start = self.chunk * self.batch_size;
        let chunk_end = match self.spec.num_events {
            Some(total) if chunk_start >= total => return Ok(SourcePoll::Finished),
            Some(total) => (chunk_start + self.batch_size).min(total),
            None => chunk_start + self.batch_size,
        };
        let from = chunk_start + self.offset_in_chunk;
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
        if to == chunk_end {
            self.chunk += self.parallelism;
            self.offset_in_chunk = 0;
        } else {
            self.offset_in_chunk = to - chunk_start;
        }
        Ok(SourcePoll::Batch(batch))
    }
}
