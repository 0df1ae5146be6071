//! Batch mode's `ORDER BY`, `LIMIT` and `OFFSET`: a global sort in one
//! subtask ([`DataStream::sort`]). What follows it in the plan (a
//! projection, a filter) and the sink run in that one subtask too, so the
//! rows reach the sink in order, as Flink's batch planner keeps a sorted
//! result's sink at parallelism 1.

use datafusion_expr::logical_plan::{FetchType, SkipType};
use datafusion_expr::{Expr, LogicalPlan, SortExpr};
use weir_core::Result;
use weir_core::api::DataStream;
use weir_core::config::RuntimeMode;

use super::{Lowering, column, is_changelog, physical, unsupported};

impl Lowering<'_> {
    /// A `Sort` (with any fetch DataFusion pushed into it) or a `Limit`
    /// (over a sort or not).
    pub(super) fn order(&mut self, plan: &LogicalPlan) -> Result<DataStream> {
        let (input_plan, sort, skip, fetch) = match plan {
            LogicalPlan::Sort(s) => (s.input.as_ref(), s.expr.as_slice(), 0, s.fetch),
            LogicalPlan::Limit(l) => {
                let skip = match l.get_skip_type()? {
                    SkipType::Literal(n) => n,
                    SkipType::UnsupportedExpr => {
                        return Err(unsupported("an OFFSET that is not a constant"));
                    }
                };
                let fetch = match l.get_fetch_type()? {
                    FetchType::Literal(n) => n,
                    FetchType::UnsupportedExpr => {
                        return Err(unsupported("a LIMIT that is not a constant"));
                    }
                };
                match l.input.as_ref() {
                    // DataFusion also gives the sort the rows the limit
                    // needs (offset + fetch): one operator does both.
                    LogicalPlan::Sort(s) => {
                        let end = match (fetch.map(|f| f.saturating_add(skip)), s.fetch) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        (
                            s.input.as_ref(),
                            s.expr.as_slice(),
                            skip,
                            end.map(|e| e.saturating_sub(skip)),
                        )
                    }
                    other => (other, &[][..], skip, fetch),
                }
            }
            other => return Err(unsupported(format!("{} as an ordering", other.display()))),
        };
        if self.env.config().runtime_mode != RuntimeMode::Batch {
            return Err(unsupported(if sort.is_empty() {
                "LIMIT on a stream (it never ends; use batch mode)"
            } else {
                "ORDER BY on a stream (order by time ascending is implied; keep the first rows per key with ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) <= N, or use batch mode)"
            }));
        }
        let input = self.lower(input_plan)?;
        if is_changelog(&input) {
            return Err(unsupported("ORDER BY or LIMIT over an updating result"));
        }
        let (order, extra) = self.sort_columns(sort, input_plan, &input)?;
        let out = if extra.is_empty() {
            input.sort(order, skip, fetch)?
        } else {
            // Sort by expressions: compute them as columns, sort, drop them.
            let schema = std::sync::Arc::clone(input.schema());
            let mut exprs: Vec<_> = schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| (column(f.name(), i), f.name().clone()))
                .collect();
            exprs.extend(extra);
            let keep = exprs[..schema.fields().len()].to_vec();
            let sorted = input
                .project_physical(exprs, "Calc(sort keys)")?
                .sort(order, skip, fetch)?;
            sorted
                .project_physical(keep, "Calc(sorted rows)")?
                .set_parallelism(1)?
        };
        self.ordered.insert(out.id());
        Ok(out)
    }

    /// Each sort expression as a column of `input` (name, descending,
    /// nulls first), with the expressions that are not columns to compute.
    #[allow(clippy::type_complexity)]
    fn sort_columns(
        &self,
        sort: &[SortExpr],
        input_plan: &LogicalPlan,
        input: &DataStream,
    ) -> Result<(
        Vec<(String, bool, bool)>,
        Vec<(
            std::sync::Arc<dyn datafusion_physical_expr::PhysicalExpr>,
            String,
        )>,
    )> {
        let in_schema = input_plan.schema();
        let mut order = vec![];
        let mut extra = vec![];
        for (i, s) in sort.iter().enumerate() {
            let at = match &s.expr {
                Expr::Column(c) => in_schema.index_of_column(c).ok(),
                _ => None,
            };
            let name = match at {
                Some(at) => input.schema().field(at).name().clone(),
                None => {
                    let name = format!("__order{i}");
                    extra.push((physical(&s.expr, in_schema)?, name.clone()));
                    name
                }
            };
            order.push((name, !s.asc, s.nulls_first));
        }
        Ok((order, extra))
    }

    /// Whether `stream`'s rows come in an order its sink must keep (a sort
    /// or what follows one): the sink then runs in one subtask.
    pub(crate) fn is_ordered(&self, stream: &DataStream) -> bool {
        self.ordered.contains(&stream.id())
    }

    /// What a projection or filter made of an ordered stream stays in its
    /// one subtask, and ordered.
    pub(super) fn keep_order(&mut self, out: DataStream) -> Result<DataStream> {
        if self.ordered.is_empty() || self.ordered.contains(&out.id()) {
            return Ok(out);
        }
        let inputs = &self.env.transformations()[out.id()].inputs;
        if inputs.is_empty() || !inputs.iter().all(|i| self.ordered.contains(i)) {
            return Ok(out);
        }
        let out = out.set_parallelism(1)?;
        self.ordered.insert(out.id());
        Ok(out)
    }
}
