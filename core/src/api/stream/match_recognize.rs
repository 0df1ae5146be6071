//! Row pattern recognition over a keyed stream.

use std::sync::Arc;

use super::{DataStream, KeyedStream};
use crate::error::Result;
use crate::graph::TransformationKind;
use crate::match_spec::{AfterMatchSkip, MatchExpr, MatchPattern, MatchRecognizeSpec};
use crate::spec::OperatorSpec;

/// What a `MATCH_RECOGNIZE` looks for and what it reports; the partition
/// columns are the stream's keys.
#[derive(Debug, Clone)]
pub struct MatchRecognize {
    /// The pattern variables' names.
    pub variables: Vec<String>,
    /// The pattern.
    pub pattern: MatchPattern,
    /// Per variable, its condition (`None`: any row).
    pub defines: Vec<Option<MatchExpr>>,
    /// The measures and their names.
    pub measures: Vec<(MatchExpr, String)>,
    /// Where matching resumes after a match.
    pub skip: AfterMatchSkip,
    /// `WITHIN`, ms.
    pub within_ms: Option<i64>,
    /// The measure that is the output's event time (`MATCH_ROWTIME()`).
    pub rowtime_measure: Option<String>,
}

impl KeyedStream {
    /// Each match of `m.pattern` among the rows of a key, in time order,
    /// as one row: the key columns, then the measures. Ordered by the
    /// stream's event time (`event_time`), rows are matched when the
    /// watermark passes them and rows behind it are dropped and counted;
    /// otherwise in arrival order. The output's event time is
    /// `m.rowtime_measure`, if any.
    pub fn match_recognize(&self, event_time: bool, m: MatchRecognize) -> Result<DataStream> {
        let input = &self.stream;
        let rowtime = if event_time {
            Some(input.rowtime.clone().ok_or_else(|| {
                input.in_context(crate::error::WeirError::plan(
                    "MATCH_RECOGNIZE ordered by event time needs an input with event time; give its source a WatermarkStrategy",
                ))
            })?)
        } else {
            None
        };
        let spec = MatchRecognizeSpec {
            keys: self.keys.clone(),
            rowtime,
            variables: m.variables,
            pattern: m.pattern,
            defines: m.defines,
            measures: m.measures,
            skip: m.skip,
            within_ms: m.within_ms,
            input_schema: Arc::clone(&input.schema),
        };
        spec.validate().map_err(|e| input.in_context(e))?;
        let schema = spec.output_schema()?;
        let name = spec.to_string();
        Ok(input.derive(
            name,
            TransformationKind::Operator(OperatorSpec::MatchRecognize(spec)),
            schema,
            m.rowtime_measure,
        ))
    }
}
