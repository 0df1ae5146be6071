//! OVER aggregations of a keyed stream.

use std::sync::Arc;

use super::{DataStream, KeyedStream};
use crate::error::Result;
use crate::graph::TransformationKind;
use crate::spec::{AggregateSpec, OperatorSpec, OverAggregateSpec, OverFrame};

impl KeyedStream {
    /// Each row once, with `aggregates` over its frame among the rows of its
    /// key (SQL's `agg(…) OVER (PARTITION BY keys ORDER BY time frame)`),
    /// after the row's own columns. Ordered by the stream's event time
    /// (`event_time`), rows are emitted when the watermark passes them, in
    /// time order per key, and rows behind the watermark are dropped and
    /// counted; otherwise they are worked in arrival order (processing
    /// time). The output keeps the event time.
    pub fn over(
        &self,
        event_time: bool,
        frame: OverFrame,
        aggregates: Vec<AggregateSpec>,
    ) -> Result<DataStream> {
        let input = &self.stream;
        let rowtime = if event_time {
            Some(input.rowtime.clone().ok_or_else(|| {
                input.in_context(crate::error::WeirError::plan(
                    "an OVER aggregation in event time needs an input with event time; give its source a WatermarkStrategy",
                ))
            })?)
        } else {
            None
        };
        let spec = OverAggregateSpec {
            keys: self.keys.clone(),
            rowtime,
            frame,
            aggregates,
            input_schema: Arc::clone(&input.schema),
        };
        spec.validate().map_err(|e| input.in_context(e))?;
        let schema = spec.output_schema()?;
        let name = format!("{:?}", OperatorSpec::OverAggregate(spec.clone()));
        Ok(input.derive(
            name,
            TransformationKind::Operator(OperatorSpec::OverAggregate(spec)),
            schema,
            input.rowtime.clone(),
        ))
    }
}
