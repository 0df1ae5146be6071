//! The local phase of a two-phase group aggregation (batch mode): chained
//! to its input, before the hash exchange, it aggregates the rows its
//! subtask reads into one intermediate state per key, so that the exchange
//! carries a row per key and subtask instead of every input row. The
//! global phase ([`crate::group_aggregate`], `AggregatePhase::Global`)
//! merges the states.
//!
//! Output (the spec's `partial_schema`): the key columns, then every
//! aggregate's state columns, at the end of the input. Two things make a
//! key come out more than once, which merging allows:
//! - the states held pass [`FLUSH_BYTES`]: they are emitted and the phase
//!   starts afresh, so its memory stays bounded;
//! - after [`PROBE_ROWS`] rows the keys are nearly as many as the rows:
//!   aggregating locally would save the exchange nothing, so from then on
//!   each row goes out as its own state (`convert_to_state`), as
//!   DataFusion's partial aggregation skips itself.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use datafusion_expr::EmitTo;
use weir_core::spec::GroupAggregateSpec;
use weir_core::{Result, WeirError};

use crate::window::{Accumulation, Aggregates};
use crate::{Operator, Output};

/// Rows after which the phase checks how much it reduces.
const PROBE_ROWS: usize = 100_000;
/// Keys per row above which aggregating locally is not worth it.
const SKIP_RATIO: f64 = 0.8;
/// State bytes past which the held states are emitted.
const FLUSH_BYTES: usize = 64 << 20;

/// The local phase of one subtask.
pub struct LocalAggregateOperator {
    name: String,
    aggregates: Aggregates,
    acc: Accumulation,
    /// Keys, then state columns.
    schema: SchemaRef,
    batch_size: usize,
    rows: usize,
    probed: bool,
    /// Rows go out as states, one each.
    pass_through: bool,
    /// [`FLUSH_BYTES`], or less in tests.
    flush_bytes: usize,
}

impl LocalAggregateOperator {
    /// The operator of one subtask; `schema` is the partial schema.
    pub fn try_new(
        name: String,
        spec: &GroupAggregateSpec,
        schema: SchemaRef,
        batch_size: usize,
    ) -> Result<Self> {
        if spec.changelog || spec.retractions {
            return Err(WeirError::plan(format!(
                "{name}: a local aggregation phase runs in batch mode over an insert-only input"
            )));
        }
        let aggregates = Aggregates::build(
            &name,
            &spec.keys,
            &spec.aggregates,
            &spec.input_schema,
            None,
        )?;
        Ok(Self {
            acc: aggregates.new_lasting_accumulation()?,
            aggregates,
            name,
            schema,
            batch_size: batch_size.max(1),
            rows: 0,
            probed: false,
            pass_through: false,
            flush_bytes: FLUSH_BYTES,
        })
    }

    fn state_bytes(&self) -> usize {
        self.acc.groups.size()
            + self
                .acc
                .accumulators
                .iter()
                .map(|a| a.size())
                .sum::<usize>()
    }

    /// Emit every held state and start afresh.
    fn flush(&mut self, out: &mut dyn Output) -> Result<()> {
        if self.acc.groups.is_empty() {
            return Ok(());
        }
        let mut acc = std::mem::replace(&mut self.acc, self.aggregates.new_lasting_accumulation()?);
        let mut columns = self.aggregates.output_keys(acc.groups.emit(EmitTo::All)?);
        for a in &mut acc.accumulators {
            columns.extend(a.state(EmitTo::All)?);
        }
        self.emit(columns, out)
    }

    fn emit(&self, columns: Vec<ArrayRef>, out: &mut dyn Output) -> Result<()> {
        let rows = columns.first().map_or(0, |c| c.len());
        let all = RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| {
            WeirError::Execution(format!(
                "{}: intermediate states do not fit the planned schema: {e}",
                self.name
            ))
        })?;
        let mut from = 0;
        while from < rows {
            let len = self.batch_size.min(rows - from);
            out.collect(all.slice(from, len))?;
            from += len;
        }
        Ok(())
    }

    /// Each row of `batch` as its own state.
    fn pass(&self, batch: &RecordBatch, out: &mut dyn Output) -> Result<()> {
        let mut columns = self.aggregates.output_keys(self.aggregates.keys(batch));
        for (i, a) in self.acc.accumulators.iter().enumerate() {
            let values = self.aggregates.values(i, batch)?;
            columns.extend(a.convert_to_state(&values, self.aggregates.filter(i, batch))?);
        }
        self.emit(columns, out)
    }
}

