//! The stream graph: one node per source, operator and sink.

use std::fmt::Write;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use super::{ChainingStrategy, Partitioner, Transformation, TransformationKind};
use crate::config::WeirConfig;
use crate::error::{Result, WeirError};
use crate::spec::{OperatorSpec, SinkSpec, SourceSpec};
use crate::time::WatermarkStrategy;

/// What a stream node runs.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum StreamNodeKind {
    /// A source.
    Source {
        /// The source.
        spec: SourceSpec,
        /// How watermarks are derived.
        watermarks: WatermarkStrategy,
    },
    /// A single-input operator.
    Operator(OperatorSpec),
    /// A sink.
    Sink(SinkSpec),
}

/// A node of the stream graph.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StreamNode {
    /// Node id (index in [`StreamGraph::nodes`]).
    pub id: usize,
    /// Display name.
    pub name: String,
    /// Stable user id.
    pub uid: Option<String>,
    /// Resolved parallelism.
    pub parallelism: usize,
    /// What it runs.
    pub kind: StreamNodeKind,
    /// Output schema.
    pub schema: SchemaRef,
    /// Chaining behaviour.
    pub chaining: ChainingStrategy,
    /// Declared side outputs: tag and schema.
    pub side_outputs: Vec<(String, SchemaRef)>,
}

/// A data edge between two stream nodes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamEdge {
    /// Producer node.
    pub source: usize,
    /// Consumer node.
    pub target: usize,
    /// How records are distributed.
    pub partitioner: Partitioner,
    /// The producer's side output this edge carries; `None` is the main output.
    pub tag: Option<String>,
    /// Which input of the consumer the edge feeds (0 for single-input).
    pub target_input: usize,
}

/// Nodes and edges of a job before chaining.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StreamGraph {
    /// Job name.
    pub job_name: String,
    /// Job configuration.
    pub config: WeirConfig,
    /// Nodes in topological order.
    pub nodes: Vec<StreamNode>,
    /// Edges.
    pub edges: Vec<StreamEdge>,
}

impl StreamGraph {
    /// Lower recorded transformations into a stream graph: virtual
    /// transformations become edge partitioners, parallelism defaults resolve.
    pub fn from_transformations(
        job_name: &str,
        config: &WeirConfig,
        transformations: &[Transformation],
    ) -> Result<Self> {
        config.validate()?;
        let mut node_of: Vec<Option<usize>> = vec![None; transformations.len()];
        let mut nodes = Vec::new();
        let mut edges = Vec::new();
        for t in transformations {
            let kind = match &t.kind {
                TransformationKind::Source { spec, watermarks } => StreamNodeKind::Source {
                    spec: spec.clone(),
                    watermarks: watermarks.clone(),
                },
                TransformationKind::Operator(op) => StreamNodeKind::Operator(op.clone()),
                TransformationKind::Sink(s) => StreamNodeKind::Sink(s.clone()),
                TransformationKind::Partition(_)
                | TransformationKind::Union
                | TransformationKind::SideOutput(_) => continue,
            };
            let id = nodes.len();
            let parallelism = t.parallelism.unwrap_or(config.default_parallelism);
            if parallelism == 0 {
                return Err(WeirError::plan(format!(
                    "operator '{}' has parallelism 0",
                    t.name
                )));
            }
            if parallelism > config.max_parallelism as usize {
                return Err(WeirError::plan(format!(
                    "operator '{}' has parallelism {parallelism} above max_parallelism {}",
                    t.name, config.max_parallelism
                )));
            }
            node_of[t.id] = Some(id);
            nodes.push(StreamNode {
                id,
                name: t.name.clone(),
                uid: t.uid.clone(),
                parallelism,
                kind,
                schema: Arc::clone(&t.schema),
                chaining: t.chaining,
                side_outputs: t.side_outputs.clone(),
            });
            // A multi-input operator numbers its inputs; a sink or
            // single-input operator has one input however many edges feed it.
            let numbered =
                matches!(&t.kind, TransformationKind::Operator(op) if op.input_count() > 1);
            for (input_index, &input) in t.inputs.iter().enumerate() {
                let target_input = if numbered { input_index } else { 0 };
                let mut upstream = Vec::new();
                resolve_inputs(transformations, input, None, None, &mut upstream);
                for (src_t, partitioner, tag) in upstream {
                    let source = node_of[src_t].ok_or_else(|| {
                        WeirError::plan(format!("input of '{}' is not a physical node", t.name))
                    })?;
                    let (sp, tp) = (nodes[source].parallelism, parallelism);
                    let partitioner = match partitioner {
                        None if sp == tp => Partitioner::Forward,
                        None => Partitioner::Rebalance,
                        Some(Partitioner::Forward) if sp != tp => {
                            return Err(WeirError::plan(format!(
                                "forward edge from '{}' (parallelism {sp}) to '{}' (parallelism {tp}) needs equal parallelism",
                                nodes[source].name, t.name
                            )));
                        }
                        Some(p) => p,
                    };
                    edges.push(StreamEdge {
                        source,
                        target: id,
                        partitioner,
                        tag,
                        target_input,
                    });
                }
            }
        }
        if !nodes
            .iter()
            .any(|n| matches!(n.kind, StreamNodeKind::Sink(_)))
        {
            return Err(WeirError::plan(
                "the job has no sink; add one with sink_to before execute",
            ));
        }
        Ok(Self {
            job_name: job_name.to_string(),
            config: config.clone(),
            nodes,
            edges,
        })
    }

