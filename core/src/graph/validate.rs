//! What a job graph must satisfy before anything of it is deployed.
//!
//! A job graph arrives as data (REST, `weir submit`) or is lowered from the
//! DataStream API and SQL; both go through [`JobGraph::validate`], so a graph
//! that passes cannot make a task panic on its shape: every window, key,
//! rowtime, aggregate and partitioner is checked against the schema that
//! actually reaches it, the configuration is in range, and the graph has no
//! cycle. Errors name the vertex (its label and name), the node and the field.

use arrow::datatypes::{DataType, Schema, SchemaRef};

use super::job_graph::vertex_label;
use super::{JobGraph, Partitioner, StreamNodeKind};
use crate::error::{Result, WeirError};
use crate::keys::is_hashable_key_type;
use crate::spec::{
    AggregatePhase, AggregateSpec, ChangelogMode, GroupAggregateSpec, OperatorSpec,
    ROW_KIND_COLUMN, SecondInput, is_changelog_schema,
};
use crate::time::{Trigger, WindowAssigner, check_timestamp_column, column_list};

/// Longest job name accepted, in bytes.
pub const MAX_JOB_NAME: usize = 1024;

fn bad(m: impl std::fmt::Display) -> WeirError {
    WeirError::plan(format!("malformed job graph: {m}"))
}

/// Checks of the configuration and the vertex graph: in-range settings, no
/// cycle, edges whose ends exist.
pub(crate) fn check_topology(job: &JobGraph) -> Result<()> {
    // The name is kept with the job's summary long after it ended.
    if job.job_name.len() > MAX_JOB_NAME {
        return Err(bad(format!(
            "job_name is {} bytes long; at most {MAX_JOB_NAME} are allowed",
            job.job_name.len()
        )));
    }
    job.config
        .validate()
        .map_err(|e| bad(format!("config: {e}")))?;
    let max = job.config.max_parallelism as usize;
    for v in &job.vertices {
        if v.parallelism > max {
            return Err(bad(format!(
                "vertex {} ('{}') has parallelism {} above max_parallelism {max}",
                v.id, v.name, v.parallelism
            )));
        }
    }
    // Kahn's algorithm: a vertex left over sits on a cycle (an edge 1 -> 1
    // included), which would wait for its own end forever.
    let n = job.vertices.len();
    let mut indegree = vec![0usize; n];
    for e in &job.edges {
        indegree[e.target] += 1;
    }
    let mut ready: Vec<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
    let mut seen = 0;
    while let Some(v) = ready.pop() {
        seen += 1;
        for (_, e) in job.out_edges(v) {
            indegree[e.target] -= 1;
            if indegree[e.target] == 0 {
                ready.push(e.target);
            }
        }
    }
    if seen != n {
        let on_cycle = (0..n).find(|&v| indegree[v] > 0).unwrap_or(0);
        return Err(bad(format!(
            "vertex {on_cycle} ('{}') is on a cycle of edges; a job graph must be acyclic",
            job.vertices[on_cycle].name
        )));
    }
    Ok(())
}