impl Operator for LocalAggregateOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.pass_through {
            return self.pass(&batch, out);
        }
        let mut ids = Vec::new();
        self.acc
            .groups
            .intern(&self.aggregates.keys(&batch), &mut ids)?;
        let n = self.acc.groups.len();
        self.aggregates
            .update(&mut self.acc.accumulators, &batch, &ids, n)?;
        self.rows += batch.num_rows();
        if !self.probed && self.rows >= PROBE_ROWS {
            self.probed = true;
            // Only native group accumulators turn rows into states.
            let convertible = self
                .aggregates
                .functions
                .iter()
                .all(|f| f.groups_accumulator_supported());
            if convertible && n as f64 > SKIP_RATIO * self.rows as f64 {
                self.pass_through = true;
                return self.flush(out);
            }
        }
        if self.state_bytes() > self.flush_bytes {
            self.flush(out)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        self.flush(out)
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("groups".into(), self.acc.groups.len() as u64),
            ("state_bytes".into(), self.state_bytes() as u64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    use weir_core::config::WeirConfig;

    use weir_core::spec::{AggregatePhase, AggregateSpec};

    use super::*;
    use crate::OperatorContext;
    use crate::group_aggregate::GroupAggregateOperator;

    fn input() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]))
    }

    fn aggregates() -> Vec<AggregateSpec> {
        vec![
            AggregateSpec::count_star().alias("n"),
            AggregateSpec::count("v").alias("nv"),
            AggregateSpec::sum("v").alias("total"),
            AggregateSpec::min("v").alias("low"),
            AggregateSpec::max("s").alias("last_name"),
            AggregateSpec::avg("v").alias("mean"),
        ]
    }

    fn spec(phase: AggregatePhase, input_schema: SchemaRef) -> GroupAggregateSpec {
        GroupAggregateSpec {
            keys: vec!["k".into()],
            aggregates: aggregates(),
            input_schema,
            changelog: false,
            retractions: false,
            upsert: false,
            phase,
        }
    }

    fn context() -> OperatorContext {
        let config = WeirConfig::default();
        OperatorContext::single("agg", config)
    }

    fn output_schema() -> SchemaRef {
        let input = input();
        let mut fields = vec![input.field(0).clone()];
        for a in aggregates() {
            fields.push(a.output_field(&input).unwrap().as_ref().clone());
        }
        Arc::new(Schema::new(fields))
    }

    /// `rows` rows in batches of 1 000, keys `key(i)`, some values null.
    fn batches(rows: i64, key: impl Fn(i64) -> i64) -> Vec<RecordBatch> {
        (0..rows)
            .step_by(1000)
            .map(|from| {
                let ids: Vec<i64> = (from..(from + 1000).min(rows)).collect();
                let k = Int64Array::from_iter_values(ids.iter().map(|&i| key(i)));
                let s: StringArray = ids
                    .iter()
                    .map(|&i| (i % 7 != 0).then(|| format!("n{}", (i * 31) % 1000)))
                    .collect();
                let v: Int64Array = ids
                    .iter()
                    .map(|&i| (i % 5 != 0).then_some((i * 17) % 1001 - 500))
                    .collect();
                RecordBatch::try_new(input(), vec![Arc::new(k), Arc::new(s), Arc::new(v)]).unwrap()
            })
            .collect()
    }

    fn sorted(batches: &[RecordBatch]) -> Vec<String> {
        let options = FormatOptions::default().with_null("null");
        let mut rows = vec![];
        for b in batches {
            let formatters: Vec<_> = b
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
                .collect();
            for r in 0..b.num_rows() {
                let cells: Vec<String> =
                    formatters.iter().map(|f| f.value(r).to_string()).collect();
                rows.push(cells.join("|"));
            }
        }
        rows.sort();
        rows
    }

    /// Two local subtasks (one flushing after every batch when `flush`)
    /// feeding a global phase give the single phase's rows.
    fn two_phases_match_one(rows: i64, key: impl Fn(i64) -> i64, flush: bool) -> usize {
        let all = batches(rows, key);
        let ctx = context();
        let mut single = GroupAggregateOperator::try_new(
            "one".into(),
            &spec(AggregatePhase::Single, input()),
            output_schema(),
            &ctx,
        )
        .unwrap();
        let mut expected = vec![];
        for b in &all {
            single.process_batch(b.clone(), &mut expected).unwrap();
        }
        single.finish(&mut expected).unwrap();

        let local_spec = spec(AggregatePhase::Local, input());
        let partial =
            GroupAggregateSpec::partial_schema(&local_spec.keys, &local_spec.aggregates, &input())
                .unwrap();
        let mut states = vec![];
        for subtask in 0..2 {
            let mut local = LocalAggregateOperator::try_new(
                "local".into(),
                &local_spec,
                Arc::clone(&partial),
                4096,
            )
            .unwrap();
            if flush && subtask == 0 {
                local.flush_bytes = 1;
            }
            for b in all.iter().skip(subtask).step_by(2) {
                local.process_batch(b.clone(), &mut states).unwrap();
            }
            local.finish(&mut states).unwrap();
        }
        let global_spec = spec(
            AggregatePhase::Global { rows: input() },
            Arc::clone(&partial),
        );
        let mut global =
            GroupAggregateOperator::try_new("global".into(), &global_spec, output_schema(), &ctx)
                .unwrap();
        let mut got = vec![];
        // The states in reverse: merging does not depend on their order.
        for b in states.iter().rev() {
            global.process_batch(b.clone(), &mut got).unwrap();
        }
        global.finish(&mut got).unwrap();
        assert_eq!(sorted(&got), sorted(&expected));
        states.iter().map(|b| b.num_rows()).sum()
    }

    #[test]
    fn few_keys_cross_the_exchange_once_per_subtask() {
        let states = two_phases_match_one(20_000, |i| (i * 7) % 13, false);
        assert_eq!(states, 26, "each subtask's 13 keys once");
    }

    #[test]
    fn held_states_are_flushed_and_merged() {
        let states = two_phases_match_one(20_000, |i| (i * 7) % 13, true);
        assert!(
            states > 26,
            "subtask 0 emitted its keys after each batch: {states}"
        );
    }

    #[test]
    fn nearly_unique_keys_pass_rows_through_as_states() {
        // 300 000 rows, 290 000 keys: after the probe, rows go out as states.
        let rows = 300_000;
        let states = two_phases_match_one(rows, |i| i % 290_000, false);
        assert!(
            states as i64 > rows - 20_000,
            "{states} states for {rows} rows"
        );
    }

    #[test]
    fn a_partial_state_keeps_nulls_and_empty_groups_apart() {
        // Every value of key 1 is null: COUNT(v) 0, SUM/MIN/AVG null.
        let key = |i: i64| if i % 5 == 0 { 1 } else { 2 + i % 3 };
        two_phases_match_one(5_000, key, true);
    }
}
