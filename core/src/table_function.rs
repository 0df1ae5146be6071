//! Table functions: functions that turn each input row into any number of
//! rows (SQL's `CROSS JOIN UNNEST(…)` and `LATERAL TABLE(f(…))`, Flink's
//! `TableFunction`). A function works on whole batches: it gets the
//! argument columns of a batch and returns its rows as columns, with the
//! input row each belongs to.

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
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

/// SQL's `UNNEST(a, b, …) [WITH ORDINALITY]`: one row per element of the
/// arrays (or entry of the maps), zipped — the longest of a row sets its
/// number of rows, shorter ones give NULLs; a NULL or empty one gives none
/// (a row of NULLs when outer). An array of ROWs gives the rows' fields as
/// columns, a map its key and value, as in Flink; `WITH ORDINALITY` adds
/// each element's position (from 1, an INT).
#[derive(Debug, Clone, Copy, Default)]
pub struct Unnest {
    /// `WITH ORDINALITY`.
    pub ordinality: bool,
}

impl Unnest {
    /// The function, shared.
    pub fn arc() -> Arc<dyn TableFunction> {
        Arc::new(Unnest::default())
    }

    /// `UNNEST … WITH ORDINALITY`, shared.
    pub fn with_ordinality() -> Arc<dyn TableFunction> {
        Arc::new(Unnest { ordinality: true })
    }
}

/// An UNNEST argument's element offsets and values: arrays' elements,
/// maps' entries (a struct of key and value).
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
        DataType::Map(_, _) => {
            let m = a.as_map();
            let o: Vec<usize> = m.value_offsets().iter().map(|&x| x as usize).collect();
            Ok(offsets(&o, Arc::new(m.entries().clone())))
        }
        other => Err(not_unnestable(i, other)),
    }
}

fn not_unnestable(i: usize, t: &DataType) -> WeirError {
    WeirError::plan(format!(
        "UNNEST argument {} is {t}, not an ARRAY or a MAP",
        i + 1
    ))
}

/// The columns an element of `t` makes: a ROW's (or a map entry's) fields,
/// else the element itself.
fn element_fields(i: usize, t: &DataType) -> Result<Vec<Field>> {
    let element = match t {
        DataType::List(f) | DataType::LargeList(f) => f.data_type(),
        DataType::Map(f, _) => f.data_type(),
        other => return Err(not_unnestable(i, other)),
    };
    Ok(match element {
        DataType::Struct(fields) => fields
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect(),
        other => vec![Field::new(format!("f{i}"), other.clone(), true)],
    })
}

impl TableFunction for Unnest {
    fn name(&self) -> &str {
        if self.ordinality {
            "unnest_with_ordinality"
        } else {
            "unnest"
        }
    }

    /// None without argument types: an element's type is its array's.
    fn fields(&self) -> Vec<Field> {
        vec![]
    }

    fn fields_for(&self, args: &[DataType]) -> Result<Vec<Field>> {
        if args.is_empty() {
            return Err(WeirError::plan("UNNEST needs at least one ARRAY or MAP"));
        }
        let mut fields = vec![];
        for (i, t) in args.iter().enumerate() {
            fields.extend(element_fields(i, t)?);
        }
        if self.ordinality {
            fields.push(Field::new("ordinality", DataType::Int32, false));
        }
        Ok(fields)
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
        let mut positions: Vec<i32> = Vec::new();
        let mut picks: Vec<Vec<Option<u32>>> = vec![Vec::new(); args.len()];
        for r in 0..n {
            let most = (0..args.len()).map(|a| len(a, r)).max().unwrap_or(0);
            for e in 0..most {
                rows.push(r as u32);
                positions.push(e as i32 + 1);
                for (a, p) in picks.iter_mut().enumerate() {
                    p.push((e < len(a, r)).then(|| (parts[a].0[r] + e) as u32));
                }
            }
        }
        let mut columns = Vec::new();
        for (p, (_, values)) in picks.into_iter().zip(&parts) {
            let picked = take(values.as_ref(), &UInt32Array::from(p), None)?;
            match picked.data_type() {
                // A ROW's fields (a map entry's key and value) as columns;
                // a missing element is a row of NULLs.
                DataType::Struct(_) => {
                    let s = picked.as_struct();
                    for c in s.columns() {
                        columns.push(match s.nulls() {
                            Some(nulls) if nulls.null_count() > 0 => {
                                let keep =
                                    arrow::array::BooleanArray::new(nulls.inner().clone(), None);
                                arrow::compute::nullif(c, &arrow::compute::not(&keep)?)?
                            }
                            _ => Arc::clone(c),
                        });
                    }
                }
                _ => columns.push(picked),
            }
        }
        if self.ordinality {
            columns.push(Arc::new(arrow::array::Int32Array::from(positions)));
        }
        Ok(TableRows { rows, columns })
    }

    fn builtin(&self) -> bool {
        true
    }
}

/// The built-in table function called `name`, if there is one.
pub fn builtin_table_function(name: &str) -> Option<Arc<dyn TableFunction>> {
    match name.to_ascii_lowercase().as_str() {
        "unnest" => Some(Unnest::arc()),
        "unnest_with_ordinality" => Some(Unnest::with_ordinality()),
        _ => None,
    }
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
            fields.push(crate::spec::row_kind_field());
        }
        Ok(Arc::new(arrow::datatypes::Schema::new(fields)))
    }
}