/// The schemas reaching each input of `node` (in input order), from the
/// node before it in its chain or from the edges into its vertex.
fn input_schemas(job: &JobGraph, vertex: usize, position: usize) -> Result<Vec<SchemaRef>> {
    let v = &job.vertices[vertex];
    if position > 0 {
        return Ok(vec![SchemaRef::clone(
            &job.nodes[v.nodes[position - 1]].schema,
        )]);
    }
    let mut inputs: Vec<(usize, SchemaRef)> = Vec::new();
    for (i, e) in job.in_edges(vertex) {
        let producer = &job.nodes[e.source_node];
        if !job.vertices[e.source].nodes.contains(&e.source_node) {
            return Err(bad(format!(
                "edge {i} leaves node {} which is not in vertex {}",
                e.source_node, e.source
            )));
        }
        let schema = match &e.tag {
            None => SchemaRef::clone(&producer.schema),
            Some(tag) => match producer.side_outputs.iter().find(|(t, _)| t == tag) {
                Some((_, s)) => SchemaRef::clone(s),
                None => {
                    return Err(bad(format!(
                        "edge {i} carries side output '{tag}', which node {} ('{}') does not declare",
                        producer.id, producer.name
                    )));
                }
            },
        };
        if let Partitioner::Hash { keys, key_indices } = &e.partitioner {
            check_hash_keys(&schema, keys, key_indices).map_err(|m| {
                bad(format!(
                    "edge {i} from vertex {} ('{}') to vertex {} ('{}'): {m}",
                    vertex_label(e.source),
                    job.vertices[e.source].name,
                    vertex_label(vertex),
                    v.name
                ))
            })?;
        }
        inputs.push((e.target_input, schema));
    }
    inputs.sort_by_key(|(input, _)| *input);
    // Several edges may feed the same input (a union); they must agree.
    let mut out: Vec<SchemaRef> = Vec::new();
    for (input, schema) in inputs {
        match out.get(input) {
            Some(first) => same_columns(first, &schema, &format!("input {input}"))
                .map_err(|m| bad(format!("vertex {vertex}: {m}")))?,
            None if input == out.len() => out.push(schema),
            None => {
                return Err(bad(format!(
                    "vertex {vertex} ('{}') gets input {input} but no input {}",
                    v.name,
                    out.len()
                )));
            }
        }
    }
    Ok(out)
}

fn check_hash_keys(
    schema: &Schema,
    keys: &[String],
    indices: &[usize],
) -> std::result::Result<(), String> {
    if keys.len() != indices.len() || keys.is_empty() {
        return Err(format!(
            "hash partitioner names {} keys but has {} key indices",
            keys.len(),
            indices.len()
        ));
    }
    for (name, &i) in keys.iter().zip(indices) {
        let Some(field) = schema.fields().get(i) else {
            return Err(format!(
                "hash key '{name}' at index {i}, but the stream has {} columns ({})",
                schema.fields().len(),
                column_list(schema)
            ));
        };
        if field.name() != name {
            return Err(format!(
                "hash key '{name}' at index {i}, where the stream has column '{}'",
                field.name()
            ));
        }
        if !is_hashable_key_type(field.data_type()) {
            return Err(format!(
                "hash key '{name}' has type {}, which cannot be a key",
                field.data_type()
            ));
        }
    }
    Ok(())
}

