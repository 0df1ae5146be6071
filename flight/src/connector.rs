//! The `flight` connector: a sink whose rows Arrow Flight clients list and
//! read by name from the process's [`SinkHub`] (served by
//! [`crate::SinkServer`] on the worker's Flight endpoint), and a source
//! Flight clients push rows into with `do_put` on the same endpoint
//! ([`crate::ingest`]).

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use weir_core::Result;
use weir_core::connector::{
    ConnectorOption, ConnectorSource, OptionKind, SinkSpec, TableDescriptor,
};
use weir_core::graph::StreamNode;
use weir_core::spec::SourceSpec;
use weir_operators::connectors::ConnectorFactory;
use weir_operators::{Operator, OperatorContext, Output, Source, StateTable};

use crate::ingest::FlightSource;

use crate::sinkhub::{SinkBuffer, SinkHub};

/// `'connector' = 'flight'`: rows Flight clients read by name, or push.
pub struct Flight;

/// Batches a `flight` source subtask queues ahead of the job by default.
const DEFAULT_QUEUE_BATCHES: usize = 16;

#[derive(serde::Serialize, serde::Deserialize)]
struct PlannedFlightSource {
    name: String,
    queue_batches: usize,
}

impl ConnectorFactory for Flight {
    fn identifier(&self) -> &str {
        "flight"
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn is_source(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "rows Arrow Flight clients read by name (sink) or push with do_put (source)"
    }

    fn delivery(&self) -> &str {
        "exactly-once (read-committed when checkpointing)"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![
            ConnectorOption::optional(
                "name",
                OptionKind::Text,
                None,
                "what Flight clients list or put to (default: the table's name)",
            ),
            ConnectorOption::optional(
                "source.queue-batches",
                OptionKind::Integer,
                Some("16"),
                "source: pushed batches queued per subtask before the client is held",
            ),
        ]
    }

    fn plan_source(&self, t: &TableDescriptor) -> Option<Result<SourceSpec>> {
        Some((|| {
            let schema = t.declared_schema()?;
            let queue_batches = t
                .number::<usize>("source.queue-batches")?
                .unwrap_or(DEFAULT_QUEUE_BATCHES);
            if queue_batches == 0 {
                return Err(t.error("'source.queue-batches' must be at least 1"));
            }
            let name = t.option("name").unwrap_or(&t.name).to_string();
            let planned = PlannedFlightSource {
                name: name.clone(),
                queue_batches,
            };
            let planned = serde_json::to_value(planned)
                .map_err(|e| weir_core::WeirError::plan(e.to_string()))?;
            Ok(SourceSpec::Connector(
                ConnectorSource::new("flight", schema, false, planned)
                    .with_display(format!("flight({name})"))
                    .with_options(t.options.clone()),
            ))
        })())
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        source.planned_as::<PlannedFlightSource>().map(|_| ())
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        Some(source.planned_as::<PlannedFlightSource>().map(|p| {
            Box::new(FlightSource::open(
                &p.name,
                Arc::clone(&source.schema),
                ctx.subtask,
                ctx.parallelism,
                p.queue_batches,
                ctx.config.checkpoint_interval.is_some(),
            )) as Box<dyn Source>
        }))
    }

    fn plan_sink(&self, t: &TableDescriptor) -> Option<Result<SinkSpec>> {
        Some(Ok(flight_sink(t.option("name").unwrap_or(&t.name))))
    }

    fn accepts_changelog(&self, _: &TableDescriptor) -> Result<bool> {
        Ok(true)
    }

    fn open_sink(
        &self,
        sink: &SinkSpec,
        node: &StreamNode,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        let name = flight_sink_name(sink, &node.name)?;
        let buffer =
            SinkHub::global().sink(&name, Arc::clone(&node.schema), ctx.config.sink_retention);
        buffer.open_writer(ctx.subtask);
        Some(Ok(Box::new(FlightSink {
            name: node.name.clone(),
            buffer,
            subtask: ctx.subtask,
            read_committed: ctx.config.checkpoint_interval.is_some()
                && !ctx.config.sink_read_uncommitted,
            staged: Vec::new(),
            pending: Vec::new(),
        })))
    }
}

/// The name Flight clients see a `flight` sink by (`None` for another
/// connector's sink); `node` names it when nothing else does.
pub fn flight_sink_name(sink: &SinkSpec, node: &str) -> Option<String> {
    if sink.connector != "flight" {
        return None;
    }
    Some(match sink.planned.get("name").and_then(|n| n.as_str()) {
        Some(n) => n.to_string(),
        None => sink
            .options
            .get("name")
            .cloned()
            .unwrap_or_else(|| node.to_string()),
    })
}

/// Rows served to Arrow Flight clients (pyarrow, the Rust `FlightClient`)
/// under `name`: listed by `list_flights`, read by `do_get` with the sink's
/// ticket, from the start even when connecting late (within the job's
/// `sink_retention`).
pub fn flight_sink(name: &str) -> SinkSpec {
    SinkSpec::new("flight", serde_json::json!({ "name": name }))
        .with_display(format!("flight({name})"))
}

/// Serves rows to Flight clients. In read-committed mode (a checkpointing
/// job) rows are staged and published when the checkpoint covering them
/// completes — clients never see rows a restore would take back; the
/// staged rows of each checkpoint are part of its snapshot (table
/// `pending`), so a restore publishes them if the notification was lost.
struct FlightSink {
    name: String,
    buffer: Arc<SinkBuffer>,
    subtask: usize,
    read_committed: bool,
    /// Rows since the last barrier.
    staged: Vec<RecordBatch>,
    /// Rows of checkpoints taken but not yet completed.
    pending: Vec<(u64, Vec<RecordBatch>)>,
}

impl Operator for FlightSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        if self.read_committed {
            self.staged.push(batch);
        } else {
            self.buffer.push(batch);
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut dyn Output) -> Result<()> {
        // The end of input commits everything.
        for (c, rows) in std::mem::take(&mut self.pending) {
            self.buffer.publish(self.subtask, c, rows);
        }
        for b in std::mem::take(&mut self.staged) {
            self.buffer.push(b);
        }
        self.buffer.close_writer(self.subtask);
        Ok(())
    }

