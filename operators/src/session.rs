//! Keyed event-time session windows.
//!
//! Each record opens `[ts, ts + gap)`; sessions of the same key that overlap
//! or touch merge (Flink's `EventTimeSessionWindows`). Aggregation is
//! incremental: every session owns a group id in one set of DataFusion
//! `GroupsAccumulator`s; when a record bridges sessions, their ids are
//! aliased in a union-find table instead of moving state. When the watermark
//! closes sessions, the accumulators' intermediate state is drained once
//! and merged by resolved id into the results of the closed sessions and a
//! fresh, compact set of accumulators for the open ones — so state never
//! holds closed sessions or keys without an open session.
//!
//! Records are assigned in arrival order, as Flink does: a record that is
//! late on its own is dropped even if a newer record arriving after it
//! would open a session it touches ([`crate::sessions`]).

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, TimestampMillisecondArray, UInt32Array};
use arrow::compute::{filter_record_batch, take};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_plan::aggregates::group_values::GroupValues;
use weir_core::message::Watermark;
use weir_core::spec::WindowAggregateSpec;
use weir_core::time::WindowAssigner;
use weir_core::{Result, WeirError};

use crate::process::now_ms;
use crate::sessions::{LATE, Session, SessionSet};
use crate::window::{Aggregates, drain_states, regroup, timestamps};
use crate::{LateRecords, Operator, OperatorContext, Output, StateTable};

/// Keyed session windows with incremental aggregation.
pub struct SessionWindowOperator {
    name: String,
    aggregates: Aggregates,
    /// Event-time column; `None` for processing-time sessions, whose rows
    /// are stamped with the wall clock on arrival.
    ts_index: Option<usize>,
    lateness: i64,
    late: LateRecords,
    output_schema: SchemaRef,
    batch_size: usize,
    keys: Box<dyn GroupValues>,
    sessions: SessionSet,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    watermark: i64,
    key_ids: Vec<usize>,
    windows_fired: u64,
    state_bytes_max: u64,
    filter: crate::KeyGroupFilter,
    /// Rows a disk-backend snapshot held pending, put through first.
    replay: crate::spill::Replay,
}

