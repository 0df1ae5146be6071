//! The functions SQL can call: DataFusion's library, the Flink functions
//! whose names or behaviour differ (from `weir_core::functions`, so jobs
//! using them can still be shipped to a cluster), and UDFs registered from
//! Rust. Names compare case-insensitively.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion_expr::{AggregateUDF, ScalarUDF, WindowUDF};

/// Scalar, aggregate and window functions by lowercase name.
#[derive(Debug, Clone)]
pub struct Functions {
    scalars: BTreeMap<String, Arc<ScalarUDF>>,
    aggregates: BTreeMap<String, Arc<AggregateUDF>>,
    windows: BTreeMap<String, Arc<WindowUDF>>,
    tables: BTreeMap<String, Arc<dyn weir_core::table_function::TableFunction>>,
}

impl Default for Functions {
    fn default() -> Self {
        let mut f = Self {
            scalars: BTreeMap::new(),
            aggregates: BTreeMap::new(),
            windows: BTreeMap::new(),
            tables: BTreeMap::new(),
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
        f.register_aggregate(FlinkAvg::udaf());
        for w in datafusion_functions_window::all_default_window_functions() {
            f.register_window(w);
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

    /// Register (or replace) a table function, called in SQL as
    /// `LATERAL TABLE(name(…))`.
    pub fn register_table(&mut self, f: Arc<dyn weir_core::table_function::TableFunction>) {
        self.tables.insert(f.name().to_ascii_lowercase(), f);
    }

    pub(crate) fn table(
        &self,
        name: &str,
    ) -> Option<Arc<dyn weir_core::table_function::TableFunction>> {
        self.tables.get(&name.to_ascii_lowercase()).cloned()
    }

    pub(crate) fn table_names(&self) -> Vec<String> {
        self.tables.keys().cloned().collect()
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

/// Flink's `AVG`: of an integer column it is an integer of the same type
/// (the average truncated toward zero, `AVG(1, 2) = 1`); of other types it
/// is DataFusion's average.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct FlinkAvg {
    signature: datafusion_expr::Signature,
}

impl FlinkAvg {
    pub(crate) fn udaf() -> Arc<AggregateUDF> {
        Arc::new(AggregateUDF::new_from_impl(Self {
            signature: datafusion_expr::Signature::user_defined(
                datafusion_expr::Volatility::Immutable,
            ),
        }))
    }
}

fn inner_avg() -> Arc<AggregateUDF> {
    datafusion_functions_aggregate::average::avg_udaf()
}

impl datafusion_expr::AggregateUDFImpl for FlinkAvg {
    fn name(&self) -> &str {
        "avg"
    }

    fn signature(&self) -> &datafusion_expr::Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> datafusion_common::Result<Vec<DataType>> {
        match args {
            [t] if t.is_numeric() => Ok(args.to_vec()),
            [DataType::Null] => Ok(vec![DataType::Float64]),
            _ => datafusion_common::plan_err!(
                "AVG takes one number, not ({})",
                args.iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn return_type(&self, args: &[DataType]) -> datafusion_common::Result<DataType> {
        if args.len() == 1 && args[0].is_integer() {
            return Ok(args[0].clone());
        }
        inner_avg().inner().return_type(args)
    }

    fn accumulator(
        &self,
        args: datafusion_expr::function::AccumulatorArgs,
    ) -> datafusion_common::Result<Box<dyn datafusion_expr::Accumulator>> {
        let ret = args.return_field.data_type().clone();
        if !ret.is_integer() {
            return inner_avg().inner().accumulator(args);
        }
        let float = Arc::new(arrow::datatypes::Field::new(
            args.return_field.name(),
            DataType::Float64,
            true,
        ));
        let inner =
            inner_avg()
                .inner()
                .accumulator(datafusion_expr::function::AccumulatorArgs {
                    return_field: float,
                    ..args
                })?;
        Ok(Box::new(IntegerAvg { inner, ret }))
    }

    fn state_fields(
        &self,
        args: datafusion_expr::function::StateFieldsArgs,
    ) -> datafusion_common::Result<Vec<arrow::datatypes::FieldRef>> {
        let float = Arc::new(arrow::datatypes::Field::new(
            args.return_field.name(),
            DataType::Float64,
            true,
        ));
        inner_avg()
            .inner()
            .state_fields(datafusion_expr::function::StateFieldsArgs {
                return_field: float,
                ..args
            })
    }
}

/// DataFusion's average over the values as DOUBLE, truncated on the way out.
#[derive(Debug)]
struct IntegerAvg {
    inner: Box<dyn datafusion_expr::Accumulator>,
    ret: DataType,
}

impl datafusion_expr::Accumulator for IntegerAvg {
    fn update_batch(&mut self, values: &[arrow::array::ArrayRef]) -> datafusion_common::Result<()> {
        let v = arrow::compute::cast(&values[0], &DataType::Float64)?;
        self.inner.update_batch(&[v])
    }
    fn evaluate(&mut self) -> datafusion_common::Result<datafusion_common::ScalarValue> {
        self.inner.evaluate()?.cast_to(&self.ret)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn state(&mut self) -> datafusion_common::Result<Vec<datafusion_common::ScalarValue>> {
        self.inner.state()
    }
    fn merge_batch(&mut self, states: &[arrow::array::ArrayRef]) -> datafusion_common::Result<()> {
        self.inner.merge_batch(states)
    }
}