    /// Edges entering `node`.
    pub fn in_edges(&self, node: usize) -> impl Iterator<Item = &StreamEdge> {
        self.edges.iter().filter(move |e| e.target == node)
    }

    /// Main-output edges leaving `node` (side outputs excluded).
    pub fn main_out_edges(&self, node: usize) -> impl Iterator<Item = &StreamEdge> {
        self.edges
            .iter()
            .filter(move |e| e.source == node && e.tag.is_none())
    }

    /// Edges leaving `node`.
    pub fn out_edges(&self, node: usize) -> impl Iterator<Item = &StreamEdge> {
        self.edges.iter().filter(move |e| e.source == node)
    }

    /// Readable listing, one node per line with its inputs.
    pub fn explain(&self) -> String {
        let mut s = String::new();
        for n in &self.nodes {
            let inputs: Vec<String> = self
                .in_edges(n.id)
                .map(|e| match &e.tag {
                    Some(tag) => format!("#{} {} (side output '{tag}')", e.source, e.partitioner),
                    None => format!("#{} {}", e.source, e.partitioner),
                })
                .collect();
            let _ = write!(s, "  #{} {} [p={}]", n.id, n.name, n.parallelism);
            // What a source or sink reads or writes (files, row groups left
            // out by a filter, a topic …).
            match &n.kind {
                StreamNodeKind::Source { spec, .. } => {
                    let _ = write!(s, " {{{}}}", spec.describe());
                }
                StreamNodeKind::Sink(sink) => {
                    let _ = write!(s, " {{{}}}", sink.describe());
                }
                StreamNodeKind::Operator(_) => {}
            }
            if !inputs.is_empty() {
                let _ = write!(s, " <- {}", inputs.join(", "));
            }
            s.push('\n');
        }
        s
    }
}

/// Walk up through virtual transformations to the physical producers,
/// remembering the partitioner closest to the consumer and the side output
/// the records come from.
fn resolve_inputs(
    transformations: &[Transformation],
    id: usize,
    partitioner: Option<Partitioner>,
    tag: Option<String>,
    out: &mut Vec<(usize, Option<Partitioner>, Option<String>)>,
) {
    let t = &transformations[id];
    match &t.kind {
        TransformationKind::Partition(p) => {
            let p = partitioner.or_else(|| Some(p.clone()));
            for &i in &t.inputs {
                resolve_inputs(transformations, i, p.clone(), tag.clone(), out);
            }
        }
        TransformationKind::Union => {
            for &i in &t.inputs {
                resolve_inputs(transformations, i, partitioner.clone(), tag.clone(), out);
            }
        }
        TransformationKind::SideOutput(name) => {
            for &i in &t.inputs {
                resolve_inputs(
                    transformations,
                    i,
                    partitioner.clone(),
                    Some(name.clone()),
                    out,
                );
            }
        }
        _ => out.push((id, partitioner, tag)),
    }
}
