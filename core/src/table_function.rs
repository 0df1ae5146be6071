//! Table functions: functions that turn each input row into any number of
//! rows (SQL's `CROSS JOIN UNNEST(…)` and `LATERAL TABLE(f(…))`, Flink's
//! `TableFunction`). A function works on whole batches: it gets the
//! argument columns of a batch and returns its rows as columns, with the
//! input row each belongs to.

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, UInt32Array, new_null_array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, SchemaRef};

use crate::error::{Result, WeirError};

/// The rows a table function made of one batch.
#[derive(Debug, Clone)]
pub struct TableRows {
    /// For each row made, the input row it belongs to (ascending).
    pub rows: Vec<u32>,
    /// The columns of the rows made, one per [`TableFunction::fields`].
    pub columns: Vec<ArrayRef>,
}

/// A table function, vectorized: called once per batch.
pub trait TableFunction: Send + Sync + fmt::Debug {
    /// The name SQL calls it by (case-insensitive).
    fn name(&self) -> &str;

    /// The columns it makes (Flink's declared result type).
    fn fields(&self) -> Vec<Field>;

    /// The columns it makes for arguments of these types; refuses types
    /// it cannot take. By default [`Self::fields`], whatever the types.
    fn fields_for(&self, args: &[DataType]) -> Result<Vec<Field>> {
        let _ = args;
        Ok(self.fields())
    }

    /// The rows of a batch's arguments (columns of equal length).
    fn eval(&self, args: &[ArrayRef]) -> Result<TableRows>;

    /// Whether a job using it can be shipped to a cluster: only built-in
    /// functions, which a worker rebuilds by name (a user's function is
    /// code of the program that registered it).
    fn builtin(&self) -> bool {
        false
    }
}

/// SQL's `UNNEST(a, b, …)`: one row per element of the arrays, zipped —
/// the longest array of a row sets its number of rows, shorter ones give
/// NULLs; a NULL or empty array gives none (a row of NULLs when outer).
#[derive(Debug, Clone, Copy, Default)]
pub struct Unnest;

impl Unnest {
    /// The function, shared.
    pub fn arc() -> Arc<dyn TableFunction> {
        Arc::new(Unnest)
    }
}

fn list_parts(a: &ArrayRef, i: usize) -> Result<(Vec<usize>, ArrayRef)> {
    let offsets = |o: &[usize], values: ArrayRef| (o.to_vec(), values);
    match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            let o: Vec<usize> = l.value_offsets().iter().map(|&x| x as usize).collect();
            Ok(offsets(&o, Arc::clone(l.values())))
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            let o: Vec<usize> = l.value_offsets().iter().map(|&x| x as usize).collect();
            Ok(offsets(&o, Arc::clone(l.values())))
        }
        other => Err(WeirError::plan(format!(
            "UNNEST argument {} is {other}, not an ARRAY",
            i + 1
        ))),
    }
}

impl TableFunction for Unnest {
    fn name(&self) -> &str {
        "unnest"
    }

    /// None without argument types: an element's type is its array's.
    fn fields(&self) -> Vec<Field> {
        vec![]
    }

    fn fields_for(&self, args: &[DataType]) -> Result<Vec<Field>> {
        if args.is_empty() {
            return Err(WeirError::plan("UNNEST needs at least one ARRAY"));
        }
        args.iter()
            .enumerate()
            .map(|(i, t)| match t {
                DataType::List(f) | DataType::LargeList(f) => {
                    Ok(Field::new(format!("f{i}"), f.data_type().clone(), true))
                }
                other => Err(WeirError::plan(format!(
                    "UNNEST argument {} is {other}, not an ARRAY",
                    i + 1
                ))),
            })
            .collect()
    }

    fn eval(&self, args: &[ArrayRef]) -> Result<TableRows> {
        let n = args.first().map_or(0, |a| a.len());
        let parts = args
            .iter()
            .enumerate()
            .map(|(i, a)| list_parts(a, i))
            .collect::<Result<Vec<_>>>()?;
        let len = |a: usize, r: usize| {
            if args[a].is_null(r) {
                0
            } else {
                parts[a].0[r + 1] - parts[a].0[r]
            }
        };
        let mut rows = Vec::new();
        let mut picks: Vec<Vec<Option<u32>>> = vec![Vec::new(); args.len()];
        for r in 0..n {
            let most = (0..args.len()).map(|a| len(a, r)).max().unwrap_or(0);
            for e in 0..most {
                rows.push(r as u32);
                for (a, p) in picks.iter_mut().enumerate() {
                    p.push((e < len(a, r)).then(|| (parts[a].0[r] + e) as u32));
                }
            }
        }
        let columns = picks
            .into_iter()
            .zip(&parts)
            .map(|(p, (_, values))| {
                if p.is_empty() {
                    return Ok(new_null_array(values.data_type(), 0));
                }
                Ok(take(values.as_ref(), &UInt32Array::from(p), None)?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TableRows { rows, columns })
    }

    fn builtin(&self) -> bool {
        true
    }
}

/// The built-in table function called `name`, if there is one.
pub fn builtin_table_function(name: &str) -> Option<Arc<dyn TableFunction>> {
    name.eq_ignore_ascii_case("unnest").then(Unnest::arc)
}

/// A lateral join with a table function: each input row with each row
/// the function makes of its arguments.
#[derive(Clone)]
pub struct LateralSpec {
    /// Schema of the input (ending with the row kind if a changelog).
    pub input_schema: SchemaRef,
    /// Argument columns of the input.
    pub args: Vec<String>,
    /// The function.
    pub function: Arc<dyn TableFunction>,
    /// Names of the function's columns in the output.
    pub names: Vec<String>,
    /// `LEFT JOIN LATERAL … ON TRUE`: a row the function makes nothing of
    /// is kept once, its function columns NULL.
    pub outer: bool,
}

impl fmt::Debug for LateralSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({}({}) AS ({}))",
            if self.outer { "LeftLateral" } else { "Lateral" },
            self.function.name(),
            self.args.join(", "),
            self.names.join(", ")
        )
    }
}

impl LateralSpec {
    /// The function's fields under their output names.
    pub fn function_fields(&self) -> Result<Vec<Field>> {
        let types = self
            .args
            .iter()
            .map(|a| {
                let f = self.input_schema.field_with_name(a).map_err(|_| {
                    WeirError::plan(format!(
                        "{}: argument '{a}' is not a column of the input ({})",
                        self.function.name(),
                        crate::time::column_list(&self.input_schema)
                    ))
                })?;
                Ok(f.data_type().clone())
            })
            .collect::<Result<Vec<_>>>()?;
        let fields = self.function.fields_for(&types)?;
        if fields.len() != self.names.len() {
            return Err(WeirError::plan(format!(
                "{} makes {} columns, but {} names are given ({})",
                self.function.name(),
                fields.len(),
                self.names.len(),
                self.names.join(", ")
            )));
        }
        Ok(fields
            .into_iter()
            .zip(&self.names)
            .map(|(f, n)| {
                let nullable = f.is_nullable() || self.outer;
                f.with_name(n).with_nullable(nullable)
            })
            .collect())
    }

    /// The output: the input's data columns, the function's, then the row
    /// kind if the input is a changelog.
    pub fn output_schema(&self) -> Result<SchemaRef> {
        let mut fields = crate::join_spec::data_fields(&self.input_schema);
        fields.extend(self.function_fields()?);
        if crate::spec::is_changelog_schema(&self.input_schema) {
            fields.push(crate::spec::changelog_field());
        }
        Ok(Arc::new(arrow::datatypes::Schema::new(fields)))
    }
}