impl SessionWindowOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowAggregateSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let WindowAssigner::Session { gap } = spec.assigner else {
            return Err(WeirError::plan(format!("{name}: not a session window")));
        };
        let aggregates = Aggregates::try_new(&name, spec)?;
        let fresh = aggregates.new_accumulation()?;
        Ok(Self {
            name,
            ts_index: match (&spec.rowtime, spec.processing_time) {
                (_, true) => None,
                (Some(rt), false) => Some(spec.input_schema.index_of(rt)?),
                (None, false) => {
                    return Err(WeirError::plan(
                        "event-time session windows need event time",
                    ));
                }
            },
            lateness: spec.allowed_lateness,
            late: LateRecords::new(spec.late_data_tag.clone()),
            output_schema,
            batch_size: ctx.config.batch_size,
            keys: fresh.groups,
            sessions: SessionSet::new(gap, spec.allowed_lateness),
            accumulators: fresh.accumulators,
            watermark: i64::MIN,
            key_ids: Vec::new(),
            windows_fired: 0,
            state_bytes_max: 0,
            filter: crate::KeyGroupFilter::new(ctx),
            replay: Default::default(),
            aggregates,
        })
    }

    /// Bytes held by keys, sessions and accumulators.
    pub fn state_bytes(&self) -> usize {
        self.keys.size()
            + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
            + self.sessions.bytes()
    }

    /// Number of open sessions.
    pub fn open_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Close every session whose end the watermark has passed: emit its
    /// result, and rebuild keys and accumulators from the open sessions.
    fn close_sessions(&mut self, out: &mut dyn Output) -> Result<()> {
        let groups = self.sessions.parent.len();
        let roots = self.sessions.roots();
        // Closed sessions become output rows, open ones new groups.
        const NONE: u32 = u32::MAX;
        let mut closed_index = vec![NONE; groups];
        let mut open_index = vec![NONE; groups];
        let (mut closed_starts, mut closed_ends, mut closed_keys) = (vec![], vec![], vec![]);
        let mut open_keys: Vec<u32> = Vec::new();
        let mut open_sessions: Vec<Vec<Session>> = Vec::new();
        let mut next_open = 0usize;
        let mut min_end = i64::MAX;
        let mut updates: Vec<bool> = Vec::new();
        for (key, list) in self.sessions.sessions.iter().enumerate() {
            let mut kept = Vec::new();
            for s in list {
                let last = s.end.saturating_sub(1);
                if last <= self.watermark && (!s.fired || s.dirty) {
                    closed_index[s.group] = closed_starts.len() as u32;
                    closed_starts.push(s.start);
                    closed_ends.push(s.end);
                    closed_keys.push(key as u32);
                    updates.push(s.fired);
                }
                // Kept until the watermark passes its end plus the lateness.
                if last.saturating_add(self.lateness) > self.watermark {
                    open_index[s.group] = next_open as u32;
                    let fired = s.fired || last <= self.watermark;
                    kept.push(Session {
                        group: next_open,
                        fired,
                        dirty: false,
                        ..*s
                    });
                    next_open += 1;
                    min_end = min_end.min(if fired {
                        last.saturating_add(self.lateness)
                    } else {
                        last
                    });
                }
            }
            if !kept.is_empty() {
                open_keys.push(key as u32);
                open_sessions.push(kept);
            }
        }
        let states = drain_states(&mut self.accumulators)?;
        let route = |index: &[u32]| -> Vec<Option<usize>> {
            (0..groups)
                .map(|g| {
                    Some(index[roots[g]])
                        .filter(|&i| i != NONE)
                        .map(|i| i as usize)
                })
                .collect()
        };
        let all_keys = self.keys.emit(EmitTo::All)?;
        // Results of the closed sessions.
        let closed = closed_starts.len();
        if closed > 0 {
            let mut results = self.aggregates.new_accumulation()?.accumulators;
            regroup(&states, &route(&closed_index), &mut results, closed)?;
            let key_idx = UInt32Array::from(closed_keys);
            let mut columns: Vec<ArrayRef> = vec![
                Arc::new(TimestampMillisecondArray::from(closed_starts)),
                Arc::new(TimestampMillisecondArray::from(closed_ends)),
            ];
            for k in &self.aggregates.output_keys(all_keys.clone()) {
                columns.push(take(k.as_ref(), &key_idx, None)?);
            }
            for a in &mut results {
                columns.push(a.evaluate(EmitTo::All)?);
            }
            if self.lateness > 0 {
                columns.push(Arc::new(BooleanArray::from(updates)));
            }
            let batch = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
                .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
            self.windows_fired += closed as u64;
            crate::pane_buffer::emit_sliced(&batch, self.batch_size, out)?;
        }
        // Open sessions continue in compact accumulators and key ids.
        let mut fresh = self.aggregates.new_accumulation()?;
        regroup(
            &states,
            &route(&open_index),
            &mut fresh.accumulators,
            next_open,
        )?;
        let open_idx = UInt32Array::from(open_keys);
        let kept_keys = all_keys
            .iter()
            .map(|k| take(k.as_ref(), &open_idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if !open_idx.is_empty() {
            fresh.groups.intern(&kept_keys, &mut self.key_ids)?;
        }
        self.keys = fresh.groups;
        self.accumulators = fresh.accumulators;
        self.sessions.sessions = open_sessions;
        self.sessions.parent = (0..next_open).collect();
        self.sessions.next_due = min_end;
        self.sessions.any_dirty = false;
        Ok(())
    }
}

impl SessionWindowOperator {
    /// Time (the watermark, or the clock for processing-time sessions)
    /// advanced to `time`: close the sessions it completes.
    fn advance(&mut self, time: i64, out: &mut dyn Output) -> Result<()> {
        self.watermark = self.watermark.max(time);
        self.state_bytes_max = self.state_bytes_max.max(self.state_bytes() as u64);
        if self.sessions.next_due <= self.watermark || self.sessions.any_dirty {
            self.close_sessions(out)?;
        }
        Ok(())
    }

    /// Rows of a disk-backend snapshot's pending rows first, as they came.
    fn put_through_replay(&mut self, out: &mut dyn Output) -> Result<()> {
        for (_, batch) in self.replay.drain() {
            self.process_rows(batch, out)?;
        }
        Ok(())
    }

    fn process_rows(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(());
        }
        let ts = match self.ts_index {
            Some(i) => {
                let name = batch.schema().field(i).name().clone();
                timestamps(batch.column(i), &name)?.to_vec()
            }
            None => vec![now_ms(); rows],
        };
        let keys = self.aggregates.keys(&batch);
        let mut key_ids = std::mem::take(&mut self.key_ids);
        self.keys.intern(&keys, &mut key_ids)?;
        let groups = self.sessions.assign_batch(&key_ids, &ts, self.watermark);
        self.key_ids = key_ids;
        let total = self.sessions.parent.len();
        let late = groups.iter().filter(|&&g| g == LATE).count();
        if late == 0 {
            self.aggregates
                .update(&mut self.accumulators, &batch, &groups, total)?;
        } else {
            let mask: BooleanArray = groups.iter().map(|&g| Some(g != LATE)).collect();
            let kept = filter_record_batch(&batch, &mask)?;
            let late_rows = filter_record_batch(&batch, &arrow::compute::not(&mask)?)?;
            self.late.handle(&late_rows, out)?;
            let ids: Vec<usize> = groups.into_iter().filter(|&g| g != LATE).collect();
            self.aggregates
                .update(&mut self.accumulators, &kept, &ids, total)?;
        }
        // Late records changed sessions whose end had passed: fire them now.
        if self.sessions.any_dirty {
            self.close_sessions(out)?;
        }
        Ok(())
    }
}

