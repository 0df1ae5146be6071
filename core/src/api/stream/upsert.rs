//! Upserting streams: what an upsert sink asks of the query feeding it.

use arrow::datatypes::Schema;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::{CastExpr, Column};

use super::DataStream;
use crate::graph::TransformationKind;
use crate::spec::{ChangelogMode, OperatorSpec};

impl DataStream {
    /// Make this retracting stream upserting by `key` where the operator
    /// producing its updates can emit upserts: a group aggregate keyed by
    /// exactly those columns, or a Top-N whose upsert key they are (its
    /// keys and row number, or its keys when it keeps one row), reached
    /// through projections that pass them on unchanged, with no other
    /// consumer on the way. It then emits only the new row of a changed
    /// key (`+U`, no `-U`), as Flink's planner makes an aggregate or a rank
    /// feeding an upsert sink by that key. Returns
    /// the stream's mode afterwards; a stream that cannot be made upserting
    /// stays retracting (an upsert sink drops its `-U` rows itself).
    pub fn upsert_by(&self, key: &[String]) -> ChangelogMode {
        let mode = self.changelog_mode();
        if mode != ChangelogMode::Retract || key.is_empty() {
            return mode;
        }
        let all = self.env.transformations();
        let consumers = |id: usize| all.iter().filter(|t| t.inputs.contains(&id)).count();
        // From this stream up to the aggregate: each projection's id and
        // the key's names at its output.
        let mut path: Vec<(usize, Vec<String>)> = vec![];
        let mut names = key.to_vec();
        let mut id = self.id;
        loop {
            let t = &all[id];
            // The stream itself feeds nothing yet; an operator on the way
            // feeds only the next one.
            if consumers(id) != usize::from(!path.is_empty()) {
                return mode;
            }
            match &t.kind {
                TransformationKind::Operator(OperatorSpec::Project { exprs, .. }) => {
                    let mut before = Vec::with_capacity(names.len());
                    for n in &names {
                        let from = exprs
                            .iter()
                            .find(|(_, out)| out == n)
                            .and_then(|(e, _)| passed_column(e.as_ref(), &all[t.inputs[0]].schema))
                            .map(|c| c.name().to_string());
                        match from {
                            Some(f) => before.push(f),
                            None => return mode,
                        }
                    }
                    path.push((id, std::mem::replace(&mut names, before)));
                    id = t.inputs[0];
                    continue;
                }
                TransformationKind::Operator(OperatorSpec::GroupAggregate(g))
                    if g.changelog && same_set(&g.keys, &names) => {}
                TransformationKind::Operator(OperatorSpec::TopN(n))
                    if n.upsert_keys().iter().any(|k| same_set(k, &names)) => {}
                _ => return mode,
            }
            // The aggregate or Top-N upserts by `names`, and the
            // projections on the way pass the key on.
            self.env.update(id, |t| {
                match &mut t.kind {
                    TransformationKind::Operator(OperatorSpec::GroupAggregate(g)) => {
                        g.upsert = true;
                        t.changelog = g.changelog_mode();
                    }
                    TransformationKind::Operator(OperatorSpec::TopN(n)) => {
                        n.upsert = Some(names.clone());
                        t.changelog = ChangelogMode::Upsert { key: names };
                    }
                    _ => unreachable!("matched above"),
                }
                t.name = format!("{} [upsert]", t.name);
            });
            for (p, k) in path {
                self.env
                    .update(p, |t| t.changelog = ChangelogMode::Upsert { key: k });
            }
            return self.changelog_mode();
        }
    }
}

impl DataStream {
    /// [`Self::upsert_by`] the key of the group aggregate or Top-N producing
    /// this stream's updates, as it reaches this stream through the
    /// projections on the way (each passing every key column on
    /// unchanged); for a sink that drops `-U` rows and so needs no
    /// particular key. The stream's mode afterwards.
    pub fn upsert_by_its_key(&self) -> ChangelogMode {
        let mode = self.changelog_mode();
        if mode != ChangelogMode::Retract {
            return mode;
        }
        let all = self.env.transformations();
        // Down to the aggregate or Top-N: the projections on the way,
        // nearest first.
        let mut projections = vec![];
        let mut id = self.id;
        let candidates = loop {
            match &all[id].kind {
                TransformationKind::Operator(OperatorSpec::Project { exprs, .. }) => {
                    id = all[id].inputs[0];
                    projections.push((exprs, &all[id].schema));
                }
                TransformationKind::Operator(OperatorSpec::GroupAggregate(g)) if g.changelog => {
                    break vec![g.keys.clone()];
                }
                TransformationKind::Operator(OperatorSpec::TopN(n)) => break n.upsert_keys(),
                _ => return mode,
            }
        };
        // The first key whose columns all reach this stream, named as here.
        let reaching = |key: &Vec<String>| -> Option<Vec<String>> {
            let mut names = key.clone();
            for (exprs, input) in projections.iter().rev() {
                names = names
                    .iter()
                    .map(|n| {
                        exprs.iter().find_map(|(e, name)| {
                            passed_column(e.as_ref(), input)
                                .filter(|c| c.name() == n)
                                .map(|_| name.clone())
                        })
                    })
                    .collect::<Option<_>>()?;
            }
            Some(names)
        };
        match candidates.iter().find_map(reaching) {
            Some(names) => self.upsert_by(&names),
            None => mode,
        }
    }
}

/// The column `e` passes on with its values told apart as before: the
/// column itself, or cast between integer types (a sink's BIGINT taking a
/// row number's UNSIGNED BIGINT; such a cast fails rather than wrap).
fn passed_column<'a>(e: &'a dyn PhysicalExpr, input: &Schema) -> Option<&'a Column> {
    if let Some(c) = e.downcast_ref::<Column>() {
        return Some(c);
    }
    let cast = e.downcast_ref::<CastExpr>()?;
    let c = cast.expr().downcast_ref::<Column>()?;
    let from = input.field_with_name(c.name()).ok()?.data_type();
    (cast.cast_type().is_integer() && from.is_integer()).then_some(c)
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}
