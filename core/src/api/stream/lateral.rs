//! Lateral joins with table functions.

use std::sync::Arc;

use super::DataStream;
use crate::error::Result;
use crate::graph::TransformationKind;
use crate::spec::OperatorSpec;
use crate::table_function::{LateralSpec, TableFunction};

impl DataStream {
    /// Each row with each row `function` makes of its `args` columns (SQL's
    /// `CROSS JOIN UNNEST(…)` or `LATERAL TABLE(f(…))`, Flink's
    /// `joinLateral`): the row's columns, then the function's, named
    /// `names`. With `outer` (`LEFT JOIN LATERAL … ON TRUE`) a row the
    /// function makes nothing of is kept once with NULLs. A changelog's
    /// rows keep their kind; the output keeps the event time.
    pub fn join_lateral(
        &self,
        function: Arc<dyn TableFunction>,
        args: &[&str],
        names: &[&str],
        outer: bool,
    ) -> Result<DataStream> {
        let spec = LateralSpec {
            input_schema: Arc::clone(&self.schema),
            args: args.iter().map(|a| a.to_string()).collect(),
            function,
            names: names.iter().map(|n| n.to_string()).collect(),
            outer,
        };
        let schema = spec.output_schema().map_err(|e| self.in_context(e))?;
        let name = format!("{spec:?}");
        Ok(self.derive(
            name,
            TransformationKind::Operator(OperatorSpec::Lateral(spec)),
            schema,
            self.rowtime.clone(),
        ))
    }
}
