//! Lowering OVER aggregations: `agg(…) OVER (PARTITION BY … ORDER BY time
//! ROWS|RANGE BETWEEN … PRECEDING AND CURRENT ROW)`.

use datafusion_expr::{WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition};
use weir_core::api::DataStream;
use weir_core::spec::OverFrame;
use weir_core::{Result, WeirError};

use super::*;

impl Lowering<'_> {
    /// An OVER aggregation as Flink runs it: every aggregate of the node
    /// over the same window, ordered by the input's time attribute
    /// ascending, its frame ending at the current row.
    pub(super) fn over(&mut self, w: &datafusion_expr::logical_plan::Window) -> Result<DataStream> {
        let input = self.lower(&w.input)?;
        if is_changelog(&input) {
            return Err(unsupported(
                "an OVER aggregation over an updating input (Flink rejects it too: its OVER window cannot consume retractions)",
            ));
        }
        let in_schema = w.input.schema();
        let nin = in_schema.fields().len();
        let mut window: Option<(
            Vec<Expr>,
            Vec<datafusion_expr::SortExpr>,
            datafusion_expr::WindowFrame,
        )> = None;
        let mut pre: Vec<(Expr, String)> = vec![];
        let mut specs = vec![];
        for (j, e) in w.window_expr.iter().enumerate() {
            let Expr::WindowFunction(f) = e.clone().unalias() else {
                return Err(unsupported(format!("window expression `{e}`")));
            };
            let WindowFunctionDefinition::AggregateUDF(udaf) = &f.fun else {
                return Err(unsupported(format!(
                    "window function `{e}` (OVER takes aggregates; ROW_NUMBER() only for Top-N and deduplication)"
                )));
            };
            let p = &f.params;
            let this = (
                p.partition_by.clone(),
                p.order_by.clone(),
                p.window_frame.clone(),
            );
            match &window {
                None => window = Some(this),
                Some(first) if *first == this => {}
                Some(_) => {
                    return Err(unsupported(
                        "OVER aggregates over different windows in one SELECT (Flink requires them all equal)",
                    ));
                }
            }
            if p.filter.is_some() || p.args.len() > 1 {
                return Err(unsupported(format!(
                    "OVER aggregate `{e}` with FILTER or several arguments"
                )));
            }
            let name = udaf.name().to_ascii_lowercase();
            let function = aggregate_function(udaf, p.distinct, e)?;
            let arg = p.args.first().cloned();
            #[allow(deprecated)]
            let count_star = name == "count"
                && matches!(
                    arg,
                    None | Some(Expr::Literal(_, _)) | Some(Expr::Wildcard { .. })
                );
            let column = match arg {
                Some(x) if !count_star => {
                    let n = format!("__over_arg{j}");
                    pre.push((x, n.clone()));
                    Some(n)
                }
                _ => None,
            };
            specs.push(AggregateSpec {
                function,
                column,
                alias: w.schema.field(nin + j).name().clone(),
                filter: None,
            });
        }
        let Some((partition_by, order_by, frame)) = window else {
            return Err(WeirError::plan("an OVER node without window expressions"));
        };
        // ORDER BY the time attribute, ascending.
        let proctime = self.proctime.get(&input.id()).cloned().unwrap_or_default();
        let order = match order_by.as_slice() {
            [s] if s.asc => match &s.expr {
                Expr::Column(c) => in_schema
                    .index_of_column(c)
                    .ok()
                    .map(|i| in_schema.field(i).name().clone()),
                _ => None,
            },
            _ => None,
        };
        let event_time = match order {
            Some(n) if input.rowtime() == Some(n.as_str()) => true,
            Some(n) if proctime.contains(&n) => false,
            _ => {
                return Err(unsupported(format!(
                    "OVER windows ordered by anything but a time attribute ascending (ORDER BY {}); order by the WATERMARK'd column or a PROCTIME() column",
                    order_by
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        };
        let frame = over_frame(&frame)?;
        // Partition keys (computed on the input when not plain columns); no
        // PARTITION BY is one partition.
        let mut keys = vec![];
        for (i, k) in partition_by.iter().enumerate() {
            let n = format!("__over_k{i}");
            pre.push((k.clone(), n.clone()));
            keys.push(n);
        }
        if keys.is_empty() {
            pre.push((lit(0i8), "__over_all".into()));
            keys.push("__over_all".into());
        }
        let widened = widen(input, in_schema, &pre, "Calc(over arguments)")?;
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        let over = widened.key_by(&k)?.over(event_time, frame, specs)?;
        // The plan's columns: the input's, then the aggregates (as the plan
        // types them).
        let width = widened.schema().fields().len();
        let mut exprs = vec![];
        for (i, f) in w.schema.fields().iter().enumerate() {
            let at = if i < nin { i } else { width + (i - nin) };
            let mut e: Arc<dyn PhysicalExpr> = column(over.schema().field(at).name(), at);
            if over.schema().field(at).data_type() != f.data_type() {
                e = Arc::new(datafusion_physical_expr::expressions::CastExpr::new(
                    e,
                    f.data_type().clone(),
                    None,
                ));
            }
            exprs.push((e, f.name().clone()));
        }
        over.project_physical(exprs, "Calc(over output)")
    }
}

/// Flink's OVER frames: from some rows or some time before, or the whole
/// partition so far, to the current row.
fn over_frame(f: &datafusion_expr::WindowFrame) -> Result<OverFrame> {
    if f.end_bound != WindowFrameBound::CurrentRow {
        return Err(unsupported(format!(
            "an OVER frame ending at {} (Flink's end at CURRENT ROW)",
            f.end_bound
        )));
    }
    let unbounded = matches!(&f.start_bound, WindowFrameBound::Preceding(v) if v.is_null());
    match (&f.units, &f.start_bound) {
        (WindowFrameUnits::Rows, _) if unbounded => Ok(OverFrame::Rows(None)),
        (WindowFrameUnits::Range, _) if unbounded => Ok(OverFrame::Range(None)),
        (WindowFrameUnits::Rows, WindowFrameBound::Preceding(v)) => {
            let n = match v {
                ScalarValue::UInt64(Some(n)) => *n,
                ScalarValue::Int64(Some(n)) if *n >= 0 => *n as u64,
                other => {
                    return Err(WeirError::plan(format!(
                        "OVER ROWS frame: {other} PRECEDING is not a row count"
                    )));
                }
            };
            Ok(OverFrame::Rows(Some(n)))
        }
        (WindowFrameUnits::Range, WindowFrameBound::Preceding(v)) => {
            let ms = interval_literal(&lit(v.clone())).ok_or_else(|| {
                WeirError::plan(format!(
                    "OVER RANGE frame: {v} PRECEDING is not an interval (RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW)"
                ))
            })?;
            Ok(OverFrame::Range(Some(ms)))
        }
        (WindowFrameUnits::Rows | WindowFrameUnits::Range, WindowFrameBound::CurrentRow) => {
            Ok(if f.units == WindowFrameUnits::Rows {
                OverFrame::Rows(Some(0))
            } else {
                OverFrame::Range(Some(0))
            })
        }
        _ => Err(unsupported(format!("the OVER frame {f}"))),
    }
}
