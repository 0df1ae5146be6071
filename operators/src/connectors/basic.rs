//! Connectors that keep nothing on disk: `print`, `blackhole`, and the
//! program's own rows in and out (`memory`, `collect`).

use weir_core::connector::{
    ConnectorOption, ConnectorSource, OptionKind, SinkSpec, TableDescriptor,
};
use weir_core::graph::StreamNode;
use weir_core::spec::CollectHandle;
use weir_core::{Result, WeirError};

use super::ConnectorFactory;
use crate::sinks::{blackhole_sink, collect_sink, print_sink};
use crate::sources::memory_source;
use crate::{Operator, OperatorContext, Source};

/// `'connector' = 'print'`: rows on standard output, Flink-style.
pub(super) struct Print;

impl ConnectorFactory for Print {
    fn identifier(&self) -> &str {
        "print"
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "rows on standard output as +I[…], prefixed by the subtask"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![]
    }

    fn plan_sink(&self, _: &TableDescriptor) -> Option<Result<SinkSpec>> {
        Some(Ok(print()))
    }

    fn accepts_changelog(&self, _: &TableDescriptor) -> Result<bool> {
        Ok(true)
    }

    fn open_sink(
        &self,
        _: &SinkSpec,
        node: &StreamNode,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        Some(Ok(print_sink(node.name.clone(), ctx)))
    }
}

/// `'connector' = 'blackhole'`: rows dropped, as fast as they come or at
/// most `rows-per-second` per subtask (a slow external system in load
/// tests and back-pressure drills).
pub(super) struct Blackhole;

impl ConnectorFactory for Blackhole {
    fn identifier(&self) -> &str {
        "blackhole"
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "rows dropped (for benchmarks), optionally at a limited rate"
    }

    /// As Flink's: a table partitioned for another sink runs into it.
    fn supports_partitions(&self) -> bool {
        true
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![ConnectorOption::optional(
            "rows-per-second",
            OptionKind::Integer,
            None,
            "rows each subtask takes per second (unlimited without it)",
        )]
    }

    fn plan_sink(&self, t: &TableDescriptor) -> Option<Result<SinkSpec>> {
        Some((|| {
            Ok(match t.number::<u64>("rows-per-second")? {
                Some(0) => return Err(t.error("rows-per-second must be positive")),
                Some(rate) => throttled(rate),
                None => blackhole(),
            })
        })())
    }

    fn accepts_changelog(&self, _: &TableDescriptor) -> Result<bool> {
        Ok(true)
    }

    /// Rows are dropped, `-U` ones too: as Flink's blackhole, it asks for
    /// none.
    fn sink_uses_update_before(&self, _: &TableDescriptor) -> Result<bool> {
        Ok(false)
    }

    fn open_sink(
        &self,
        sink: &SinkSpec,
        node: &StreamNode,
        _: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        Some((|| {
            let rate = match sink.options.get("rows-per-second") {
                Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                    WeirError::plan(format!("blackhole: rows-per-second '{v}' is not a number"))
                })?),
                None => None,
            };
            blackhole_sink(node.name.clone(), rate)
        })())
    }
}

/// `memory`: the rows a program hands to its job (Flink's `fromData`),
/// carried inline by the job graph.
pub(super) struct Memory;

impl ConnectorFactory for Memory {
    fn identifier(&self) -> &str {
        "memory"
    }

    fn is_source(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "rows the program carries with the job"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![]
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        Some(Ok(memory_source(source, ctx)))
    }
}

/// `collect`: rows kept in this process for the program (Flink's
/// `executeAndCollect`), through a [`CollectHandle`].
pub(super) struct Collect;

impl ConnectorFactory for Collect {
    fn identifier(&self) -> &str {
        "collect"
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "rows kept in the program's memory"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![]
    }

    fn accepts_changelog(&self, _: &TableDescriptor) -> Result<bool> {
        Ok(true)
    }

    fn open_sink(
        &self,
        sink: &SinkSpec,
        node: &StreamNode,
        _: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        Some(match sink.local_as::<CollectHandle>() {
            Some(handle) => Ok(collect_sink(node.name.clone(), handle.clone())),
            None => Err(WeirError::plan(format!(
                "sink '{}': a collect sink runs only in the program that holds its handle",
                node.name
            ))),
        })
    }
}

/// Rows printed to standard output.
pub fn print() -> SinkSpec {
    SinkSpec::new("print", serde_json::Value::Null)
}

/// Rows dropped.
pub fn blackhole() -> SinkSpec {
    SinkSpec::new("blackhole", serde_json::Value::Null)
}

/// Rows dropped, at most `rows_per_second` per sink subtask.
pub fn throttled(rows_per_second: u64) -> SinkSpec {
    let mut s = SinkSpec::new("blackhole", serde_json::Value::Null)
        .with_display(format!("throttled({rows_per_second} rows/s)"));
    s.options
        .insert("rows-per-second".into(), rows_per_second.to_string());
    s
}

/// Rows kept in `handle`.
pub fn collect(handle: &CollectHandle) -> SinkSpec {
    SinkSpec::from(handle.clone())
}
