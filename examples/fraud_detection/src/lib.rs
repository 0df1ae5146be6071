//! Fraud detection with a keyed process function: per account, a small
//! transaction (under 1.00) followed within a minute by a large one (over
//! 500.00) raises an alert — the classic Flink walkthrough, in event time.
//!
//! State per account: a `ListState` of transactions waiting for the
//! watermark (an event-time timer per timestamp releases them in time
//! order), a `ValueState` with the time of the last small transaction, and a
//! `MapState` counting the merchants seen since. Alerts carry the account,
//! both times, the large amount and the number of distinct merchants.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{
    ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow::datatypes::{
    DataType, Field, Float64Type, Schema, SchemaRef, TimeUnit, TimestampMillisecondType,
};
use weir_core::api::StreamExecutionEnvironment;
use weir_core::process::{
    FiredTimers, KeyId, KeyedProcessFunction, ListState, MapState, ProcessContext, StateReader,
    StateWriter, ValueState,
};
use weir_core::spec::{SinkSpec, SourceSpec};
use weir_core::time::WatermarkStrategy;
use weir_core::{Result, WeirError};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};

/// How long a small transaction keeps an account suspicious.
pub const WINDOW_MS: i64 = 60_000;
/// Below this, a transaction is small.
pub const SMALL: f64 = 1.0;
/// Above this, a transaction is large.
pub const LARGE: f64 = 500.0;

/// Schema of transactions.
pub fn transaction_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("account_id", DataType::Int64, false),
        Field::new("amount", DataType::Float64, false),
        Field::new("merchant", DataType::Utf8, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// Schema of alerts.
pub fn alert_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("account_id", DataType::Int64, false),
        Field::new(
            "small_time",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new("amount", DataType::Float64, false),
        Field::new("merchants", DataType::Int64, false),
    ]))
}

/// `events` generated transactions over `accounts` accounts, 10,000 per
/// second of event time, up to 500 ms out of order.
pub fn generated_transactions(events: u64, accounts: u64) -> GeneratorSpec {
    GeneratorSpec::new(Some(events))
        .column(
            "account_id",
            ColumnGen::Key {
                cardinality: accounts,
            },
        )
        .column(
            "amount",
            ColumnGen::UniformFloat {
                min: 0.0,
                max: 1000.0,
            },
        )
        .column(
            "merchant",
            ColumnGen::Choice(
                ["grocer", "fuel", "books", "travel", "games", "pharmacy"]
                    .map(String::from)
                    .to_vec(),
            ),
        )
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 1_767_225_600_000,
                events_per_second: 10_000,
                max_out_of_orderness_ms: 500,
            },
        )
}

/// A buffered transaction: (ts, amount, merchant).
type Pending = (i64, f64, String);

/// The detector of one subtask. Transactions are buffered per account in a
/// `ListState` until the watermark passes their timestamp (an event-time
/// timer), then evaluated in timestamp order — so alerts do not depend on
/// the order in which out-of-order records arrive, nor on parallelism.
#[derive(Default)]
pub struct FraudDetector {
    pending: ListState<Pending>,
    small_since: ValueState<i64>,
    merchants: MapState<String, i64>,
}

/// Alerts being assembled: (account key, small time, time, amount, merchants).
type Alert = (KeyId, i64, i64, f64, i64);

impl FraudDetector {
    /// Evaluate one transaction of `key` in timestamp order.
    fn evaluate(&mut self, key: KeyId, (t, a, merchant): Pending, alerts: &mut Vec<Alert>) {
        if let Some(&since) = self.small_since.get(key) {
            if t - since > WINDOW_MS {
                self.small_since.clear(key);
                self.merchants.clear(key);
            } else if a > LARGE {
                alerts.push((key, since, t, a, self.merchants.entry_count(key) as i64));
                self.small_since.clear(key);
                self.merchants.clear(key);
                return;
            } else {
                let n = self.merchants.get(key, &merchant).copied().unwrap_or(0);
                self.merchants.put(key, merchant.clone(), n + 1);
            }
        }
        if a < SMALL {
            self.small_since.set(key, t);
            self.merchants.clear(key);
            self.merchants.put(key, merchant, 1);
        }
    }
}

