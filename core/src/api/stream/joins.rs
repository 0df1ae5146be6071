//! Joins of two keyed streams: window joins, interval joins and regular
//! joins.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use datafusion_physical_expr::PhysicalExpr;

use super::{DataStream, KeyedStream};
use crate::error::{Result, WeirError};
use crate::graph::TransformationKind;
use crate::spec::{
    IntervalJoinSpec, JoinKind, OperatorSpec, RegularJoinSpec, TemporalJoinSpec, WindowJoinSpec,
};
use crate::time::{WindowAssigner, check_timestamp_column};

impl KeyedStream {
    /// A regular join with `other` on equal keys (SQL's `JOIN … ON`
    /// without a time bound), of `kind`: every row of one input pairs with
    /// every row of the other with equal, non-NULL keys for which
    /// `residual` (over [`RegularJoinSpec::pair_schema`]) holds. Either
    /// input may be a changelog; `-U`/`-D` rows retract their pairs. The
    /// output is a changelog (ending with the row kind) unless `kind` is
    /// inner and both inputs are append-only, or in batch mode, where the
    /// join emits its result once both inputs have ended; it has no event
    /// time (as in Flink, a regular join's output is not ordered by time). Rows are
    /// kept `state_ttl_ms` of processing time after they were last written
    /// (forever when `None`).
    pub fn regular_join(
        &self,
        other: &KeyedStream,
        kind: JoinKind,
        residual: Option<Arc<dyn PhysicalExpr>>,
        state_ttl_ms: Option<i64>,
    ) -> Result<DataStream> {
        let (l, r) = (&self.stream, &other.stream);
        let spec = RegularJoinSpec {
            kind,
            left_keys: self.keys.clone(),
            right_keys: other.keys.clone(),
            left_schema: Arc::clone(&l.schema),
            right_schema: Arc::clone(&r.schema),
            residual,
            state_ttl_ms,
            bounded: l.env.config().runtime_mode == crate::config::RuntimeMode::Batch,
        };
        spec.validate().map_err(|e| l.in_context(e))?;
        if let Some(c) = &spec.residual {
            let t = c.data_type(&spec.pair_schema())?;
            if t != arrow::datatypes::DataType::Boolean {
                return Err(l.in_context(WeirError::plan(format!(
                    "join condition {c} is {t}, not BOOLEAN"
                ))));
            }
        }
        let name = format!("{:?}", OperatorSpec::RegularJoin(spec.clone()));
        let schema = spec.output_schema();
        let id = l.env.add(
            name,
            TransformationKind::Operator(OperatorSpec::RegularJoin(spec)),
            vec![l.id, r.id],
            Arc::clone(&schema),
        );
        Ok(DataStream::new(l.env.clone(), id, schema, None))
    }

    /// An event-time temporal join with `versions`, a versioned table
    /// keyed by its primary key (SQL's `JOIN v FOR SYSTEM_TIME AS OF
    /// l.rowtime`): each row of this stream joins the row `versions` held
    /// for its key at the row's event time — its latest row with an event
    /// time not after it — once the watermark has passed that time; `kind`
    /// `Left` keeps rows without one (right columns NULL). `versions` is
    /// append-only (each row is its key's next version) or an upsert
    /// changelog (`-D` ends the key; `-U` rows are ignored). `residual`,
    /// over the output's columns, must hold for a pair to match. The output
    /// is append-only and keeps this stream's event time; both inputs need
    /// one.
    pub fn temporal_join(
        &self,
        versions: &KeyedStream,
        kind: JoinKind,
        residual: Option<Arc<dyn PhysicalExpr>>,
    ) -> Result<DataStream> {
        let (l, r) = (&self.stream, &versions.stream);
        let time = |s: &DataStream, side: &str| {
            s.rowtime.clone().ok_or_else(|| {
                s.in_context(WeirError::plan(format!(
                    "the {side} input of a temporal join needs event time (a watermark)"
                )))
            })
        };
        let spec = TemporalJoinSpec {
            kind,
            left_keys: self.keys.clone(),
            right_keys: versions.keys.clone(),
            left_rowtime: time(l, "left")?,
            right_rowtime: time(r, "versioned (right)")?,
            left_schema: Arc::clone(&l.schema),
            right_schema: Arc::clone(&r.schema),
            residual,
        };
        spec.validate().map_err(|e| l.in_context(e))?;
        let schema = spec.output_schema();
        if let Some(c) = &spec.residual {
            let t = c.data_type(&schema)?;
            if t != arrow::datatypes::DataType::Boolean {
                return Err(l.in_context(WeirError::plan(format!(
                    "join condition {c} is {t}, not BOOLEAN"
                ))));
            }
        }
        let rowtime = spec.left_rowtime.clone();
        let name = format!("{:?}", OperatorSpec::TemporalJoin(spec.clone()));
        let id = l.env.add(
            name,
            TransformationKind::Operator(OperatorSpec::TemporalJoin(spec)),
            vec![l.id, r.id],
            Arc::clone(&schema),
        );
        Ok(DataStream::new(l.env.clone(), id, schema, Some(rowtime)))
    }

