//! Operator chains: operators fused into one task, passing batches by value.

use arrow::record_batch::RecordBatch;
use weir_core::Result;
use weir_core::graph::OperatorMetrics;
use weir_core::message::Watermark;
use weir_operators::memory::{StateMemory, StateReservation};
use weir_operators::{Operator, Output, StateTable};

struct ChainedOperator {
    operator: Box<dyn Operator>,
    records_in: u64,
    /// The operator's share of the managed memory budget, sized by the
    /// chain from its `state_bytes` (operators that account for
    /// themselves have none here).
    memory: Option<StateReservation>,
}

/// What a chain emitted: main-output batches of its last operator, and side
/// outputs tagged with the position of the operator that emitted them.
#[derive(Default)]
pub struct ChainOutput {
    /// Main output of the chain's last operator.
    pub main: Vec<RecordBatch>,
    /// `(operator position, tag, batch)`.
    pub side: Vec<(usize, String, RecordBatch)>,
}

impl ChainOutput {
    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.main.is_empty() && self.side.is_empty()
    }
}

/// The operators of one task, head first. A batch emitted by operator `k` is
/// handed straight to operator `k + 1` (no queue, no copy); what the last
/// operator emits is collected for the task's network outputs.
pub struct OperatorChain {
    operators: Vec<ChainedOperator>,
    records_out: u64,
    /// When operators' state was last measured against the budget.
    memory_checked: Option<std::time::Instant>,
}

/// Delivers batches to the rest of a chain, or to the task's output buffer.
struct Link<'a> {
    rest: &'a mut [ChainedOperator],
    tail: &'a mut ChainOutput,
    records_out: &'a mut u64,
    /// Position of the operator this link is the output of.
    position: usize,
}

impl Output for Link<'_> {
    fn collect(&mut self, batch: RecordBatch) -> Result<()> {
        match self.rest.split_first_mut() {
            Some((first, rest)) => {
                first.records_in += batch.num_rows() as u64;
                first.operator.process_batch(
                    batch,
                    &mut Link {
                        rest,
                        tail: self.tail,
                        records_out: self.records_out,
                        position: self.position.wrapping_add(1),
                    },
                )
            }
            None => {
                *self.records_out += batch.num_rows() as u64;
                self.tail.main.push(batch);
                Ok(())
            }
        }
    }

    fn collect_side(&mut self, tag: &str, batch: RecordBatch) -> Result<()> {
        self.tail.side.push((self.position, tag.to_string(), batch));
        Ok(())
    }
}

impl OperatorChain {
    /// A chain of `operators`, head first.
    pub fn new(operators: Vec<Box<dyn Operator>>) -> Self {
        Self {
            operators: operators
                .into_iter()
                .map(|operator| ChainedOperator {
                    operator,
                    records_in: 0,
                    memory: None,
                })
                .collect(),
            records_out: 0,
            memory_checked: None,
        }
    }

    /// Hold the state of operators that do not account for themselves
    /// against `memory`'s budget (none without a budget).
    pub fn with_memory(mut self, memory: &StateMemory) -> Self {
        if memory.limit().is_none() {
            return self;
        }
        for op in &mut self.operators {
            if !op.operator.accounts_memory() {
                op.memory = Some(memory.reserve(op.operator.name(), false));
            }
        }
        self.memory_checked = Some(std::time::Instant::now());
        self
    }

    /// At most once a second: size each operator's reservation to the
    /// state it reports, failing the task when the budget is exceeded.
    pub fn check_memory(&mut self) -> Result<()> {
        let Some(at) = self.memory_checked else {
            return Ok(());
        };
        if at.elapsed() < std::time::Duration::from_secs(1) {
            return Ok(());
        }
        self.memory_checked = Some(std::time::Instant::now());
        for op in &mut self.operators {
            let Some(reservation) = &mut op.memory else {
                continue;
            };
            let bytes = op
                .operator
                .metrics()
                .into_iter()
                .find(|(k, _)| k == "state_bytes")
                .map_or(0, |(_, v)| v as usize);
            reservation.resize(bytes)?;
        }
        Ok(())
    }

    /// Push a batch of the head's input `input` through the chain.
    pub fn process_input(
        &mut self,
        input: usize,
        batch: RecordBatch,
        tail: &mut ChainOutput,
    ) -> Result<()> {
        if input == 0 {
            return self.process(batch, tail);
        }
        let (head, rest) = self
            .operators
            .split_first_mut()
            .ok_or_else(|| weir_core::WeirError::Execution("empty chain with two inputs".into()))?;
        head.records_in += batch.num_rows() as u64;
        head.operator.process_input(
            input,
            batch,
            &mut Link {
                rest,
                tail,
                records_out: &mut self.records_out,
                position: 0,
            },
        )
    }

    /// Snapshot every operator for checkpoint `checkpoint`, head first.
    pub fn snapshot(&mut self, checkpoint: u64) -> Result<Vec<Vec<StateTable>>> {
        self.operators
            .iter_mut()
            .map(|o| o.operator.snapshot_state(checkpoint))
            .collect()
    }