/// `want` and `got` have the same column names and types, in order.
fn same_columns(want: &Schema, got: &Schema, what: &str) -> std::result::Result<(), String> {
    let describe = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let equal = want.fields().len() == got.fields().len()
        && want
            .fields()
            .iter()
            .zip(got.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    if equal {
        Ok(())
    } else {
        Err(format!(
            "{what} is planned for columns [{}] but receives [{}]",
            describe(want),
            describe(got)
        ))
    }
}

fn keys_in(schema: &Schema, keys: &[String], what: &str) -> std::result::Result<(), String> {
    for k in keys {
        let f = schema.field_with_name(k).map_err(|_| {
            format!(
                "{what} key '{k}' is not a column; available columns: {}",
                column_list(schema)
            )
        })?;
        if !is_hashable_key_type(f.data_type()) {
            return Err(format!(
                "{what} key '{k}' has type {}, which cannot be a key",
                f.data_type()
            ));
        }
    }
    Ok(())
}

fn aggregates_in(schema: &Schema, aggs: &[AggregateSpec], output: &Schema) -> Result<()> {
    for a in aggs {
        let want = a.output_field(schema)?;
        match output.field_with_name(&a.alias) {
            Ok(f) if f.data_type() == want.data_type() => {}
            Ok(f) => {
                return Err(WeirError::plan(format!(
                    "aggregate {a} gives {} but the output declares '{}' as {}",
                    want.data_type(),
                    a.alias,
                    f.data_type()
                )));
            }
            Err(_) => {
                return Err(WeirError::plan(format!(
                    "aggregate {a} ('{}') is missing from the output columns ({})",
                    a.alias,
                    column_list(output)
                )));
            }
        }
    }
    Ok(())
}

/// Keys must leave the operator with the type they came in with.
fn keys_out(input: &Schema, keys: &[String], output: &Schema) -> std::result::Result<(), String> {
    for k in keys {
        let (Ok(i), Ok(o)) = (input.field_with_name(k), output.field_with_name(k)) else {
            return Err(format!(
                "key '{k}' is missing from the output columns ({})",
                column_list(output)
            ));
        };
        if i.data_type() != o.data_type() {
            return Err(format!(
                "key '{k}' is {} in the input but {} in the output",
                i.data_type(),
                o.data_type()
            ));
        }
    }
    Ok(())
}

fn trigger_ok(trigger: &Trigger) -> std::result::Result<(), String> {
    match *trigger {
        Trigger::OnWindowEnd => Ok(()),
        Trigger::Count { count: 0 } => Err("count trigger needs a positive count".into()),
        Trigger::Count { .. } => Ok(()),
        Trigger::ContinuousEventTime { interval }
        | Trigger::ContinuousProcessingTime { interval }
            if interval <= 0 =>
        {
            Err(format!(
                "trigger interval must be positive, got {interval} ms"
            ))
        }
        _ => Ok(()),
    }
}

/// One operator against the schemas reaching it and the schema it declares.
fn check_operator(spec: &OperatorSpec, inputs: &[SchemaRef], output: &Schema) -> Result<()> {
    let plan = |m: String| WeirError::plan(m);
    let embedded: Vec<&SchemaRef> = match spec {
        OperatorSpec::Filter { input_schema, .. } | OperatorSpec::Project { input_schema, .. } => {
            vec![input_schema]
        }
        OperatorSpec::MapBatches(_) => vec![],
        OperatorSpec::WindowAggregate(w) => vec![&w.input_schema],
        OperatorSpec::IntervalJoin(j) => vec![&j.left_schema, &j.right_schema],
        OperatorSpec::RegularJoin(j) => vec![&j.left_schema, &j.right_schema],
        OperatorSpec::TemporalJoin(j) => vec![&j.left_schema, &j.right_schema],
        OperatorSpec::Lateral(l) => vec![&l.input_schema],
        OperatorSpec::OverAggregate(o) => vec![&o.input_schema],
        OperatorSpec::MatchRecognize(m) => vec![&m.input_schema],
        OperatorSpec::KeyedProcess(p) => match &p.second {
            Some(s) => vec![&p.input_schema, &s.schema],
            None => vec![&p.input_schema],
        },
        OperatorSpec::WindowJoin(j) => vec![&j.left_schema, &j.right_schema],
        OperatorSpec::WindowProcess(p) => vec![&p.input_schema],
        OperatorSpec::GroupAggregate(g) => vec![&g.input_schema],
        OperatorSpec::TopN(t) => vec![&t.input_schema],
        OperatorSpec::Sort(t) => vec![&t.input_schema],
        OperatorSpec::LookupJoin(l) => vec![&l.input_schema],
        OperatorSpec::WindowAssign(w) => vec![&w.input_schema],
    };
    if inputs.len() != spec.input_count() {
        return Err(plan(format!(
            "the operator reads {} inputs but {} are connected",
            spec.input_count(),
            inputs.len()
        )));
    }
    for (i, (want, got)) in embedded.iter().zip(inputs).enumerate() {
        same_columns(want, got, &format!("input {i}")).map_err(plan)?;
    }
    let input = inputs.first().map(SchemaRef::as_ref);
    let Some(input) = input else { return Ok(()) };
    match spec {
        OperatorSpec::Filter { predicate, .. } => {
            let t = predicate.data_type(input)?;
            if t != DataType::Boolean {
                return Err(plan(format!(
                    "filter predicate {predicate} is {t}, not BOOLEAN"
                )));
            }
            same_columns(output, input, "the output").map_err(plan)?;
        }
        OperatorSpec::Project { exprs, .. } => {
            if exprs.len() != output.fields().len() {
                return Err(plan(format!(
                    "projection computes {} columns but declares {}",
                    exprs.len(),
                    output.fields().len()
                )));
            }
            for ((e, name), f) in exprs.iter().zip(output.fields()) {
                let t = e.data_type(input)?;
                if f.name() != name || *f.data_type() != t {
                    return Err(plan(format!(
                        "projection column '{name}' ({e}) is {t} but the output declares '{}' {}",
                        f.name(),
                        f.data_type()
                    )));
                }
            }
        }
        OperatorSpec::MapBatches(_) => {}
        OperatorSpec::WindowAggregate(w) => {
            w.assigner.validate()?;
            trigger_ok(&w.trigger).map_err(plan)?;
            if w.allowed_lateness < 0 {
                return Err(plan(format!(
                    "allowed lateness must not be negative, got {} ms",
                    w.allowed_lateness
                )));
            }
            if let Some(rt) = &w.rowtime {
                check_timestamp_column(input, rt)?;
            } else if !w.processing_time && !matches!(w.assigner, WindowAssigner::Count { .. }) {
                return Err(plan("an event-time window needs a rowtime column".into()));
            }
            keys_in(input, &w.keys, "window").map_err(plan)?;
            keys_out(input, &w.keys, output).map_err(plan)?;
            aggregates_in(input, &w.aggregates, output)?;
        }
        OperatorSpec::GroupAggregate(g) => {
            keys_in(input, &g.keys, "group").map_err(plan)?;
            keys_out(input, &g.keys, output).map_err(plan)?;
            let rows = g.rows_schema();
            if g.phase != AggregatePhase::Single {
                if g.changelog || g.retractions || g.upsert {
                    return Err(plan(
                        "a two-phase group aggregation runs in batch mode over an insert-only input"
                            .into(),
                    ));
                }
                if let Some(a) = g.aggregates.iter().find(|a| !a.splits_into_phases()) {
                    return Err(plan(format!(
                        "{a} does not split into a local and a global phase"
                    )));
                }
            }
            match &g.phase {
                AggregatePhase::Local => {
                    let partial = GroupAggregateSpec::partial_schema(&g.keys, &g.aggregates, rows)?;
                    same_columns(&partial, output, "the local aggregation's output")
                        .map_err(plan)?;
                }
                AggregatePhase::Global { .. } => {
                    let partial = GroupAggregateSpec::partial_schema(&g.keys, &g.aggregates, rows)?;
                    same_columns(&partial, input, "the global aggregation's input")
                        .map_err(plan)?;
                    aggregates_in(rows, &g.aggregates, output)?;
                }
                AggregatePhase::Single => aggregates_in(input, &g.aggregates, output)?,
            }
        }
        OperatorSpec::TopN(t) => {
            if t.limit == 0 {
                return Err(plan("top_n needs a limit of at least 1".into()));
            }
            if t.order.is_empty() {
                return Err(plan("top_n needs an ordering".into()));
            }
            keys_in(input, &t.keys, "top_n").map_err(plan)?;
            for (c, _, _) in &t.order {
                input.field_with_name(c).map_err(|_| {
                    plan(format!(
                        "top_n orders by '{c}', which is not a column; available columns: {}",
                        column_list(input)
                    ))
                })?;
            }
            keys_out(input, &t.keys, output).map_err(plan)?;
        }
        OperatorSpec::Sort(t) => {
            if crate::spec::is_changelog_schema(input) {
                return Err(plan(
                    "a sort takes an insert-only input (batch mode's final rows)".into(),
                ));
            }
            for (c, _, _) in &t.order {
                input.field_with_name(c).map_err(|_| {
                    plan(format!(
                        "the sort orders by '{c}', which is not a column; available columns: {}",
                        column_list(input)
                    ))
                })?;
            }
            same_columns(input, output, "the sort's output").map_err(plan)?;
        }
        OperatorSpec::WindowAssign(w) => {
            w.assigner.validate()?;
            check_timestamp_column(input, &w.time_column)?;
        }
        OperatorSpec::LookupJoin(l) => {
            if l.keys.len() != l.table_keys.len() || l.keys.is_empty() {
                return Err(plan(format!(
                    "lookup join has {} stream keys and {} table keys",
                    l.keys.len(),
                    l.table_keys.len()
                )));
            }
            keys_in(input, &l.keys, "lookup join").map_err(plan)?;
            keys_in(&l.table_schema, &l.table_keys, "lookup table").map_err(plan)?;
            if let Some(b) = l
                .table
                .iter()
                .find(|b| same_columns(&l.table_schema, &b.schema(), "lookup table").is_err())
            {
                same_columns(&l.table_schema, &b.schema(), "the lookup table").map_err(plan)?;
            }
        }
        OperatorSpec::KeyedProcess(p) => {
            keys_in(input, &p.keys, "process").map_err(plan)?;
            if let (Some(SecondInput { keys: Some(k), .. }), Some(second)) =
                (&p.second, inputs.get(1))
            {
                keys_in(second, k, "second input").map_err(plan)?;
            }
        }
        OperatorSpec::WindowProcess(p) => {
            p.assigner.validate()?;
            check_timestamp_column(input, &p.rowtime)?;
            keys_in(input, &p.keys, "window").map_err(plan)?;
        }
        OperatorSpec::IntervalJoin(j) => {
            if j.lower > j.upper {
                return Err(plan(format!(
                    "interval join lower bound {} ms is above its upper bound {} ms",
                    j.lower, j.upper
                )));
            }
            two_sided(
                &inputs[0],
                &inputs[1],
                (&j.left_keys, &j.right_keys),
                (&j.left_rowtime, &j.right_rowtime),
            )?;
        }
        OperatorSpec::MatchRecognize(m) => {
            m.validate()?;
            same_columns(output, m.output_schema()?.as_ref(), "the output").map_err(plan)?;
        }
        OperatorSpec::OverAggregate(o) => {
            o.validate()?;
            same_columns(output, o.output_schema()?.as_ref(), "the output").map_err(plan)?;
        }
        OperatorSpec::RegularJoin(j) => {
            j.validate()?;
            same_columns(output, &j.output_schema(), "the output").map_err(plan)?;
            if let Some(r) = &j.residual {
                let t = r.data_type(&j.pair_schema())?;
                if t != DataType::Boolean {
                    return Err(plan(format!("join condition {r} is {t}, not BOOLEAN")));
                }
            }
        }
        OperatorSpec::Lateral(l) => {
            same_columns(output, l.output_schema()?.as_ref(), "the output").map_err(plan)?;
        }
        OperatorSpec::TemporalJoin(j) => {
            j.validate()?;
            same_columns(output, &j.output_schema(), "the output").map_err(plan)?;
            if let Some(r) = &j.residual {
                let t = r.data_type(&j.output_schema())?;
                if t != DataType::Boolean {
                    return Err(plan(format!("join condition {r} is {t}, not BOOLEAN")));
                }
            }
        }
        OperatorSpec::WindowJoin(j) => {
            j.assigner.validate()?;
            two_sided(
                &inputs[0],
                &inputs[1],
                (&j.left_keys, &j.right_keys),
                (&j.left_rowtime, &j.right_rowtime),
            )?;
        }
    }
    Ok(())
}

/// A source's rows end with the row kind exactly when it declares a
/// changelog.
fn source_layout(spec: &crate::spec::SourceSpec) -> Result<()> {
    let what = format!("the {} source's rows", spec.connector().connector);
    layout_agrees(&spec.changelog_mode(), &spec.schema(), &what)
}

/// The output layout agrees with the mode the operator declares for its
/// inputs.
fn changelog_layout(spec: &OperatorSpec, inputs: &[SchemaRef], output: &Schema) -> Result<()> {
    let modes: Vec<ChangelogMode> = inputs
        .iter()
        .map(|s| {
            if is_changelog_schema(s) {
                ChangelogMode::Retract
            } else {
                ChangelogMode::Append
            }
        })
        .collect();
    layout_agrees(
        &spec.changelog_mode(&modes, output),
        output,
        "the operator's output",
    )
}

/// Rows of `mode` end with the row kind when updating and have none when
/// append-only, and no other column takes the reserved name.
fn layout_agrees(mode: &ChangelogMode, schema: &Schema, what: &str) -> Result<()> {
    let ends = is_changelog_schema(schema);
    let reserved = schema
        .fields()
        .iter()
        .filter(|f| f.name() == ROW_KIND_COLUMN)
        .count();
    if mode.is_updating() != ends || reserved > usize::from(ends) {
        return Err(WeirError::plan(format!(
            "{what} are {mode}, so they must {}end with '{ROW_KIND_COLUMN}' Int8 (and have no \
             other column of that name); they have ({})",
            if mode.is_updating() { "" } else { "not " },
            column_list(schema)
        )));
    }
    Ok(())
}

fn two_sided(
    left: &Schema,
    right: &Schema,
    keys: (&[String], &[String]),
    rowtimes: (&str, &str),
) -> Result<()> {
    let plan = WeirError::plan;
    if keys.0.len() != keys.1.len() || keys.0.is_empty() {
        return Err(plan(format!(
            "join has {} left keys and {} right keys",
            keys.0.len(),
            keys.1.len()
        )));
    }
    keys_in(left, keys.0, "left").map_err(plan)?;
    keys_in(right, keys.1, "right").map_err(plan)?;
    for (l, r) in keys.0.iter().zip(keys.1) {
        let (lt, rt) = (
            left.field_with_name(l)?.data_type(),
            right.field_with_name(r)?.data_type(),
        );
        if lt != rt {
            return Err(plan(format!(
                "join key '{l}' is {lt} on the left but '{r}' is {rt} on the right"
            )));
        }
    }
    check_timestamp_column(left, rowtimes.0)?;
    check_timestamp_column(right, rowtimes.1)?;
    Ok(())
}

/// Every node against what reaches it; see the module docs.
pub(crate) fn check_nodes(job: &JobGraph) -> Result<()> {
    for v in &job.vertices {
        for (position, &n) in v.nodes.iter().enumerate() {
            let node = &job.nodes[n];
            let inputs = input_schemas(job, v.id, position)?;
            let at = || {
                format!(
                    "vertex {} ('{}'), node {} ('{}')",
                    vertex_label(v.id),
                    v.name,
                    node.id,
                    node.name
                )
            };
            let result = match &node.kind {
                StreamNodeKind::Source { spec, watermarks } => {
                    if !inputs.is_empty() {
                        return Err(bad(format!("{}: a source has no inputs", at())));
                    }
                    spec.validate()
                        .and_then(|_| watermarks.validate(&spec.schema()))
                        .and_then(|_| {
                            same_columns(&node.schema, &spec.schema(), "the source's output")
                                .map_err(WeirError::plan)
                        })
                        .and_then(|_| source_layout(spec))
                }
                StreamNodeKind::Operator(spec) => check_operator(spec, &inputs, &node.schema)
                    .and_then(|_| changelog_layout(spec, &inputs, &node.schema)),
                StreamNodeKind::Sink(_) => match inputs.len() {
                    1 => Ok(()),
                    k => Err(WeirError::plan(format!(
                        "a sink reads one input, {k} are connected"
                    ))),
                },
            };
            result.map_err(|e| bad(format!("{}: {}", at(), strip_plan(&e))))?;
        }
    }
    Ok(())
}

/// The message of a planning error without its kind prefix, so nested
/// context reads as one sentence.
fn strip_plan(e: &WeirError) -> String {
    match e {
        WeirError::Plan(m) => m.clone(),
        other => other.to_string(),
    }
}

impl JobGraph {
    /// Check every source and sink against the connectors a program has:
    /// each names one of them, with options it takes and a planned form it
    /// reads back. Errors name the node.
    pub fn check_connectors(
        &self,
        connectors: &dyn crate::connector::ConnectorPlanner,
    ) -> Result<()> {
        for v in &self.vertices {
            for &n in &v.nodes {
                let Some(node) = self.nodes.get(n) else {
                    continue;
                };
                let checked = match &node.kind {
                    StreamNodeKind::Source { spec, .. } => {
                        connectors.check_source(spec.connector())
                    }
                    StreamNodeKind::Sink(sink) => connectors.check_sink(sink),
                    StreamNodeKind::Operator(_) => Ok(()),
                };
                checked.map_err(|e| {
                    bad(format!(
                        "vertex {} ('{}'), node {} ('{}'): {e}",
                        vertex_label(v.id),
                        v.name,
                        node.id,
                        node.name
                    ))
                })?;
            }
        }
        Ok(())
    }
}