impl KeyedProcessFunction for FraudDetector {
    fn process_batch(&mut self, batch: &RecordBatch, ctx: &mut ProcessContext) -> Result<()> {
        let amount = batch.column(1).as_primitive::<Float64Type>();
        let merchant = batch.column(2).as_string::<i32>();
        let ts = batch.column(3).as_primitive::<TimestampMillisecondType>();
        let key_ids = ctx.key_ids().to_vec();
        for (row, &key) in key_ids.iter().enumerate() {
            let t = ts.value(row);
            self.pending
                .add(key, (t, amount.value(row), merchant.value(row).to_string()));
            ctx.timers.register_event_time_timer(key, t);
        }
        Ok(())
    }

    /// Checkpoints hold the three states by name (timers are the
    /// operator's); `weir state inspect` lists them as `list.pending`,
    /// `value.small_since` and `map.merchants`.
    fn snapshot_state(&self, state: &mut StateWriter) -> Result<()> {
        state.list("pending", &self.pending)?;
        state.value("small_since", &self.small_since)?;
        state.map("merchants", &self.merchants)
    }

    fn restore_state(&mut self, state: &mut StateReader) -> Result<()> {
        state.list("pending", &mut self.pending)?;
        state.value("small_since", &mut self.small_since)?;
        state.map("merchants", &mut self.merchants)
    }

    fn on_timers(&mut self, timers: &FiredTimers, ctx: &mut ProcessContext) -> Result<()> {
        let mut alerts: Vec<Alert> = Vec::new();
        // Per key, the latest fired time: everything up to it is complete.
        let mut latest: std::collections::BTreeMap<KeyId, i64> = Default::default();
        for &(at, key) in &timers.timers {
            let t = latest.entry(key).or_insert(at);
            *t = (*t).max(at);
        }
        for (key, at) in latest {
            let mut due = self.pending.clear(key);
            let rest: Vec<Pending> = due.iter().filter(|p| p.0 > at).cloned().collect();
            due.retain(|p| p.0 <= at);
            // Ties in time are broken by content, so the order is total.
            due.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)).then(x.2.cmp(&y.2)));
            self.pending.update(key, rest);
            for p in due {
                self.evaluate(key, p, &mut alerts);
            }
        }
        if alerts.is_empty() {
            return Ok(());
        }
        let keys: Vec<KeyId> = alerts.iter().map(|a| a.0).collect();
        let mut columns: Vec<ArrayRef> = ctx.key_values(&keys)?;
        columns.push(Arc::new(TimestampMillisecondArray::from_iter_values(
            alerts.iter().map(|a| a.1),
        )));
        columns.push(Arc::new(TimestampMillisecondArray::from_iter_values(
            alerts.iter().map(|a| a.2),
        )));
        columns.push(Arc::new(Float64Array::from_iter_values(
            alerts.iter().map(|a| a.3),
        )));
        columns.push(Arc::new(Int64Array::from_iter_values(
            alerts.iter().map(|a| a.4),
        )));
        ctx.emit(RecordBatch::try_new(alert_schema(), columns).map_err(WeirError::from)?);
        Ok(())
    }
}

/// Record the job: transactions -> key_by(account_id) -> FraudDetector -> sink.
pub fn build_job(
    env: &StreamExecutionEnvironment,
    source: SourceSpec,
    sink: SinkSpec,
) -> Result<()> {
    env.from_source(
        source,
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_secs(1)),
        "transactions",
    )?
    .key_by(&["account_id"])?
    .process("FraudDetector", alert_schema(), vec![], || {
        Box::new(FraudDetector::default())
    })?
    .sink_to(sink, "alerts")?;
    Ok(())
}

/// A batch of transactions `(account, amount, merchant, ts)`.
pub fn transactions(rows: &[(i64, f64, &str, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        transaction_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.3),
            )),
        ],
    )
    .expect("columns match the transaction schema")
}