    /// Restore every operator (head first) from its tables.
    pub fn restore(&mut self, states: Vec<Vec<StateTable>>) -> Result<()> {
        for (o, tables) in self.operators.iter_mut().zip(states) {
            o.operator.restore_state(tables)?;
        }
        Ok(())
    }

    /// Checkpoint `checkpoint` completed everywhere.
    pub fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        for o in &mut self.operators {
            o.operator.notify_checkpoint_complete(checkpoint)?;
        }
        Ok(())
    }

    /// Push a batch through the chain; output batches land in `tail`.
    pub fn process(&mut self, batch: RecordBatch, tail: &mut ChainOutput) -> Result<()> {
        // The chain input is the "output" of a virtual operator before the head.
        Link {
            rest: &mut self.operators,
            tail,
            records_out: &mut self.records_out,
            position: usize::MAX,
        }
        .collect(batch)
    }

    /// Advance the watermark operator by operator, each one's output flowing
    /// through the rest of the chain before the next sees the watermark.
    /// Returns the watermark to forward downstream, if any.
    pub fn on_watermark(
        &mut self,
        watermark: Watermark,
        tail: &mut ChainOutput,
    ) -> Result<Option<Watermark>> {
        let mut current = Some(watermark);
        for k in 0..self.operators.len() {
            let Some(w) = current else { break };
            let (head, rest) = self.operators.split_at_mut(k + 1);
            current = head[k].operator.on_watermark(
                w,
                &mut Link {
                    rest,
                    tail,
                    records_out: &mut self.records_out,
                    position: k,
                },
            )?;
        }
        Ok(current)
    }

    /// The earliest processing-time timer of any chained operator.
    pub fn next_processing_timer(&self) -> Option<i64> {
        self.operators
            .iter()
            .filter_map(|o| o.operator.next_processing_timer())
            .min()
    }

    /// The wall clock reached `now`: let each operator fire its timers, its
    /// output flowing through the rest of the chain.
    pub fn on_processing_time(&mut self, now: i64, tail: &mut ChainOutput) -> Result<()> {
        for k in 0..self.operators.len() {
            if self.operators[k]
                .operator
                .next_processing_timer()
                .is_none_or(|t| t > now)
            {
                continue;
            }
            let (head, rest) = self.operators.split_at_mut(k + 1);
            head[k].operator.on_processing_time(
                now,
                &mut Link {
                    rest,
                    tail,
                    records_out: &mut self.records_out,
                    position: k,
                },
            )?;
        }
        Ok(())
    }

    /// End of input: finish operators head first, so every operator receives
    /// its predecessor's final output before finishing itself.
    pub fn finish(&mut self, tail: &mut ChainOutput) -> Result<()> {
        for k in 0..self.operators.len() {
            let (head, rest) = self.operators.split_at_mut(k + 1);
            head[k].operator.finish(&mut Link {
                rest,
                tail,
                records_out: &mut self.records_out,
                position: k,
            })?;
        }
        Ok(())
    }

    /// Publish the chain's counters into `live`: rows in and out per
    /// operator (one relaxed store each), and at most once a second the
    /// operators' own counters.
    pub fn publish(&self, live: &weir_core::metrics::LiveTask) {
        use std::sync::atomic::Ordering::Relaxed;
        for (k, (op, l)) in self.operators.iter().zip(&live.operators).enumerate() {
            l.records_in.store(op.records_in, Relaxed);
            l.records_out.store(self.records_out_of(k), Relaxed);
        }
        if live.publish_due() {
            for (op, l) in self.operators.iter().zip(&live.operators) {
                *l.counters.lock().unwrap_or_else(|e| e.into_inner()) = op.operator.metrics();
            }
        }
    }

    /// Rows operator `k` emitted: what the next one took in, or what left
    /// the chain.
    fn records_out_of(&self, k: usize) -> u64 {
        match self.operators.get(k + 1) {
            Some(next) => next.records_in,
            None => self.records_out,
        }
    }

    /// The operators' names, head first.
    pub fn names(&self) -> Vec<String> {
        self.operators
            .iter()
            .map(|o| o.operator.name().to_string())
            .collect()
    }

    /// Rows entering the chain's head.
    pub fn records_in(&self) -> u64 {
        self.operators.first().map(|o| o.records_in).unwrap_or(0)
    }

    /// Count rows that entered the chain from a source (the head operator of
    /// a source task is fed by the source, not by `process`).
    pub fn metrics(&self, source_rows: Option<(&str, u64)>) -> Vec<OperatorMetrics> {
        let mut out = Vec::new();
        if let Some((name, rows)) = source_rows {
            out.push(OperatorMetrics {
                name: name.to_string(),
                records_in: 0,
                records_out: rows,
                counters: vec![],
            });
        }
        for (k, op) in self.operators.iter().enumerate() {
            let records_out = self.records_out_of(k);
            out.push(OperatorMetrics {
                name: op.operator.name().to_string(),
                records_in: op.records_in,
                records_out,
                counters: op.operator.metrics(),
            });
        }
        out
    }
}
