//! Upserting streams: what an upsert sink asks of the query feeding it.

use datafusion_physical_expr::expressions::Column;

use super::DataStream;
use crate::graph::TransformationKind;
use crate::spec::{ChangelogMode, OperatorSpec};

impl DataStream {
    /// Make this retracting stream upserting by `key` where the operator
    /// producing its updates can emit upserts: a group aggregate keyed by
    /// exactly those columns, reached through projections that pass them
    /// on unchanged, with no other consumer on the way. It then emits only
    /// the new row of a changed key (`+U`, no `-U`), as Flink's planner
    /// makes an aggregate feeding an upsert sink by its group keys. Returns
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
                        let from = exprs.iter().find(|(_, out)| out == n).and_then(|(e, _)| {
                            e.downcast_ref::<Column>().map(|c| c.name().to_string())
                        });
                        match from {
                            Some(f) => before.push(f),
                            None => return mode,
                        }
                    }
                    path.push((id, std::mem::replace(&mut names, before)));
                    id = t.inputs[0];
                }
                TransformationKind::Operator(OperatorSpec::GroupAggregate(g))
                    if g.changelog && same_set(&g.keys, &names) =>
                {
                    self.env.update(id, |t| {
                        if let TransformationKind::Operator(OperatorSpec::GroupAggregate(g)) =
                            &mut t.kind
                        {
                            g.upsert = true;
                            t.changelog = g.changelog_mode();
                            t.name = format!("{} [upsert]", t.name);
                        }
                    });
                    for (p, k) in path {
                        self.env
                            .update(p, |t| t.changelog = ChangelogMode::Upsert { key: k });
                    }
                    return self.changelog_mode();
                }
                _ => return mode,
            }
        }
    }
}

impl DataStream {
    /// [`Self::upsert_by`] the key of the group aggregate producing this
    /// stream's updates, as it reaches this stream through the
    /// projections on the way (each passing every key column on
    /// unchanged); for a sink that drops `-U` rows and so needs no
    /// particular key. The stream's mode afterwards.
    pub fn upsert_by_its_key(&self) -> ChangelogMode {
        let mode = self.changelog_mode();
        if mode != ChangelogMode::Retract {
            return mode;
        }
        let all = self.env.transformations();
        // Down to the aggregate: the projections on the way, nearest first.
        let mut projections = vec![];
        let mut id = self.id;
        let keys = loop {
            match &all[id].kind {
                TransformationKind::Operator(OperatorSpec::Project { exprs, .. }) => {
                    projections.push(exprs);
                    id = all[id].inputs[0];
                }
                TransformationKind::Operator(OperatorSpec::GroupAggregate(g)) if g.changelog => {
                    break g.keys.clone();
                }
                _ => return mode,
            }
        };
        // The key columns' names up again through the projections.
        let mut names = keys;
        for exprs in projections.iter().rev() {
            let mut out = Vec::with_capacity(names.len());
            for n in &names {
                let passed = exprs.iter().find_map(|(e, name)| {
                    e.downcast_ref::<Column>()
                        .filter(|c| c.name() == n)
                        .map(|_| name.clone())
                });
                match passed {
                    Some(p) => out.push(p),
                    None => return mode,
                }
            }
            names = out;
        }
        self.upsert_by(&names)
    }
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}