    /// Join with `other` on equal keys within the same window (tumbling,
    /// sliding, cumulating, or sessions formed over the rows of both inputs). Output: `window_start`, `window_end`, the left
    /// columns, then the right columns (`right_` prefix on taken names).
    pub fn window_join(&self, other: &KeyedStream, assigner: WindowAssigner) -> Result<DataStream> {
        let (l, r) = (&self.stream, &other.stream);
        assigner.validate()?;
        if matches!(assigner, WindowAssigner::Count { .. }) {
            return Err(l.in_context(WeirError::plan(
                "window join needs time windows (tumbling, sliding, cumulating or session)",
            )));
        }
        let sides = JoinSides::check(self, other, "window join")?;
        let ts_type =
            arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None);
        let mut fields = vec![
            Field::new("window_start", ts_type.clone(), false),
            Field::new("window_end", ts_type, false),
        ];
        for f in sides.fields {
            let taken = fields.iter().any(|x| x.name() == f.name());
            let name = if taken {
                format!("joined_{}", f.name())
            } else {
                f.name().clone()
            };
            fields.push(f.with_name(name));
        }
        let spec = WindowJoinSpec {
            left_keys: self.keys.clone(),
            right_keys: other.keys.clone(),
            left_rowtime: sides.left_rowtime,
            right_rowtime: sides.right_rowtime,
            assigner,
            left_schema: Arc::clone(&l.schema),
            right_schema: Arc::clone(&r.schema),
        };
        let name = format!("{:?}", OperatorSpec::WindowJoin(spec.clone()));
        let schema = Arc::new(Schema::new(fields));
        let id = l.env.add(
            name,
            TransformationKind::Operator(OperatorSpec::WindowJoin(spec)),
            vec![l.id, r.id],
            Arc::clone(&schema),
        );
        Ok(DataStream::new(l.env.clone(), id, schema, None))
    }

    /// Join with `other` on equal keys within a time interval; finish with
    /// [`IntervalJoinBuilder::between`].
    pub fn interval_join(&self, other: &KeyedStream) -> IntervalJoinBuilder {
        IntervalJoinBuilder {
            left: self.clone(),
            right: other.clone(),
            kind: JoinKind::Inner,
        }
    }
}

/// An interval join waiting for its bounds.
pub struct IntervalJoinBuilder {
    left: KeyedStream,
    right: KeyedStream,
    kind: JoinKind,
}

impl IntervalJoinBuilder {
    /// Keep the rows of outer sides that find no partner (`LEFT`, `RIGHT`,
    /// `FULL`): each is emitted with NULLs for the other side once the
    /// watermark passes its last possible match. The other side's columns
    /// become nullable; the output's event time is the left row's for inner
    /// and left joins, the right row's for right joins, none for full joins.
    pub fn kind(mut self, kind: JoinKind) -> Self {
        self.kind = kind;
        self
    }

