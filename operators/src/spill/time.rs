//! The disk backend for operators whose output waits on time (windows,
//! sessions): a spilled partition is read back only when a timer of its
//! own, or one its pending rows may set, is due.

use arrow::array::{RecordBatch, UInt32Array};
use weir_core::Result;
use weir_core::message::Watermark;

use super::{PARTITIONS, SpillingKeyed, pending_input, state_bytes};
use crate::{Output, StateTable};

impl SpillingKeyed {
    /// Rows `rows` of input `input`'s `batch` pending for partition `p`
    /// (noting their earliest event time when the operator waits on time).
    pub(super) fn push(
        &mut self,
        p: usize,
        input: usize,
        batch: &RecordBatch,
        rows: UInt32Array,
    ) -> Result<()> {
        if let Some(rowtime) = &self.rowtime {
            let least = match rowtime.get(input).copied().flatten() {
                Some(c) => {
                    let name = batch.schema().field(c).name().clone();
                    let ts = crate::window::timestamps(batch.column(c), &name)?;
                    rows.values().iter().map(|&r| ts[r as usize]).min()
                }
                None => Some(i64::MIN),
            };
            let part = &mut self.partitions[p];
            part.min_rowtime = part.min_rowtime.min(least.unwrap_or(i64::MAX));
        }
        self.partitions[p].push(input, batch, rows)
    }

    /// Watermark `w` for an operator that waits on time: each partition in
    /// memory sees it (its rows that could be due first); a spilled one is
    /// read back only when a timer of its own or of its pending rows is
    /// due at `w`.
    pub(super) fn advance(&mut self, w: Watermark, out: &mut dyn Output) -> Result<()> {
        for p in 0..PARTITIONS {
            let part = &self.partitions[p];
            let rows_due = part.pending_rows > 0 && part.min_rowtime <= w.0;
            let timers_due = part.event_due.is_some_and(|t| t <= w.0);
            if part.resident.is_none() && !rows_due && !(part.is_spilled() && timers_due) {
                continue;
            }
            if rows_due || part.resident.is_none() {
                self.merge(p, out)?;
            }
            let part = &mut self.partitions[p];
            let op = part.resident.as_mut().expect("merged");
            if part.seen < w.0 {
                op.on_watermark(w, out)?;
                part.seen = w.0;
                part.bytes = state_bytes(op.as_ref());
            }
            self.fit(out)?;
        }
        self.watermark = self.watermark.max(w.0);
        Ok(())
    }

    /// The clock reached `now` for an operator that waits on time: its
    /// partitions whose timers are due, spilled ones read back.
    pub(super) fn advance_clock(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        for p in 0..PARTITIONS {
            let part = &self.partitions[p];
            let due = match &part.resident {
                Some(op) => op.next_processing_timer().is_some_and(|t| t <= now),
                None => part.is_spilled() && part.clock_due.is_some_and(|t| t <= now),
            };
            if !due {
                continue;
            }
            self.load(p)?;
            let part = &mut self.partitions[p];
            let op = part.resident.as_mut().expect("loaded");
            op.on_processing_time(now, out)?;
            part.bytes = state_bytes(op.as_ref());
            self.fit(out)?;
        }
        Ok(())
    }

    /// End of input for an operator that waits on time: every partition
    /// with state or rows goes through and finishes.
    pub(super) fn finish_all(&mut self, out: &mut dyn Output) -> Result<()> {
        for p in 0..PARTITIONS {
            let part = &self.partitions[p];
            if part.resident.is_none() && !part.is_spilled() && part.pending_rows == 0 {
                continue;
            }
            self.merge(p, out)?;
            let part = &mut self.partitions[p];
            let op = part.resident.as_mut().expect("merged");
            op.finish(out)?;
            part.bytes = state_bytes(op.as_ref());
            self.fit(out)?;
        }
        Ok(())
    }

    /// The tables of an empty partition that are not keyed (its clocks),
    /// as one that saw the last watermark has them.
    pub(super) fn clock_tables(&self, checkpoint: u64) -> Result<Vec<StateTable>> {
        let mut probe = (self.make)()?;
        if !self.shared.is_empty() {
            probe.restore_state(self.shared.clone())?;
        }
        if self.watermark > i64::MIN {
            probe.on_watermark(Watermark(self.watermark), &mut Vec::<RecordBatch>::new())?;
        }
        let mut tables = probe.snapshot_state(checkpoint)?;
        tables.retain(|t| !self.is_keyed(t));
        Ok(tables)
    }

    /// Whether table `t` holds keyed rows (a partition's own, or pending).
    pub(super) fn is_keyed(&self, t: &StateTable) -> bool {
        t.key_columns.is_some()
            || pending_input(&t.name).is_some()
            || self.table_keys.iter().any(|(n, _)| *n == t.name)
    }
}