    /// Table `pending`: the rows staged for this checkpoint, with the sink's
    /// schema plus `__checkpoint` and `__subtask` columns.
    fn snapshot_state(&mut self, checkpoint: u64) -> Result<Vec<StateTable>> {
        if !self.read_committed {
            return Ok(vec![]);
        }
        let rows = std::mem::take(&mut self.staged);
        let schema = Arc::clone(&self.buffer.schema);
        let data = arrow::compute::concat_batches(&schema, &rows)?;
        self.pending.push((checkpoint, rows));
        let n = data.num_rows();
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        fields.push(Arc::new(arrow::datatypes::Field::new(
            "__checkpoint",
            arrow::datatypes::DataType::UInt64,
            false,
        )));
        fields.push(Arc::new(arrow::datatypes::Field::new(
            "__subtask",
            arrow::datatypes::DataType::UInt64,
            false,
        )));
        let mut columns = data.columns().to_vec();
        columns.push(Arc::new(arrow::array::UInt64Array::from(vec![
            checkpoint;
            n
        ])));
        columns.push(Arc::new(arrow::array::UInt64Array::from(vec![
            self.subtask
                as u64;
            n
        ])));
        let table = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns)?;
        Ok(vec![StateTable::new("pending", table)])
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(c, _)| *c <= checkpoint);
        self.pending = waiting;
        for (c, rows) in done {
            self.buffer.publish(self.subtask, c, rows);
        }
        Ok(())
    }

    /// The restored checkpoint completed: publish its staged rows (once —
    /// the buffer remembers what each subtask published).
    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        use arrow::array::AsArray;
        use arrow::datatypes::UInt64Type;
        let width = self.buffer.schema.fields().len();
        for t in tables.into_iter().filter(|t| t.name == "pending") {
            let b = t.batch;
            if b.num_rows() == 0 || b.num_columns() != width + 2 {
                continue;
            }
            let checkpoint = b.column(width).as_primitive::<UInt64Type>().value(0);
            let subtask = b.column(width + 1).as_primitive::<UInt64Type>().value(0);
            let rows = RecordBatch::try_new(
                Arc::clone(&self.buffer.schema),
                b.columns()[..width].to_vec(),
            )?;
            self.buffer
                .publish(subtask as usize, checkpoint, vec![rows]);
        }
        Ok(())
    }
}
