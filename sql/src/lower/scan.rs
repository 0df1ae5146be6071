//! Scans and the filters right above them: the columns a scan reads
//! (those the query names), a filter over a wide table seeing only the
//! columns the query reads, and what a filter shares with the projection
//! over it.

use std::sync::Arc;

use datafusion_common::{DFSchema, ScalarValue};
use datafusion_expr::{Expr, LogicalPlan};
use datafusion_physical_expr::PhysicalExpr;
use weir_core::api::DataStream;
use weir_core::{Result, WeirError};

use super::{Lowering, changelog_column, column, cse, is_changelog, physical};
use crate::catalog::TableEntry;
use crate::planner::as_window_tvf;

impl Lowering<'_> {
    /// A table's rows as the scan gives them to the plan. With `keep`
    /// (positions of the scan's output columns), only those columns, in
    /// order: the source's stream is narrowed to them and the columns the
    /// scan's filters read before the filters copy the rows they keep.
    pub(super) fn table_scan(
        &mut self,
        scan: &datafusion_expr::logical_plan::TableScan,
        keep: Option<&std::collections::BTreeSet<usize>>,
    ) -> Result<DataStream> {
        Ok(self.table_scan_sharing(scan, keep, &[])?.0)
    }

    /// [`Self::table_scan`] with `shared` (subexpressions the scan's
    /// filters evaluate for every row) computed in front of the filters
    /// and kept after the scan's columns as `__where{i}`; whether they are.
    fn table_scan_sharing(
        &mut self,
        scan: &datafusion_expr::logical_plan::TableScan,
        keep: Option<&std::collections::BTreeSet<usize>>,
        shared: &[Expr],
    ) -> Result<(DataStream, bool)> {
        let name = scan.table_name.table().to_string();
        let object =
            sqlparser::ast::ObjectName::from(vec![sqlparser::ast::Ident::new(name.clone())]);
        let entry = self
            .catalog
            .table(&object)
            .map_err(|e| WeirError::plan(e.message))?;
        let pushed = self
            .used_columns
            .as_ref()
            .and_then(Option::as_ref)
            .and_then(|used| pushed_projection(entry, scan, used));
        let mut stream = self.source(entry, &scan.filters, pushed.as_deref())?;
        // The table's columns the source produces, in order: those
        // asked for when the connector took the projection.
        let width = stream.schema().fields().len() - usize::from(is_changelog(&stream));
        let mut carried: Vec<usize> = match pushed {
            Some(cols) if cols.len() == width => cols,
            _ => (0..entry.full_schema.fields().len()).collect(),
        };
        // The scan's columns, by position as the plan has them (those the
        // caller keeps).
        let mut out: Vec<usize> = match &scan.projection {
            Some(cols) => cols.clone(),
            None => (0..entry.full_schema.fields().len()).collect(),
        };
        if let Some(keep) = keep {
            out = keep.iter().filter_map(|&k| out.get(k).copied()).collect();
        }
        let cond = datafusion_expr::utils::conjunction(scan.filters.clone());
        if let (Some(_), Some(cond)) = (keep, &cond)
            && !is_changelog(&stream)
        {
            // Only what is kept and what the filters read goes through them.
            let mut wanted: std::collections::HashSet<usize> = out.iter().copied().collect();
            for c in cond.column_refs() {
                wanted.insert(entry.full_schema.index_of(&c.name)?);
            }
            let narrow: Vec<(usize, usize)> = carried
                .iter()
                .enumerate()
                .filter(|(_, c)| wanted.contains(c))
                .map(|(at, &c)| (at, c))
                .collect();
            if narrow.len() < carried.len() {
                let schema = Arc::clone(stream.schema());
                let exprs = narrow
                    .iter()
                    .map(|&(at, _)| {
                        (
                            column(schema.field(at).name(), at),
                            schema.field(at).name().clone(),
                        )
                    })
                    .collect();
                stream = stream.project_physical(exprs, format!("Scan({name})"))?;
                carried = narrow.into_iter().map(|(_, c)| c).collect();
            }
        }
        // Filters pushed into the scan run right after the source.
        let mut shares = false;
        if let Some(cond) = cond {
            let mut schema = DFSchema::try_from_qualified_schema(
                scan.table_name.clone(),
                &entry.full_schema.project(&carried)?,
            )?;
            let mut cond = cond;
            if !shared.is_empty() && keep.is_some() && !is_changelog(&stream) {
                let (front, predicate, joined) =
                    cse::filter_sharing(stream, &cond, shared, &schema)?;
                (stream, cond, schema, shares) = (front, predicate, joined, true);
            }
            let p = physical(&cond, &schema)?;
            stream = stream.filter_physical(p, format!("Where({cond})"))?;
        }
        // A column no part of the query reads was not read and is NULL (of
        // its type) here.
        if out == carried {
            return Ok((stream, shares));
        }
        let schema = Arc::clone(stream.schema());
        let mut exprs = out
            .iter()
            .map(|&i| {
                let field = entry.full_schema.field(i);
                Ok(match carried.iter().position(|&c| c == i) {
                    Some(at) => (column(schema.field(at).name(), at), field.name().clone()),
                    None => {
                        let null = ScalarValue::try_from(field.data_type())?;
                        let e: Arc<dyn PhysicalExpr> =
                            Arc::new(datafusion_physical_expr::expressions::Literal::new(null));
                        (e, field.name().clone())
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if shares {
            for (i, at) in (carried.len()..carried.len() + shared.len()).enumerate() {
                let name = format!("{}{i}", cse::WHERE_SHARED);
                exprs.push((column(schema.field(at).name(), at), name));
            }
        }
        // A changelog source (CDC) keeps its row kind.
        if is_changelog(&stream) {
            exprs.push(changelog_column(&stream));
        }
        Ok((
            stream.project_physical(exprs, format!("Scan({name})"))?,
            shares,
        ))
    }

    /// `SELECT a, b.x FROM t WHERE p` over a wide table: the filter would
    /// copy every column of the rows it keeps, the projection then drop
    /// most. When the projection and the predicate read fewer columns than
    /// the scan has, the scan's stream is first narrowed to those (no copy:
    /// the columns are shared), then filtered. Nexmark's `bid` view filters
    /// the event stream of person, auction and bid columns down to bids and
    /// keeps only the bid column. The filtered stream, its schema and
    /// whether `shared` is computed in it (see [`Self::filter_of`]), or
    /// `None` when this does not apply.
    pub(super) fn narrowed_filter(
        &mut self,
        p: &datafusion_expr::logical_plan::Projection,
        shared: &[Expr],
    ) -> Result<Option<(DataStream, datafusion_common::DFSchemaRef, bool)>> {
        let mut below = p.input.as_ref();
        while let LogicalPlan::SubqueryAlias(a) = below {
            below = &a.input;
        }
        if let LogicalPlan::TableScan(scan) = below
            && !scan.filters.is_empty()
        {
            // Filters pushed into the scan (the usual case).
            let schema = p.input.schema();
            let mut needed = std::collections::BTreeSet::new();
            for e in &p.expr {
                for c in e.column_refs() {
                    needed.insert(schema.index_of_column(c)?);
                }
            }
            if needed.is_empty() || needed.len() == schema.fields().len() {
                return Ok(None);
            }
            let (stream, shares) = self.table_scan_sharing(scan, Some(&needed), shared)?;
            let mut narrowed = narrowed_schema(schema, &needed)?.as_ref().clone();
            if shares {
                narrowed.merge(&cse::shared_fields(shared, cse::WHERE_SHARED, schema)?);
            }
            return Ok(Some((stream, Arc::new(narrowed), shares)));
        }
        let LogicalPlan::Filter(f) = p.input.as_ref() else {
            return Ok(None);
        };
        let mut scan = f.input.as_ref();
        while let LogicalPlan::SubqueryAlias(a) = scan {
            scan = &a.input;
        }
        if !matches!(scan, LogicalPlan::TableScan(_)) {
            return Ok(None);
        }
        let schema = f.input.schema();
        let mut needed = std::collections::BTreeSet::new();
        for e in p.expr.iter().chain(std::iter::once(&f.predicate)) {
            for c in e.column_refs() {
                needed.insert(schema.index_of_column(c)?);
            }
        }
        if needed.is_empty() || needed.len() == schema.fields().len() {
            return Ok(None);
        }
        let input = self.lower(&f.input)?;
        if is_changelog(&input) || self.proctime.contains_key(&input.id()) {
            // The row kind and processing-time columns would need carrying.
            return Ok(Some(self.filter_of(
                f,
                input,
                Arc::clone(schema),
                shared,
            )?));
        }
        let narrow_schema = narrowed_schema(schema, &needed)?;
        let exprs = needed
            .iter()
            .map(|&i| {
                let name = input.schema().field(i).name().clone();
                (column(&name, i), name)
            })
            .collect::<Vec<_>>();
        let names: Vec<&str> = exprs.iter().map(|(_, n)| n.as_str()).collect();
        let narrow =
            input.project_physical(exprs.clone(), format!("Calc({})", names.join(", ")))?;
        Ok(Some(self.filter_of(f, narrow, narrow_schema, shared)?))
    }

    /// `f`'s predicate, planned against `schema` (the schema of `input`),
    /// with `shared` (subexpressions the predicate evaluates for every
    /// row) computed in front of it as `__where{i}` columns the filtered
    /// stream keeps. The filtered stream, its plan schema and whether
    /// `shared` is in it: not over an updating stream or one with a
    /// processing-time column, whose extra columns the projection in front
    /// would have to carry.
    pub(super) fn filter_of(
        &mut self,
        f: &datafusion_expr::logical_plan::Filter,
        input: DataStream,
        schema: datafusion_common::DFSchemaRef,
        shared: &[Expr],
    ) -> Result<(DataStream, datafusion_common::DFSchemaRef, bool)> {
        let shares =
            !shared.is_empty() && !is_changelog(&input) && !self.proctime.contains_key(&input.id());
        let (input, predicate, schema) = if shares {
            let (front, predicate, joined) =
                cse::filter_sharing(input.clone(), &f.predicate, shared, &schema)?;
            if let Some(w) = self.windows.get(&input.id()).cloned() {
                self.windows.insert(front.id(), w);
            }
            (self.keep_order(front)?, predicate, Arc::new(joined))
        } else {
            (input, f.predicate.clone(), schema)
        };
        let physical_predicate = physical(&predicate, &schema)?;
        let out = input.filter_physical(physical_predicate, format!("Where({predicate})"))?;
        if let Some(w) = self.windows.get(&input.id()).cloned() {
            self.windows.insert(out.id(), w);
        }
        if let Some(p) = self.proctime.get(&input.id()).cloned() {
            self.proctime.insert(out.id(), p);
        }
        Ok((self.keep_order(out)?, schema, shares))
    }
}

/// The columns of `entry` a scan reads (indices, ascending), when that is
/// fewer than all and the table's columns are all physical: those whose
/// names the query mentions anywhere (`used`), those its pushed filters
/// read, the watermark's, and every column declared NOT NULL (a column
/// not read becomes NULL). `None` reads every column.
fn pushed_projection(
    entry: &TableEntry,
    scan: &datafusion_expr::logical_plan::TableScan,
    used: &std::collections::HashSet<String>,
) -> Option<Vec<usize>> {
    if entry.has_computed_columns() {
        return None;
    }
    let schema = &entry.full_schema;
    let mut names: std::collections::HashSet<&str> = used.iter().map(String::as_str).collect();
    for f in &scan.filters {
        for c in f.column_refs() {
            names.insert(&c.name);
        }
    }
    if let Some(w) = &entry.watermark {
        names.insert(&w.column);
    }
    let wanted: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| {
            let f = schema.field(i);
            !f.is_nullable() || names.contains(f.name().as_str())
        })
        .collect();
    (wanted.len() < schema.fields().len()).then_some(wanted)
}

/// Every column name the plan's expressions mention, when the plan's nodes
/// all read their inputs' columns through expressions or are window table
/// functions (which pass their input's columns through by position, as a
/// scan that leaves a column unread keeps it, NULL, in its place, and
/// read only their `DESCRIPTOR` column, counted here); `None` when another
/// extension node (MATCH_RECOGNIZE) reads columns by position.
pub(super) fn mentioned_columns(plan: &LogicalPlan) -> Option<std::collections::HashSet<String>> {
    use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut names = std::collections::HashSet::new();
    let mut opaque = false;
    let _ = plan.apply(|node| {
        if let Some(tvf) = as_window_tvf(node) {
            let time = tvf.input.schema().field(tvf.time_column).name();
            names.insert(time.clone());
            return Ok(TreeNodeRecursion::Continue);
        }
        if matches!(node, LogicalPlan::Extension(_)) {
            opaque = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|e| {
            for c in e.column_refs() {
                names.insert(c.name.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(TreeNodeRecursion::Continue)
    });
    (!opaque).then_some(names)
}

/// `schema`'s columns at the positions `keep`, in order.
fn narrowed_schema(
    schema: &DFSchema,
    keep: &std::collections::BTreeSet<usize>,
) -> Result<datafusion_common::DFSchemaRef> {
    let kept = keep
        .iter()
        .map(|&i| {
            let (q, field) = schema.qualified_field(i);
            (q.cloned(), Arc::clone(field))
        })
        .collect();
    Ok(Arc::new(DFSchema::new_with_metadata(
        kept,
        schema.metadata().clone(),
    )?))
}