impl Operator for SessionWindowOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        self.process_rows(batch, out)
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        self.put_through_replay(out)?;
        if self.ts_index.is_some() {
            self.advance(watermark.0, out)?;
        }
        Ok(Some(watermark))
    }

    fn next_processing_timer(&self) -> Option<i64> {
        (self.ts_index.is_none() && self.sessions.next_due != i64::MAX)
            .then_some(self.sessions.next_due)
    }

    fn on_processing_time(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        if self.ts_index.is_none() {
            self.advance(now, out)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        // End of input closes the processing-time sessions still open.
        if self.ts_index.is_none() {
            self.advance(i64::MAX, out)?;
        }
        Ok(())
    }

    /// Sessions: keyed; `meta` is the clock.
    fn spill_keys(&self) -> Option<Vec<Vec<usize>>> {
        Some(vec![self.aggregates.key_indices.clone()])
    }

    /// The last millisecond of the earliest unfired session, or the end of
    /// a fired one's lateness (a row at time `t` opens a session ending
    /// after `t`).
    fn watermark_timers(&self) -> Option<crate::WatermarkTimers> {
        let due = (self.sessions.next_due != i64::MAX).then_some(self.sessions.next_due);
        Some(match self.ts_index {
            Some(ts) => crate::WatermarkTimers {
                event: due,
                processing: None,
                rowtime: vec![Some(ts)],
            },
            None => crate::WatermarkTimers {
                event: None,
                processing: due,
                rowtime: vec![None],
            },
        })
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("windows_fired".into(), self.windows_fired),
            ("num_late_records_dropped".into(), self.late.dropped()),
            ("state_bytes_max".into(), self.state_bytes_max),
            ("state_bytes".into(), self.state_bytes() as u64),
            ("state_rows".into(), self.open_sessions() as u64),
        ]
    }

    /// Tables `sessions` (one row per open session: the key columns,
    /// `session_start`, `session_end`, `fired`, then each aggregate's
    /// intermediate state as `a{i}_{field}`) and `meta` (`watermark`).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        const NONE: usize = usize::MAX;
        let groups = self.sessions.parent.len();
        let roots = self.sessions.roots();
        let mut index = vec![NONE; groups];
        let (mut starts, mut ends, mut fired, mut key_rows) = (vec![], vec![], vec![], vec![]);
        for (key, list) in self.sessions.sessions.iter_mut().enumerate() {
            for s in list.iter_mut() {
                index[s.group] = starts.len();
                s.group = starts.len();
                starts.push(s.start);
                ends.push(s.end);
                fired.push(s.fired);
                key_rows.push(key as u32);
            }
        }
        let n = starts.len();
        // One group per open session (merged sessions folded), then back.
        let states = drain_states(&mut self.accumulators)?;
        let target: Vec<Option<usize>> = (0..groups)
            .map(|g| Some(index[roots[g]]).filter(|&i| i != NONE))
            .collect();
        let mut compact = self.aggregates.new_accumulation()?.accumulators;
        regroup(&states, &target, &mut compact, n)?;
        let session_states = drain_states(&mut compact)?;
        let ids: Vec<usize> = (0..n).collect();
        let mut fresh = self.aggregates.new_accumulation()?.accumulators;
        for (a, state) in fresh.iter_mut().zip(&session_states) {
            a.merge_batch(state, &ids, n)?;
        }
        self.accumulators = fresh;
        self.sessions.parent = ids;
        // Key ids stay as they are: re-intern the emitted keys in order.
        let all_keys = self.keys.emit(EmitTo::All)?;
        let mut fresh_keys = self.aggregates.new_accumulation()?.groups;
        if all_keys.first().is_some_and(|k| !k.is_empty()) {
            fresh_keys.intern(&all_keys, &mut self.key_ids)?;
        }
        self.keys = fresh_keys;
        let key_idx = UInt32Array::from(key_rows);
        let mut columns: Vec<ArrayRef> = all_keys
            .iter()
            .map(|k| take(k.as_ref(), &key_idx, None))
            .collect::<std::result::Result<_, _>>()?;
        columns.push(Arc::new(arrow::array::Int64Array::from(starts)));
        columns.push(Arc::new(arrow::array::Int64Array::from(ends)));
        columns.push(Arc::new(BooleanArray::from(fired)));
        columns.extend(session_states.into_iter().flatten());
        let schema = self.aggregates.session_snapshot_schema()?;
        let sessions = RecordBatch::try_new(schema, columns)?;
        let mut tables = vec![
            StateTable::new("sessions", sessions).keyed(0..all_keys.len()),
            crate::window::meta_table(self.watermark)?,
        ];
        tables.extend(self.replay.tables(&[&self.aggregates.key_indices]));
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        use arrow::array::AsArray;
        use arrow::datatypes::Int64Type;
        let keys = self.aggregates.key_schema().fields().len();
        let widths = self.aggregates.state_widths()?;
        let malformed =
            |what: &str| WeirError::Execution(format!("{}: malformed {what} state", self.name));
        let mut watermark = None::<i64>;
        for t in tables {
            let keys_of_input = [self.aggregates.key_indices.as_slice()];
            let Some(t) = self.replay.take_table(t, &keys_of_input, &self.filter)? else {
                continue;
            };
            match t.name.as_str() {
                "meta" => crate::window::restore_meta(&self.name, &t.batch, &mut watermark)?,
                "sessions" => {
                    if t.batch.num_columns() != keys + 3 + widths.iter().sum::<usize>() {
                        return Err(malformed("session"));
                    }
                    let b = self.filter.keep(t.batch, &(0..keys).collect::<Vec<_>>())?;
                    let n = b.num_rows();
                    if n == 0 {
                        continue;
                    }
                    let mut key_ids = Vec::new();
                    self.keys.intern(&b.columns()[..keys], &mut key_ids)?;
                    let starts = b
                        .column(keys)
                        .as_primitive_opt::<Int64Type>()
                        .ok_or_else(|| malformed("session"))?;
                    let ends = b
                        .column(keys + 1)
                        .as_primitive_opt::<Int64Type>()
                        .ok_or_else(|| malformed("session"))?;
                    let fired = b
                        .column(keys + 2)
                        .as_boolean_opt()
                        .ok_or_else(|| malformed("session"))?;
                    let first = self.sessions.parent.len();
                    if let Some(&max) = key_ids.iter().max()
                        && self.sessions.sessions.len() <= max
                    {
                        self.sessions.sessions.resize(max + 1, Vec::new());
                    }
                    for (r, &key) in key_ids.iter().enumerate() {
                        let group = first + r;
                        self.sessions.parent.push(group);
                        let (start, end, was_fired) =
                            (starts.value(r), ends.value(r), fired.value(r));
                        let last = end.saturating_sub(1);
                        self.sessions.next_due = self.sessions.next_due.min(if was_fired {
                            last.saturating_add(self.lateness)
                        } else {
                            last
                        });
                        self.sessions.sessions[key].push(Session {
                            start,
                            end,
                            group,
                            fired: was_fired,
                            dirty: false,
                        });
                    }
                    for list in &mut self.sessions.sessions {
                        list.sort_by_key(|s| s.start);
                    }
                    let ids: Vec<usize> = (first..first + n).collect();
                    let total = first + n;
                    let mut at = keys + 3;
                    for (a, &w) in self.accumulators.iter_mut().zip(&widths) {
                        a.merge_batch(&b.columns()[at..at + w], &ids, total)?;
                        at += w;
                    }
                }
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
        Ok(())
    }
}
