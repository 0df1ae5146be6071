//! Row groups and pages a query cannot need: a filter's conjuncts of the
//! form `column <op> literal` checked against each row group's min/max
//! statistics, as arrays over all row groups of a file at once, then
//! against the data pages' min/max in the page index (when the file has
//! one) of the row groups kept. A row group or page is skipped only when
//! its statistics prove no row passes; missing statistics, other
//! predicates and casts that do not fit keep it.

use std::ops::Range;

use arrow::array::{Array, ArrayRef, BooleanArray, Scalar};
use arrow::compute::kernels::cmp;
use arrow::datatypes::Schema;
use datafusion_common::ScalarValue;
use datafusion_expr::{Expr, Operator};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::file::metadata::ParquetMetaData;

/// `column op value`, the column on the left.
struct Bound {
    column: String,
    op: Operator,
    value: ScalarValue,
}

fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Column(c) => Some(c.name.clone()),
        // A widening cast the planner put on the column (INT vs BIGINT
        // literal): the literal is cast back to the column's type below.
        Expr::Cast(c) => column_name(&c.expr),
        _ => None,
    }
}

fn swap(op: Operator) -> Option<Operator> {
    Some(match op {
        Operator::Eq => Operator::Eq,
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        _ => return None,
    })
}

fn bounds(e: &Expr, out: &mut Vec<Bound>) {
    match e {
        Expr::BinaryExpr(b) if b.op == Operator::And => {
            bounds(&b.left, out);
            bounds(&b.right, out);
        }
        Expr::BinaryExpr(b) => {
            let (column, op, value) = match (column_name(&b.left), &*b.right, &*b.left) {
                (Some(c), Expr::Literal(v, _), _) => (c, Some(b.op), v.clone()),
                (None, _, Expr::Literal(v, _)) => match column_name(&b.right) {
                    Some(c) => (c, swap(b.op), v.clone()),
                    None => return,
                },
                _ => return,
            };
            if let Some(op) = op.filter(|o| swap(*o).is_some()) {
                out.push(Bound { column, op, value });
            }
        }
        Expr::Between(b) if !b.negated => {
            if let (Some(c), Expr::Literal(lo, _), Expr::Literal(hi, _)) =
                (column_name(&b.expr), &*b.low, &*b.high)
            {
                out.push(Bound {
                    column: c.clone(),
                    op: Operator::GtEq,
                    value: lo.clone(),
                });
                out.push(Bound {
                    column: c,
                    op: Operator::LtEq,
                    value: hi.clone(),
                });
            }
        }
        _ => {}
    }
}

/// Which row groups of a file may hold rows passing all of `filters`.
pub(crate) fn row_groups_to_read(
    meta: &ParquetMetaData,
    schema: &Schema,
    filters: &[Expr],
) -> Vec<usize> {
    let n = meta.num_row_groups();
    let mut keep = vec![true; n];
    let mut all = vec![];
    for f in filters {
        bounds(f, &mut all);
    }
    for b in all {
        if let Some(mask) = bound_mask(meta, schema, &b) {
            for (k, m) in keep.iter_mut().zip(mask.iter()) {
                // NULL (no statistics) keeps the row group.
                *k &= m.unwrap_or(true);
            }
        }
    }
    (0..n).filter(|&i| keep[i]).collect()
}

/// For each row group, whether its statistics allow a row with `b`.
fn bound_mask(meta: &ParquetMetaData, schema: &Schema, b: &Bound) -> Option<BooleanArray> {
    let converter =
        StatisticsConverter::try_new(&b.column, schema, meta.file_metadata().schema_descr())
            .ok()?;
    let mins = converter.row_group_mins(meta.row_groups().iter()).ok()?;
    let maxes = converter.row_group_maxes(meta.row_groups().iter()).ok()?;
    allowed(schema, b, &mins, &maxes)
}

