//! The functions SQL can call: DataFusion's library, the Flink functions
//! whose names or behaviour differ (from `weir_core::functions`, so jobs
//! using them can still be shipped to a cluster), and UDFs registered from
//! Rust. Names compare case-insensitively.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_expr::{AggregateUDF, ScalarUDF, WindowUDF};

/// Scalar, aggregate and window functions by lowercase name.
#[derive(Debug, Clone)]
pub struct Functions {
    scalars: BTreeMap<String, Arc<ScalarUDF>>,
    aggregates: BTreeMap<String, Arc<AggregateUDF>>,
    windows: BTreeMap<String, Arc<WindowUDF>>,
}

impl Default for Functions {
    fn default() -> Self {
        let mut f = Self {
            scalars: BTreeMap::new(),
            aggregates: BTreeMap::new(),
            windows: BTreeMap::new(),
        };
        for s in datafusion_functions::all_default_functions() {
            f.register_scalar(s);
        }
        // Flink's functions override DataFusion's of the same name.
        for s in weir_core::functions::flink_functions() {
            f.register_scalar(s);
        }
        for a in datafusion_functions_aggregate::all_default_aggregate_functions() {
            f.register_aggregate(a);
        }
        f
    }
}

impl Functions {
    /// Register (or replace) a scalar UDF under its name and aliases.
    pub fn register_scalar(&mut self, f: Arc<ScalarUDF>) {
        for alias in f.aliases() {
            self.scalars
                .insert(alias.to_ascii_lowercase(), Arc::clone(&f));
        }
        self.scalars.insert(f.name().to_ascii_lowercase(), f);
    }

    /// Register (or replace) an aggregate UDF.
    pub fn register_aggregate(&mut self, f: Arc<AggregateUDF>) {
        for alias in f.aliases() {
            self.aggregates
                .insert(alias.to_ascii_lowercase(), Arc::clone(&f));
        }
        self.aggregates.insert(f.name().to_ascii_lowercase(), f);
    }

    /// Register (or replace) a window function.
    pub fn register_window(&mut self, f: Arc<WindowUDF>) {
        self.windows.insert(f.name().to_ascii_lowercase(), f);
    }

    pub(crate) fn scalar(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.scalars.get(&name.to_ascii_lowercase()).cloned()
    }
    pub(crate) fn aggregate(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.aggregates.get(&name.to_ascii_lowercase()).cloned()
    }
    pub(crate) fn window(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.windows.get(&name.to_ascii_lowercase()).cloned()
    }
    pub(crate) fn scalar_names(&self) -> Vec<String> {
        self.scalars.keys().cloned().collect()
    }
    pub(crate) fn aggregate_names(&self) -> Vec<String> {
        self.aggregates.keys().cloned().collect()
    }
    pub(crate) fn window_names(&self) -> Vec<String> {
        self.windows.keys().cloned().collect()
    }
}
