//! The keyed process function operator.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, StringArray};
use arrow::compute::{interleave, take};
use arrow::datatypes::{DataType, Field, Int64Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::message::Watermark;
use weir_core::process::{
    CoProcessFunction, FiredTimers, KeyId, KeyedProcessFunction, ProcessContext, StateReader,
    StateWriter, TimeDomain, TimerService, is_keyed_table, is_operator_table,
};
use weir_core::spec::{KeyedProcessSpec, ProcessFactory, SecondInput};
use weir_core::{Result, WeirError};

use crate::window::{meta_table, restore_meta};
use crate::{Operator, OperatorContext, Output, StateTable};

/// Wall-clock time in ms since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Dense key ids with their key values, interned a batch at a time.
pub(crate) struct KeyTable {
    groups: Box<dyn GroupValues>,
    /// Key columns of the rows that introduced new ids, one chunk per batch.
    chunks: Vec<Vec<ArrayRef>>,
    /// Id -> (chunk, row).
    locations: Vec<(usize, usize)>,
}

impl KeyTable {
    pub(crate) fn new(key_schema: SchemaRef) -> Result<Self> {
        Ok(Self {
            groups: new_group_values(key_schema, &GroupOrdering::None)?,
            chunks: Vec::new(),
            locations: Vec::new(),
        })
    }

    /// Number of distinct keys seen.
    pub(crate) fn len(&self) -> usize {
        self.locations.len()
    }

    pub(crate) fn intern(&mut self, keys: &[ArrayRef], ids: &mut Vec<usize>) -> Result<()> {
        let before = self.groups.len();
        self.groups.intern(keys, ids)?;
        if self.groups.len() == before {
            return Ok(());
        }
        // Ids are given in order of first occurrence: record those rows.
        let mut first_rows = Vec::new();
        let mut next = before;
        for (row, &id) in ids.iter().enumerate() {
            if id == next {
                first_rows.push(row as u32);
                next += 1;
            }
        }
        let idx = arrow::array::UInt32Array::from(first_rows);
        let chunk = keys
            .iter()
            .map(|k| take(k.as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let c = self.chunks.len();
        self.locations.extend((0..idx.len()).map(|r| (c, r)));
        self.chunks.push(chunk);
        Ok(())
    }

    pub(crate) fn values(&self, ids: &[KeyId]) -> Result<Vec<ArrayRef>> {
        let picks: Vec<(usize, usize)> = ids
            .iter()
            .map(|&id| {
                self.locations.get(id as usize).copied().ok_or_else(|| {
                    WeirError::Execution(format!("unknown key id {id} in a process function"))
                })
            })
            .collect::<Result<_>>()?;
        let columns = self.chunks.first().map_or(0, Vec::len);
        (0..columns)
            .map(|c| {
                let arrays: Vec<&dyn Array> = self.chunks.iter().map(|ch| ch[c].as_ref()).collect();
                Ok(interleave(&arrays, &picks)?)
            })
            .collect()
    }
}

/// The function of a subtask: over one input or two connected ones.
enum Function {
    One(Box<dyn KeyedProcessFunction>),
    Two(Box<dyn CoProcessFunction>),
}

/// Runs a keyed process function (one input) or a co-process function (two
/// connected inputs; the second keyed or broadcast) for one subtask.
pub struct KeyedProcessOperator {
    name: String,
    function: Function,
    /// Key columns of each input; `None` for a broadcast second input.
    key_indices: [Option<Vec<usize>>; 2],
    keys: KeyTable,
    timers: TimerService,
    output_schema: SchemaRef,
    side_schemas: Vec<(String, SchemaRef)>,
    watermark: i64,
    ids: Vec<usize>,
    key_ids: Vec<KeyId>,
    timers_fired: u64,
    next_cleanup: i64,
    key_schema: SchemaRef,
    subtask: usize,
    parallelism: usize,
    filter: crate::KeyGroupFilter,
}

/// How often the function's background state cleanup runs.
const CLEANUP_INTERVAL_MS: i64 = 1_000;

impl KeyedProcessOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &KeyedProcessSpec,
        output_schema: SchemaRef,
        side_schemas: Vec<(String, SchemaRef)>,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let indices = |schema: &arrow::datatypes::Schema, keys: &[String]| {
            keys.iter()
                .map(|k| schema.index_of(k))
                .collect::<std::result::Result<Vec<_>, _>>()
        };
        let key_indices = indices(&spec.input_schema, &spec.keys)?;
        let key_schema = Arc::new(spec.input_schema.project(&key_indices)?);
        let second = match &spec.second {
            Some(SecondInput {
                keys: Some(k),
                schema,
            }) => Some(indices(schema, k)?),
            _ => None,
        };
        let function = match (&spec.factory, &spec.second) {
            (ProcessFactory::Keyed(f), None) => Function::One(f()),
            (ProcessFactory::Co(f), Some(_)) => Function::Two(f()),
            _ => {
                return Err(WeirError::plan(format!(
                    "{name}: the process function does not match the number of inputs"
                )));
            }
        };
        Ok(Self {
            name,
            function,
            key_indices: [Some(key_indices), second],
            keys: KeyTable::new(Arc::clone(&key_schema))?,
            timers: TimerService::default(),
            output_schema,
            side_schemas,
            watermark: i64::MIN,
            ids: Vec::new(),
            key_ids: Vec::new(),
            timers_fired: 0,
            next_cleanup: now_ms() + CLEANUP_INTERVAL_MS,
            key_schema,
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            filter: crate::KeyGroupFilter::new(ctx),
        })
    }

    /// Run `f` with a fresh context over `key_ids`, then forward what it emitted.
    fn call(
        &mut self,
        key_ids: &[KeyId],
        out: &mut dyn Output,
        f: impl FnOnce(&mut Function, &mut ProcessContext) -> Result<()>,
    ) -> Result<()> {
        let keys = &self.keys;
        let lookup = |ids: &[KeyId]| keys.values(ids);
        let mut ctx =
            ProcessContext::new(key_ids, &lookup, &mut self.timers, self.watermark, now_ms());
        f(&mut self.function, &mut ctx)?;
        let (main, side) = ctx.into_outputs();
        for b in main {
            if b.schema().fields() != self.output_schema.fields() {
                return Err(WeirError::Execution(format!(
                    "{}: emitted a batch with columns {:?}, declared {:?}",
                    self.name,
                    b.schema().fields(),
                    self.output_schema.fields()
                )));
            }
            if b.num_rows() > 0 {
                out.collect(b)?;
            }
        }
        for (tag, b) in side {
            match self.side_schemas.iter().find(|(t, _)| *t == tag) {
                Some((_, s)) if s.fields() == b.schema().fields() => out.collect_side(&tag, b)?,
                Some(_) => {
                    return Err(WeirError::Execution(format!(
                        "{}: side output '{tag}' emitted with the wrong schema",
                        self.name
                    )));
                }
                None => {
                    return Err(WeirError::Execution(format!(
                        "{}: side output '{tag}' was not declared",
                        self.name
                    )));
                }
            }
        }
        Ok(())
    }

    fn fire(
        &mut self,
        domain: TimeDomain,
        timers: Vec<(i64, KeyId)>,
        out: &mut dyn Output,
    ) -> Result<()> {
        if timers.is_empty() {
            return Ok(());
        }
        self.timers_fired += timers.len() as u64;
        let fired = FiredTimers { domain, timers };
        self.call(&[], out, |f, ctx| match f {
            Function::One(f) => f.on_timers(&fired, ctx),
            Function::Two(f) => f.on_timers(&fired, ctx),
        })
    }
}

impl KeyedProcessOperator {
    /// The `timers` table: key columns, `domain` (`event` | `processing`),
    /// `timestamp`.
    fn timers_table(&self, writer: &StateWriter) -> Result<StateTable> {
        let (mut ids, mut domains, mut stamps) = (Vec::new(), Vec::new(), Vec::new());
        for (domain, ts, key) in self.timers.iter() {
            ids.push(key);
            domains.push(match domain {
                TimeDomain::EventTime => "event",
                TimeDomain::ProcessingTime => "processing",
            });
            stamps.push(ts);
        }
        let batch = writer.keyed_batch(
            &ids,
            vec![
                (
                    Field::new("domain", DataType::Utf8, false),
                    Arc::new(StringArray::from(domains)) as ArrayRef,
                ),
                (
                    Field::new("timestamp", DataType::Int64, false),
                    Arc::new(Int64Array::from(stamps)),
                ),
            ],
        )?;
        Ok(StateTable::new("timers", batch).keyed(0..self.key_schema.fields().len()))
    }

    /// Rows of a restored keyed table in this subtask's key groups: their
    /// key ids (interned) and the columns after the key columns.
    fn restore_keys(&mut self, batch: RecordBatch) -> Result<(Vec<KeyId>, RecordBatch)> {
        let n = self.key_schema.fields().len();
        if batch.num_columns() < n {
            return Err(WeirError::Execution(format!(
                "{}: keyed state table has {} columns, the key alone has {n}",
                self.name,
                batch.num_columns()
            )));
        }
        let batch = self.filter.keep(batch, &(0..n).collect::<Vec<_>>())?;
        let mut ids = Vec::new();
        self.keys.intern(&batch.columns()[..n], &mut ids)?;
        let rest = batch.project(&(n..batch.num_columns()).collect::<Vec<_>>())?;
        Ok((ids.into_iter().map(|i| i as KeyId).collect(), rest))
    }

    fn restore_timers(&mut self, batch: RecordBatch) -> Result<()> {
        let (ids, rest) = self.restore_keys(batch)?;
        let malformed = || WeirError::Execution(format!("{}: malformed timer state", self.name));
        let domains = rest
            .column(0)
            .as_string_opt::<i32>()
            .ok_or_else(malformed)?;
        let stamps = rest
            .column(1)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(malformed)?;
        for (row, &id) in ids.iter().enumerate() {
            let ts = stamps.value(row);
            match domains.value(row) {
                "event" => self.timers.register_event_time_timer(id, ts),
                "processing" => self.timers.register_processing_time_timer(id, ts),
                _ => return Err(malformed()),
            }
        }
        Ok(())
    }
}

impl Operator for KeyedProcessOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.process_input(0, batch, out)
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut dyn Output,
    ) -> Result<()> {
        let mut key_ids = std::mem::take(&mut self.key_ids);
        key_ids.clear();
        if let Some(indices) = self.key_indices.get(input).and_then(Option::as_ref) {
            let keys: Vec<ArrayRef> = indices
                .iter()
                .map(|&i| Arc::clone(batch.column(i)))
                .collect();
            let mut ids = std::mem::take(&mut self.ids);
            self.keys.intern(&keys, &mut ids)?;
            key_ids.extend(ids.iter().map(|&i| i as KeyId));
            self.ids = ids;
        }
        let name = self.name.clone();
        let result = self.call(&key_ids, out, |f, ctx| match (f, input) {
            (Function::One(f), 0) => f.process_batch(&batch, ctx),
            (Function::Two(f), 0) => f.process_batch1(&batch, ctx),
            (Function::Two(f), 1) => f.process_batch2(&batch, ctx),
            _ => Err(WeirError::Execution(format!("{name}: no input {input}"))),
        });
        self.key_ids = key_ids;
        result
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(watermark.0);
        let due = self.timers.take_event_time(self.watermark);
        self.fire(TimeDomain::EventTime, due, out)?;
        Ok(Some(watermark))
    }

    fn next_processing_timer(&self) -> Option<i64> {
        let timer = self.timers.next_processing_time().unwrap_or(i64::MAX);
        Some(timer.min(self.next_cleanup))
    }

    fn on_processing_time(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        if now >= self.next_cleanup {
            match &mut self.function {
                Function::One(f) => f.cleanup(now),
                Function::Two(f) => f.cleanup(now),
            }
            self.next_cleanup = now + CLEANUP_INTERVAL_MS;
        }
        let due = self.timers.take_processing_time(now);
        self.fire(TimeDomain::ProcessingTime, due, out)
    }

    /// Tables: the function's states (see [`weir_core::process::StateWriter`]),
    /// `timers` and `meta` (the watermark).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let keys = &self.keys;
        let lookup = |ids: &[KeyId]| keys.values(ids);
        let mut writer = StateWriter::new(
            &lookup,
            Arc::clone(&self.key_schema),
            self.subtask,
            self.parallelism,
        );
        match &self.function {
            Function::One(f) => f.snapshot_state(&mut writer),
            Function::Two(f) => f.snapshot_state(&mut writer),
        }
        .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        let timers = self.timers_table(&writer)?;
        let mut tables: Vec<StateTable> = writer
            .into_tables()
            .into_iter()
            .map(|(name, batch)| {
                let keys = if is_keyed_table(&name) {
                    0..self.key_schema.fields().len()
                } else {
                    0..0
                };
                StateTable::new(name, batch).keyed(keys)
            })
            .collect();
        tables.push(timers);
        tables.push(meta_table(self.watermark)?);
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let mut reader = StateReader::new(self.subtask, self.parallelism);
        let mut watermark = None;
        for t in tables {
            match t.name.as_str() {
                "meta" => restore_meta(&self.name, &t.batch, &mut watermark)?,
                "timers" => self.restore_timers(t.batch)?,
                name if is_keyed_table(name) => {
                    let (ids, rest) = self.restore_keys(t.batch)?;
                    reader.add_keyed(t.name, ids, rest);
                }
                name if is_operator_table(name) => reader.add_operator(t.name, t.batch),
                other => {
                    return Err(WeirError::Execution(format!(
                        "{}: unknown state table '{other}'",
                        self.name
                    )));
                }
            }
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
        match &mut self.function {
            Function::One(f) => f.restore_state(&mut reader),
            Function::Two(f) => f.restore_state(&mut reader),
        }
        .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        let (event, processing) = self.timers.len();
        vec![
            ("timers_fired".into(), self.timers_fired),
            ("timers_pending".into(), (event + processing) as u64),
            ("keys".into(), self.keys.locations.len() as u64),
        ]
    }
}
