//! Flink SQL functions whose names or behaviour DataFusion's library lacks.
//! They live here, not in the SQL crate, so expressions using them travel
//! in shipped job graphs like DataFusion's built-ins.

use std::sync::Arc;

use datafusion_expr::ScalarUDF;

/// Flink's functions, each a DataFusion scalar UDF.
pub fn flink_functions() -> Vec<Arc<ScalarUDF>> {
    vec![]
}
