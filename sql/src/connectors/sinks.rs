//! Sinks that keep nothing on disk: `print`, `blackhole`, `flight`.

use weir_core::Result;
use weir_core::spec::SinkSpec;

use super::{ConnectorFactory, ConnectorOption, OptionKind};
use crate::catalog::TableEntry;

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

    fn create_sink(&self, _: &TableEntry) -> Option<Result<SinkSpec>> {
        Some(Ok(SinkSpec::Print))
    }

    fn accepts_changelog(&self, _: &TableEntry) -> Result<bool> {
        Ok(true)
    }
}

/// `'connector' = 'blackhole'`: rows dropped.
pub(super) struct Blackhole;

impl ConnectorFactory for Blackhole {
    fn identifier(&self) -> &str {
        "blackhole"
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "rows dropped (for benchmarks)"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![]
    }

    fn create_sink(&self, _: &TableEntry) -> Option<Result<SinkSpec>> {
        Some(Ok(SinkSpec::Blackhole))
    }

    fn accepts_changelog(&self, _: &TableEntry) -> Result<bool> {
        Ok(true)
    }
}

/// `'connector' = 'flight'`: rows Flight clients read by name.
pub(super) struct Flight;

impl ConnectorFactory for Flight {
    fn identifier(&self) -> &str {
        "flight"
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "rows Arrow Flight clients list and read by name"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![ConnectorOption::optional(
            "name",
            OptionKind::Text,
            None,
            "what Flight clients list (default: the table's name)",
        )]
    }

    fn create_sink(&self, t: &TableEntry) -> Option<Result<SinkSpec>> {
        Some(Ok(SinkSpec::Flight {
            name: t
                .option("name")
                .map(str::to_string)
                .unwrap_or_else(|| t.definition.name.to_string()),
        }))
    }

    fn accepts_changelog(&self, _: &TableEntry) -> Result<bool> {
        Ok(true)
    }
}
