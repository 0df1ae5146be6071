//! The connectors of this program: the built-in ones, `flight`, `kafka`, and any a
//! program registers before it plans or runs jobs — one registry for the
//! whole process, as Flink finds its factories on the classpath, so a
//! cluster runs every connector registered in its binary.

use std::sync::{Arc, LazyLock, RwLock};

use weir_core::Result;
use weir_core::connector::{ConnectorPlanner, ConnectorSource, SinkSpec, TableDescriptor};
use weir_core::spec::SourceSpec;
use weir_operators::connectors::{ConnectorFactory, Connectors};

static REGISTRY: LazyLock<RwLock<Connectors>> = LazyLock::new(|| {
    let mut c = Connectors::default();
    c.register(Arc::new(weir_flight::connector::Flight));
    #[cfg(feature = "kafka")]
    weir_kafka::register(&mut c);
    RwLock::new(c)
});

/// The connectors of this process, as they are now.
pub fn connectors() -> Connectors {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Add (or replace) a connector for every job this process plans or runs
/// afterwards (SQL tables, `from_connector`, job graphs it receives).
pub fn register_connector(factory: Arc<dyn ConnectorFactory>) {
    REGISTRY
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .register(factory);
}

/// Plans with the process's connectors as they are when asked (an
/// environment made before a registration still sees it).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessConnectors;

impl ConnectorPlanner for ProcessConnectors {
    fn plan_source(&self, table: &TableDescriptor) -> Result<SourceSpec> {
        connectors().plan_source(table)
    }

    fn plan_sink(&self, table: &TableDescriptor) -> Result<SinkSpec> {
        connectors().plan_sink(table)
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        connectors().check_source(source)
    }

    fn check_sink(&self, sink: &SinkSpec) -> Result<()> {
        connectors().check_sink(sink)
    }
}