/// The rows of row group `rg` its data pages' statistics (the page index,
/// when the file has one) allow for every conjunct of `filters`, as
/// ranges; `None` when that is all of them or nothing is known.
pub(crate) fn rows_to_read(
    meta: &ParquetMetaData,
    schema: &Schema,
    filters: &[Expr],
    rg: usize,
) -> Option<Vec<Range<usize>>> {
    let (Some(pages), Some(offsets)) = (meta.column_index(), meta.offset_index()) else {
        return None;
    };
    let total = usize::try_from(meta.row_group(rg).num_rows()).ok()?;
    let mut all = vec![];
    for f in filters {
        bounds(f, &mut all);
    }
    let everything: Vec<Range<usize>> = std::iter::once(0..total).collect();
    let mut keep = everything.clone();
    for b in all {
        let Some(converter) =
            StatisticsConverter::try_new(&b.column, schema, meta.file_metadata().schema_descr())
                .ok()
        else {
            continue;
        };
        let rgs = [rg];
        let (Ok(mins), Ok(maxes), Ok(Some(counts))) = (
            converter.data_page_mins(pages, offsets, rgs.iter()),
            converter.data_page_maxes(pages, offsets, rgs.iter()),
            converter.data_page_row_counts(offsets, meta.row_groups(), rgs.iter()),
        ) else {
            continue;
        };
        let Some(mask) = allowed(schema, &b, &mins, &maxes) else {
            continue;
        };
        let mut ranges = vec![];
        let mut start = 0usize;
        for (page, rows) in counts.iter().enumerate() {
            let rows = rows.and_then(|r| usize::try_from(r).ok())?;
            // NULL (no statistics for the page) keeps it.
            if mask.is_null(page) || mask.value(page) {
                match ranges.last_mut() {
                    Some(Range { end, .. }) if *end == start => *end = start + rows,
                    _ => ranges.push(start..start + rows),
                }
            }
            start += rows;
        }
        if start != total {
            return None;
        }
        keep = intersect(&keep, &ranges);
    }
    (keep != everything).then_some(keep)
}

/// The rows in both sorted, disjoint range lists.
fn intersect(a: &[Range<usize>], b: &[Range<usize>]) -> Vec<Range<usize>> {
    let (mut i, mut j, mut out) = (0, 0, vec![]);
    while i < a.len() && j < b.len() {
        let (start, end) = (a[i].start.max(b[j].start), a[i].end.min(b[j].end));
        if start < end {
            out.push(start..end);
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Given the min and max of each unit (row group or page), whether each
/// may hold a row with `b`; `None` when the literal does not fit.
fn allowed(schema: &Schema, b: &Bound, mins: &ArrayRef, maxes: &ArrayRef) -> Option<BooleanArray> {
    let field = schema.field_with_name(&b.column).ok()?;
    let value: ArrayRef = b.value.to_array().ok()?;
    let value = arrow::compute::cast_with_options(
        &value,
        field.data_type(),
        &arrow::compute::CastOptions {
            safe: false,
            ..Default::default()
        },
    )
    .ok()?;
    // Only a literal the column's type holds exactly (5.5 against an
    // INT column would round and prune wrongly).
    let back = arrow::compute::cast(&value, &b.value.data_type()).ok()?;
    if value.is_null(0) || ScalarValue::try_from_array(&back, 0).ok()? != b.value {
        return None;
    }
    let v = Scalar::new(value);
    let mask = match b.op {
        Operator::Eq => {
            arrow::compute::and(&cmp::lt_eq(mins, &v).ok()?, &cmp::gt_eq(maxes, &v).ok()?).ok()?
        }
        Operator::Lt => cmp::lt(mins, &v).ok()?,
        Operator::LtEq => cmp::lt_eq(mins, &v).ok()?,
        Operator::Gt => cmp::gt(maxes, &v).ok()?,
        Operator::GtEq => cmp::gt_eq(maxes, &v).ok()?,
        _ => return None,
    };
    Some(mask)
}

/// Whether a partition with these values may hold rows passing `filters`:
/// a conjunct `col <op> literal` over a partition column that its value
/// fails rules it out; anything else keeps it.
pub(crate) fn partition_may_pass(
    keys: &[String],
    values: &[Option<String>],
    schema: &Schema,
    filters: &[Expr],
) -> bool {
    let mut all = vec![];
    for f in filters {
        bounds(f, &mut all);
    }
    all.iter().all(|b| {
        let Some(i) = keys.iter().position(|k| *k == b.column) else {
            return true;
        };
        let Ok(field) = schema.field_with_name(&b.column) else {
            return true;
        };
        let Some(value) = &values[i] else {
            // NULL passes no comparison.
            return false;
        };
        let text: ArrayRef =
            std::sync::Arc::new(arrow::array::StringArray::from(vec![value.as_str()]));
        let Ok(typed) = arrow::compute::cast(&text, field.data_type()) else {
            return true;
        };
        let Ok(have) = ScalarValue::try_from_array(&typed, 0) else {
            return true;
        };
        let Ok(want) = b.value.cast_to(field.data_type()) else {
            return true;
        };
        // Only a literal the column's type holds exactly.
        if want.cast_to(&b.value.data_type()).ok().as_ref() != Some(&b.value) {
            return true;
        }
        match have.partial_cmp(&want) {
            None => true,
            Some(o) => match b.op {
                Operator::Eq => o.is_eq(),
                Operator::Lt => o.is_lt(),
                Operator::LtEq => o.is_le(),
                Operator::Gt => o.is_gt(),
                Operator::GtEq => o.is_ge(),
                _ => true,
            },
        }
    })
}
