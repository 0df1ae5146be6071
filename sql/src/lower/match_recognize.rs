//! Lowering `MATCH_RECOGNIZE` to the DataStream graph.

use weir_core::api::{DataStream, MatchRecognize};
use weir_core::match_spec::MatchExpr;
use weir_core::wire::ExprNode;
use weir_core::{Result, WeirError};

use super::*;
use crate::match_recognize::{MatchRecognizeNode, PlannedMatchExpr};

impl Lowering<'_> {
    /// Row pattern recognition per partition, ordered by the input's time
    /// attribute; the output is append-only, as Flink's.
    pub(super) fn match_recognize(&mut self, m: &MatchRecognizeNode) -> Result<DataStream> {
        let input = self.lower(&m.input)?;
        if is_changelog(&input) {
            return Err(unsupported(
                "MATCH_RECOGNIZE over an updating input (Flink rejects it too: it consumes only inserts)",
            ));
        }
        let proctime = self.proctime.get(&input.id()).cloned().unwrap_or_default();
        let event_time = if input.rowtime() == Some(m.order.as_str()) {
            true
        } else if proctime.contains(&m.order) {
            false
        } else {
            return Err(WeirError::plan(format!(
                "MATCH_RECOGNIZE: ORDER BY {} is not a time attribute; order by the column a WATERMARK is declared for{} or a PROCTIME() column",
                m.order,
                match input.rowtime() {
                    Some(r) => format!(" ('{r}' here)"),
                    None => String::new(),
                }
            )));
        };
        // No PARTITION BY: one partition, by a constant key.
        let mut keys = m.keys.clone();
        let unkeyed = keys.is_empty();
        let stream = if unkeyed {
            keys.push("__mr_all".into());
            widen(
                input,
                m.input.schema(),
                &[(lit(0i8), "__mr_all".into())],
                "Calc(one partition)",
            )?
        } else {
            input
        };
        let schema = Arc::clone(stream.schema());
        let compile = |p: &PlannedMatchExpr, with_row: bool| -> Result<MatchExpr> {
            let draft = MatchExpr {
                expr: ExprNode::Column {
                    name: String::new(),
                    index: 0,
                },
                navigations: p.navigations.clone(),
            };
            let eval = draft.schema(&schema, with_row)?;
            let dfschema = DFSchema::try_from(eval.as_ref().clone())?;
            let expr = ExprNode::from_physical(&physical(&p.expr, &dfschema)?)?;
            Ok(MatchExpr { expr, ..draft })
        };
        let defines = m
            .defines
            .iter()
            .map(|d| d.as_ref().map(|d| compile(d, true)).transpose())
            .collect::<Result<Vec<_>>>()?;
        let measures = m
            .measures
            .iter()
            .map(|(e, n)| Ok((compile(e, false)?, n.clone())))
            .collect::<Result<Vec<_>>>()?;
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        let out = stream.key_by(&k)?.match_recognize(
            event_time,
            MatchRecognize {
                variables: m.variables.clone(),
                pattern: m.pattern.clone(),
                defines,
                measures,
                skip: m.skip,
                within_ms: m.within_ms,
                rowtime_measure: m.rowtime_measure.clone(),
            },
        )?;
        // The plan's columns and types (the constant key dropped).
        let skip = usize::from(unkeyed);
        let mut exprs = vec![];
        use datafusion_expr::UserDefinedLogicalNodeCore;
        for (i, f) in m.schema().fields().iter().enumerate() {
            let at = i + skip;
            let mut e: Arc<dyn PhysicalExpr> = column(out.schema().field(at).name(), at);
            if out.schema().field(at).data_type() != f.data_type() {
                e = Arc::new(datafusion_physical_expr::expressions::CastExpr::new(
                    e,
                    f.data_type().clone(),
                    None,
                ));
            }
            exprs.push((e, f.name().clone()));
        }
        out.project_physical(exprs, "Calc(match output)")
    }
}
