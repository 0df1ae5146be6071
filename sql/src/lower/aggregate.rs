//! Lowering GROUP BY aggregations: over a window table function (a window
//! aggregate, or a group aggregate keyed by the window when the window is
//! not what it groups by), and without one (an updating group aggregate,
//! local and global when two-phase aggregation is on).

use super::*;

impl Lowering<'_> {
    pub(super) fn aggregate(&mut self, a: &Aggregate) -> Result<DataStream> {
        // Find the window table function under filters and aliases.
        let mut filters = vec![];
        let mut node = a.input.as_ref();
        let tvf = loop {
            match node {
                LogicalPlan::SubqueryAlias(s) => node = &s.input,
                LogicalPlan::Filter(f) => {
                    filters.push(f);
                    node = &f.input;
                }
                other => break as_window_tvf(other),
            }
        };
        match tvf {
            Some(tvf) => self.window_aggregate(a, tvf, &filters),
            None => self.group_aggregate(a),
        }
    }

    /// `GROUP BY` over window results that keeps their window bounds (as
    /// Flink's window properties): each window's rows are aggregated once
    /// the window is complete — a tumbling window of the input windows'
    /// slide over `window_end - 1`, keyed by the group keys (which include
    /// the bounds). Append-only, like the input.
    fn windowed_group_aggregate(
        &mut self,
        a: &Aggregate,
        stream: DataStream,
        w: WindowProps,
    ) -> Result<DataStream> {
        let in_schema = a.input.schema();
        let mut pre: Vec<(Expr, String)> = vec![];
        let keys = group_keys(a, &mut pre)?;
        let specs = aggregate_specs(a, &|_| false, &mut pre)?;
        let end_at = stream.schema().index_of(&w.end)?;
        let end = Expr::Column(Column::from(in_schema.qualified_field(end_at)));
        pre.push((window_time(end), "__wt".into()));
        let exprs = pre
            .iter()
            .map(|(e, n)| Ok((physical(e, in_schema)?, n.clone())))
            .collect::<Result<Vec<_>>>()?;
        let pre_stream = stream
            .project_physical(exprs, "Calc(window arguments)")?
            .with_rowtime(Some("__wt"))?;
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        let out = pre_stream
            .key_by(&k)?
            .window(WindowAssigner::Tumbling {
                size: w.slide,
                offset: w.offset.rem_euclid(w.slide),
            })
            .aggregate(specs)?;
        let out_df = DFSchema::try_from(out.schema().as_ref().clone())?;
        let c = |name: &str| Expr::Column(Column::new_unqualified(name));
        let mut post = vec![];
        let mut bounds = (None, None);
        for (i, field) in a.schema.fields().iter().enumerate() {
            let e = if i < keys.len() {
                if let Expr::Column(col) = &a.group_expr[i]
                    && let Ok(at) = in_schema.index_of_column(col)
                {
                    let n = stream.schema().field(at).name();
                    if n == &w.start {
                        bounds.0 = Some(field.name().clone());
                    } else if n == &w.end {
                        bounds.1 = Some(field.name().clone());
                    }
                }
                c(&format!("__k{i}"))
            } else {
                c(&format!("__a{}", i - keys.len()))
            };
            let e = conform(e, field.data_type(), &out_df)?;
            post.push((physical(&e, &out_df)?, field.name().clone()));
        }
        let names: Vec<&str> = post.iter().map(|(_, n)| n.as_str()).collect();
        let result = out.project_physical(post.clone(), format!("Calc({})", names.join(", ")))?;
        let (Some(start), Some(end)) = bounds else {
            return Ok(result);
        };
        let result = result.with_rowtime(Some(&end))?;
        self.windows.insert(
            result.id(),
            WindowProps {
                start,
                end,
                rowtime_offset: 0,
                ..w
            },
        );
        Ok(result)
    }

    /// An unbounded `GROUP BY`: an updating aggregation (a changelog in
    /// streaming mode, the final rows in batch mode).
    fn group_aggregate(&mut self, a: &Aggregate) -> Result<DataStream> {
        let stream = self.lower(&a.input)?;
        if let Some(w) = self.windows.get(&stream.id()).cloned() {
            let grouped = |name: &str| {
                a.group_expr.iter().any(|g| {
                    matches!(g, Expr::Column(c) if a.input.schema().index_of_column(c).is_ok_and(|i| stream.schema().field(i).name() == name))
                })
            };
            if grouped(&w.start) && grouped(&w.end) {
                return self.windowed_group_aggregate(a, stream, w);
            }
        }
        let retracting = is_changelog(&stream);
        let in_schema = a.input.schema();
        let mut pre: Vec<(Expr, String)> = vec![];
        let mut keys = group_keys(a, &mut pre)?;
        let global = keys.is_empty();
        if global {
            // One group: every row has the same key.
            pre.push((lit(0i8), "__k0".into()));
            keys.push("__k0".into());
        }
        let mut specs = aggregate_specs(a, &|_| false, &mut pre)?;
        // Over an updating input an average is a sum over a count, both of
        // which can take retractions back.
        let mut averages = vec![];
        if retracting {
            let mut split = vec![];
            for s in specs {
                if s.function == AggregateFunction::Avg {
                    averages.push(s.alias.clone());
                    split.push(AggregateSpec {
                        function: AggregateFunction::Sum,
                        column: s.column.clone(),
                        alias: format!("{}_sum", s.alias),
                        filter: s.filter.clone(),
                    });
                    split.push(AggregateSpec {
                        function: AggregateFunction::Count,
                        column: s.column,
                        alias: format!("{}_count", s.alias),
                        filter: s.filter,
                    });
                } else {
                    split.push(s);
                }
            }
            specs = split;
        }
        // Subexpressions several arguments share are computed once.
        let (stream, pre, args_schema) = if retracting {
            (stream, pre, in_schema.as_ref().clone())
        } else {
            cse::shared_subexpressions(stream, pre, in_schema)?
        };
        let mut exprs = pre
            .iter()
            .map(|(e, n)| Ok((physical(e, &args_schema)?, n.clone())))
            .collect::<Result<Vec<_>>>()?;
        if retracting {
            exprs.push(changelog_column(&stream));
        }
        let pre_stream = stream.project_physical(exprs, "Calc(aggregate arguments)")?;
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        let batch = self.env.config().runtime_mode == weir_core::config::RuntimeMode::Batch;
        let out = if self.two_phase
            && batch
            && !retracting
            && specs.iter().all(AggregateSpec::splits_into_phases)
        {
            pre_stream.two_phase_group_aggregate(&k, specs)?
        } else {
            pre_stream.key_by(&k)?.group_aggregate(specs)?
        };
        let changelog = is_changelog(&out);
        let out_df = DFSchema::try_from(out.schema().as_ref().clone())?;
        let c = |name: &str| Expr::Column(Column::new_unqualified(name));
        let mut post = vec![];
        let group_fields = if global { 0 } else { keys.len() };
        for (i, field) in a.schema.fields().iter().enumerate() {
            let e = if i < group_fields {
                c(&format!("__k{i}"))
            } else {
                let alias = format!("__a{}", i - group_fields);
                if averages.contains(&alias) {
                    // Integer averages truncate, as Flink's AVG of integers.
                    c(&format!("{alias}_sum")) / c(&format!("{alias}_count"))
                } else {
                    c(&alias)
                }
            };
            let e = conform(e, field.data_type(), &out_df)?;
            post.push((physical(&e, &out_df)?, field.name().clone()));
        }
        if changelog {
            post.push((
                physical(&c(ROW_KIND_COLUMN), &out_df)?,
                ROW_KIND_COLUMN.into(),
            ));
        }
        let names: Vec<&str> = post.iter().map(|(_, n)| n.as_str()).collect();
        out.project_physical(post.clone(), format!("Calc({})", names.join(", ")))
    }

    fn window_aggregate(
        &mut self,
        a: &Aggregate,
        tvf: &WindowTvf,
        filters: &[&datafusion_expr::logical_plan::Filter],
    ) -> Result<DataStream> {
        let width = tvf.input_width();
        let in_schema = a.input.schema();
        let window_column = |e: &Expr| -> Option<usize> {
            let Expr::Column(c) = e else { return None };
            let i = in_schema.index_of_column(c).ok()?;
            (i >= width).then(|| i - width)
        };
        let touches_window = |e: &Expr| {
            e.column_refs()
                .iter()
                .any(|c| in_schema.index_of_column(c).is_ok_and(|i| i >= width))
        };
        let mut stream = self.lower(&tvf.input)?;
        let time_name = tvf.input.schema().field(tvf.time_column).name().clone();
        let processing_time = self
            .proctime
            .get(&stream.id())
            .is_some_and(|p| p.contains(&time_name));
        if !processing_time && stream.rowtime() != Some(time_name.as_str()) {
            return Err(WeirError::plan(format!(
                "DESCRIPTOR({time_name}) is not a time attribute: window table functions need the column a WATERMARK is declared for{}",
                match stream.rowtime() {
                    Some(r) => format!(" ('{r}' here)"),
                    None => " (this input has none)".into(),
                }
            )));
        }
        for f in filters.iter().rev() {
            if touches_window(&f.predicate) {
                return Err(unsupported(
                    "a WHERE on window columns under a window aggregation",
                ));
            }
            let p = physical(&f.predicate, in_schema)?;
            stream = stream.filter_physical(p, format!("Where({})", f.predicate))?;
        }
        // What the window operator needs as columns: keys, aggregate
        // arguments, the rowtime.
        let mut pre: Vec<(Expr, String)> = vec![];
        let mut group_out: Vec<GroupOut> = vec![];
        let mut keys: Vec<String> = vec![];
        for g in &a.group_expr {
            if let Some(w) = window_column(g) {
                group_out.push(GroupOut::Window(w));
                continue;
            }
            if touches_window(g) {
                return Err(unsupported(format!(
                    "GROUP BY expression `{g}` over window columns"
                )));
            }
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(unsupported("GROUPING SETS / ROLLUP / CUBE on a stream"));
            }
            let name = format!("__k{}", keys.len());
            pre.push((g.clone(), name.clone()));
            group_out.push(GroupOut::Key(keys.len()));
            keys.push(name);
        }
        if !group_out.iter().any(|g| matches!(g, GroupOut::Window(0)))
            || !group_out.iter().any(|g| matches!(g, GroupOut::Window(1)))
        {
            return Err(unsupported(
                "a window aggregation must GROUP BY both window_start and window_end",
            ));
        }
        let specs = aggregate_specs(a, &touches_window, &mut pre)?;
        // The rowtime rides along under its own name.
        pre.push((
            Expr::Column(Column::from(in_schema.qualified_field(tvf.time_column))),
            time_name.clone(),
        ));
        let exprs = pre
            .iter()
            .map(|(e, n)| Ok((physical(e, in_schema)?, n.clone())))
            .collect::<Result<Vec<_>>>()?;
        let pre_stream = stream.project_physical(exprs, "Calc(window arguments)")?;
        let assigner = match tvf.window {
            TvfWindow::Tumble { size, offset } => WindowAssigner::Tumbling { size, offset },
            TvfWindow::Hop {
                slide,
                size,
                offset,
            } => WindowAssigner::Sliding {
                size,
                slide,
                offset,
            },
            TvfWindow::Cumulate { step, size, offset } => WindowAssigner::Cumulate {
                step,
                max_size: size,
                offset,
            },
            TvfWindow::Session { gap } => WindowAssigner::Session { gap },
        };
        let windows = weir_core::time::Windows {
            assigner,
            processing_time,
        };
        let windowed = if keys.is_empty() {
            pre_stream.window_all(windows)
        } else {
            let k: Vec<&str> = keys.iter().map(String::as_str).collect();
            pre_stream.key_by(&k)?.window(windows)
        };
        let out = windowed.aggregate(specs)?;
        // Back to the aggregate's columns: groups in order, then aggregates.
        let out_schema = Arc::clone(out.schema());
        let out_df = DFSchema::try_from(out_schema.as_ref().clone())?;
        let c = |name: &str| Expr::Column(Column::new_unqualified(name));
        let mut post = vec![];
        let mut rowtime = None;
        let mut end_column = None;
        for (g, field) in group_out.iter().zip(a.schema.fields()) {
            let e = match g {
                GroupOut::Window(0) => c("window_start"),
                GroupOut::Window(1) => {
                    end_column = Some(field.name().clone());
                    c("window_end")
                }
                GroupOut::Window(_) => {
                    rowtime = Some(field.name().clone());
                    window_time(c("window_end"))
                }
                GroupOut::Key(k) => c(&format!("__k{k}")),
            };
            post.push((e, field));
        }
        for (j, field) in a.schema.fields().iter().skip(group_out.len()).enumerate() {
            post.push((c(&format!("__a{j}")), field));
        }
        let exprs = post
            .into_iter()
            .map(|(e, field)| {
                let e = conform(e, field.data_type(), &out_df)?;
                Ok((physical(&e, &out_df)?, field.name().clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<&str> = exprs.iter().map(|(_, n)| n.as_str()).collect();
        let result = out.project_physical(exprs.clone(), format!("Calc({})", names.join(", ")))?;
        let aligned = match tvf.window {
            TvfWindow::Tumble { size, offset } => Some((size, offset)),
            TvfWindow::Hop { slide, offset, .. } => Some((slide, offset)),
            TvfWindow::Cumulate { step, offset, .. } => Some((step, offset)),
            TvfWindow::Session { .. } => None,
        };
        let start_column = group_out
            .iter()
            .zip(a.schema.fields())
            .find(|(g, _)| matches!(g, GroupOut::Window(0)))
            .map(|(_, f)| f.name().clone());
        // window_time is the results' rowtime; without it window_end
        // (= window_time + 1 ms) serves: results leave before the watermark
        // that fired them, so both are ahead of the downstream watermark.
        let rowtime_offset = if rowtime.is_some() { -1 } else { 0 };
        let result = result.with_rowtime(rowtime.or(end_column.clone()).as_deref())?;
        if let (Some((slide, offset)), Some(start), Some(end)) = (aligned, start_column, end_column)
        {
            self.windows.insert(
                result.id(),
                WindowProps {
                    start,
                    end,
                    slide,
                    offset,
                    rowtime_offset,
                },
            );
        }
        Ok(result)
    }
}

/// Weir's aggregate for DataFusion's `udaf` (`distinct`: `COUNT(DISTINCT
/// …)`); `e`, the expression, names it in errors.
pub(crate) fn aggregate_function(
    udaf: &Arc<datafusion_expr::AggregateUDF>,
    distinct: bool,
    e: &Expr,
) -> Result<AggregateFunction> {
    Ok(
        match (udaf.name().to_ascii_lowercase().as_str(), distinct) {
            ("count", false) => AggregateFunction::Count,
            ("count", true) => AggregateFunction::CountDistinct,
            ("sum", false) => AggregateFunction::Sum,
            ("min", _) => AggregateFunction::Min,
            ("max", _) => AggregateFunction::Max,
            ("avg", false) => AggregateFunction::Avg,
            ("first_value", false) => AggregateFunction::FirstValue,
            ("last_value", false) => AggregateFunction::LastValue,
            (_, true) => {
                return Err(unsupported(format!(
                    "DISTINCT in `{e}` (COUNT(DISTINCT …) is supported)"
                )));
            }
            _ => AggregateFunction::Udf(Arc::clone(udaf)),
        },
    )
}

/// The aggregates of `a` as window/group aggregate specs over the columns
/// `__arg{j}` that `pre` computes, and for `FILTER (WHERE c)` the BOOLEAN
/// column `__filter{j}` the aggregate takes its rows by (equal arguments
/// and conditions share one column); outputs are named `__a{j}`. Without
/// aggregates, a hidden `COUNT(*)` keeps one row per group.
fn aggregate_specs(
    a: &Aggregate,
    forbidden: &dyn Fn(&Expr) -> bool,
    pre: &mut Vec<(Expr, String)>,
) -> Result<Vec<AggregateSpec>> {
    let mut specs = vec![];
    for (j, e) in a.aggr_expr.iter().enumerate() {
        let Expr::AggregateFunction(f) = e.clone().unalias() else {
            return Err(unsupported(format!("aggregate expression `{e}`")));
        };
        let p = &f.params;
        if !p.order_by.is_empty() {
            return Err(unsupported(format!("ORDER BY inside aggregate `{e}`")));
        }
        if p.args.len() > 1 {
            return Err(unsupported(format!(
                "aggregate `{e}` with {} arguments",
                p.args.len()
            )));
        }
        let name = f.func.name().to_ascii_lowercase();
        let function = aggregate_function(&f.func, p.distinct, e)?;
        let arg = p.args.first().cloned();
        if arg.as_ref().is_some_and(forbidden) || p.filter.as_deref().is_some_and(forbidden) {
            return Err(unsupported(format!("aggregate `{e}` over window columns")));
        }
        let is_count_star =
            name == "count" && !p.distinct && matches!(arg, None | Some(Expr::Literal(_, _)));
        let column = match arg {
            Some(x) if !is_count_star => Some(pre_column(pre, x, || format!("__arg{j}"))),
            _ => None,
        };
        // FILTER (WHERE c): a BOOLEAN column the aggregate reads its rows
        // by, computed once for every aggregate with the same condition.
        let filter = p
            .filter
            .as_deref()
            .map(|c| pre_column(pre, c.clone(), || format!("__filter{j}")));
        specs.push(AggregateSpec {
            function,
            column,
            alias: format!("__a{j}"),
            filter,
        });
    }
    if specs.is_empty() {
        // GROUP BY without aggregates (one row per key): count, unseen.
        specs.push(AggregateSpec::count_star().alias("__a0"));
    }
    Ok(specs)
}

/// The column of `pre` that computes `x`: an earlier one computing the
/// same expression, or a new one named by `name`.
fn pre_column(pre: &mut Vec<(Expr, String)>, x: Expr, name: impl FnOnce() -> String) -> String {
    if let Some((_, n)) = pre.iter().find(|(e, _)| *e == x) {
        return n.clone();
    }
    let n = name();
    pre.push((x, n.clone()));
    n
}

/// The group expressions of `a` as key columns `__k{i}` that `pre`
/// computes.
fn group_keys(a: &Aggregate, pre: &mut Vec<(Expr, String)>) -> Result<Vec<String>> {
    a.group_expr
        .iter()
        .enumerate()
        .map(|(i, g)| {
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(unsupported("GROUPING SETS / ROLLUP / CUBE on a stream"));
            }
            let name = format!("__k{i}");
            pre.push((g.clone(), name.clone()));
            Ok(name)
        })
        .collect()
}

/// Where a window aggregate's output column comes from.
enum GroupOut {
    /// 0 window_start, 1 window_end, 2 window_time.
    Window(usize),
    Key(usize),
}