    /// Join left row `l` with right row `r` of the same key when
    /// `l.ts + lower_ms <= r.ts <= l.ts + upper_ms` (Flink's `between`,
    /// bounds inclusive). Output: the left columns, then the right columns
    /// (a right column whose name is taken gets the prefix `right_`); its
    /// event time is the left row's. Rows later than the watermark on
    /// arrival (`ts < watermark`) are dropped and counted, as in Flink's
    /// interval join.
    pub fn between(&self, lower_ms: i64, upper_ms: i64) -> Result<DataStream> {
        let (l, r) = (&self.left.stream, &self.right.stream);
        if lower_ms > upper_ms {
            return Err(l.in_context(WeirError::plan(format!(
                "interval join lower bound {lower_ms} ms is above the upper bound {upper_ms} ms"
            ))));
        }
        let sides = JoinSides::check(&self.left, &self.right, "interval join")?;
        let spec = IntervalJoinSpec {
            left_keys: self.left.keys.clone(),
            right_keys: self.right.keys.clone(),
            left_rowtime: sides.left_rowtime.clone(),
            right_rowtime: sides.right_rowtime.clone(),
            lower: lower_ms,
            upper: upper_ms,
            left_schema: Arc::clone(&l.schema),
            right_schema: Arc::clone(&r.schema),
            kind: self.kind,
        };
        let name = format!("{:?}", OperatorSpec::IntervalJoin(spec.clone()));
        let nl = l.schema.fields().len();
        let fields: Vec<Field> = sides
            .fields
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                let side = usize::from(i >= nl);
                if self.kind.outer(1 - side) {
                    f.with_nullable(true)
                } else {
                    f
                }
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let id = l.env.add(
            name,
            TransformationKind::Operator(OperatorSpec::IntervalJoin(spec)),
            vec![l.id, r.id],
            Arc::clone(&schema),
        );
        // The left row's time stays the event time (the operator holds the
        // watermark back by the upper bound, so no output row is late).
        // The event time of the side that is always there: the left row's
        // (inner, left), the right row's (right), none for a full join.
        let rowtime = match self.kind {
            JoinKind::Inner | JoinKind::Left => Some(sides.left_rowtime),
            JoinKind::Right => Some(
                schema
                    .field(nl + r.schema.index_of(&sides.right_rowtime)?)
                    .name()
                    .clone(),
            ),
            JoinKind::Full => None,
        };
        Ok(DataStream::new(l.env.clone(), id, schema, rowtime))
    }
}

/// What both joins check of their inputs, and their output fields.
struct JoinSides {
    left_rowtime: String,
    right_rowtime: String,
    fields: Vec<Field>,
}

impl JoinSides {
    fn check(left: &KeyedStream, right: &KeyedStream, what: &str) -> Result<Self> {
        let (l, r) = (&left.stream, &right.stream);
        let context = |e: WeirError| l.in_context(e);
        let rowtime = |s: &DataStream, side: &str| -> Result<String> {
            let rt = s.rowtime.clone().ok_or_else(|| {
                WeirError::plan(format!(
                    "{what}: the {side} input has no event time; give its source a WatermarkStrategy"
                ))
            })?;
            check_timestamp_column(&s.schema, &rt)?;
            Ok(rt)
        };
        let (left_rowtime, right_rowtime) = (rowtime(l, "left")?, rowtime(r, "right")?);
        if left.keys.len() != right.keys.len() {
            return Err(context(WeirError::plan(format!(
                "{what} keys differ in number: [{}] vs [{}]",
                left.keys.join(", "),
                right.keys.join(", ")
            ))));
        }
        for (lk, rk) in left.keys.iter().zip(&right.keys) {
            let (lt, rt) = (
                l.schema.field_with_name(lk)?.data_type(),
                r.schema.field_with_name(rk)?.data_type(),
            );
            if lt != rt {
                return Err(context(WeirError::plan(format!(
                    "{what} key '{lk}' ({lt}) and '{rk}' ({rt}) have different types"
                ))));
            }
        }
        let mut fields: Vec<Field> = l
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for f in r.schema.fields() {
            let taken = fields.iter().any(|x| x.name() == f.name());
            let name = if taken {
                format!("right_{}", f.name())
            } else {
                f.name().clone()
            };
            fields.push(f.as_ref().clone().with_name(name));
        }
        Ok(Self {
            left_rowtime,
            right_rowtime,
            fields,
        })
    }
}
