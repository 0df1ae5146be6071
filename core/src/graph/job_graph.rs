//! The job graph: stream nodes fused into chains.

use std::fmt::Write;

use super::{ChainingStrategy, ExecutionGraph, Partitioner, StreamGraph, StreamNode};
use crate::config::{RuntimeMode, WeirConfig};
use crate::error::{Result, WeirError};

/// A chain of operators that runs as one task per subtask.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct JobVertex {
    /// Vertex id (index in [`JobGraph::vertices`]).
    pub id: usize,
    /// Names of the chained operators joined by ` -> `.
    pub name: String,
    /// Stream node ids of the chain, head first.
    pub nodes: Vec<usize>,
    /// Parallelism of every operator of the chain.
    pub parallelism: usize,
}

/// A network edge between two vertices.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobEdge {
    /// Producer vertex.
    pub source: usize,
    /// Consumer vertex.
    pub target: usize,
    /// How records are distributed.
    pub partitioner: Partitioner,
    /// The stream node (inside the producer vertex) that emits the records.
    pub source_node: usize,
    /// The side output carried; `None` is the main output of the chain's tail.
    pub tag: Option<String>,
    /// Which input of the consumer vertex's head the edge feeds.
    pub target_input: usize,
}

/// A job after chaining: what gets scheduled.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct JobGraph {
    /// Job name.
    pub job_name: String,
    /// Job configuration (runtime mode resolved).
    pub config: WeirConfig,
    /// The stream nodes the vertices refer to.
    pub nodes: Vec<StreamNode>,
    /// The chains.
    pub vertices: Vec<JobVertex>,
    /// Network edges.
    pub edges: Vec<JobEdge>,
}

impl JobGraph {
    /// Fuse stream nodes into chains. An edge is chained when it is forward,
    /// both ends have equal parallelism, the consumer has a single input and
    /// the producer a single output, and neither end opted out of chaining.
    pub fn from_stream_graph(graph: &StreamGraph) -> Result<Self> {
        let config = graph.config.clone();
        let all_bounded = graph.nodes.iter().all(|n| match &n.kind {
            super::StreamNodeKind::Source { spec, .. } => spec.is_bounded(),
            _ => true,
        });
        if config.runtime_mode == RuntimeMode::Batch && !all_bounded {
            return Err(WeirError::plan(
                "batch mode needs every source to be bounded; an unbounded source was found",
            ));
        }
        let mut vertex_of = vec![usize::MAX; graph.nodes.len()];
        let mut vertices: Vec<JobVertex> = Vec::new();
        for node in &graph.nodes {
            let ins: Vec<_> = graph.in_edges(node.id).collect();
            let chained_to = match ins.as_slice() {
                [edge]
                    if edge.tag.is_none()
                        && chainable(graph, edge.source, node, &edge.partitioner) =>
                {
                    Some(vertex_of[edge.source])
                }
                _ => None,
            };
            match chained_to {
                Some(v) => {
                    vertices[v].nodes.push(node.id);
                    vertex_of[node.id] = v;
                }
                None => {
                    vertex_of[node.id] = vertices.len();
                    vertices.push(JobVertex {
                        id: vertices.len(),
                        name: String::new(),
                        nodes: vec![node.id],
                        parallelism: node.parallelism,
                    });
                }
            }
        }
        for v in &mut vertices {
            v.name = v
                .nodes
                .iter()
                .map(|&n| graph.nodes[n].name.as_str())
                .collect::<Vec<_>>()
                .join(" -> ");
        }
        let edges = graph
            .edges
            .iter()
            .filter(|e| vertex_of[e.source] != vertex_of[e.target])
            .map(|e| JobEdge {
                source: vertex_of[e.source],
                target: vertex_of[e.target],
                partitioner: e.partitioner.clone(),
                source_node: e.source,
                tag: e.tag.clone(),
                target_input: e.target_input,
            })
            .collect();
        let job = Self {
            job_name: graph.job_name.clone(),
            config,
            nodes: graph.nodes.clone(),
            vertices,
            edges,
        };
        job.validate()?;
        Ok(job)
    }

    /// Expand every vertex to its parallelism.
    pub fn execution_graph(&self) -> ExecutionGraph {
        ExecutionGraph::from_job_graph(self)
    }

    /// Edges entering `vertex`.
    pub fn in_edges(&self, vertex: usize) -> impl Iterator<Item = (usize, &JobEdge)> {
        self.edges
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.target == vertex)
    }

    /// Edges leaving `vertex`.
    pub fn out_edges(&self, vertex: usize) -> impl Iterator<Item = (usize, &JobEdge)> {
        self.edges
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.source == vertex)
    }

    /// Readable listing of vertices and edges.
    pub fn explain(&self) -> String {
        let mut s = String::new();
        for v in &self.vertices {
            let _ = write!(
                s,
                "  {} {} [p={}]",
                vertex_label(v.id),
                v.name,
                v.parallelism
            );
            let inputs: Vec<String> = self
                .in_edges(v.id)
                .map(|(_, e)| match &e.tag {
                    Some(tag) => format!(
                        "{} {} (side output '{tag}')",
                        vertex_label(e.source),
                        e.partitioner
                    ),
                    None => format!("{} {}", vertex_label(e.source), e.partitioner),
                })
                .collect();
            if !inputs.is_empty() {
                let _ = write!(s, " <- {}", inputs.join(", "));
            }
            s.push('\n');
        }
        s
    }
}

/// `A`, `B`, … `Z`, `AA`, … — the labels used in plans.
pub fn vertex_label(id: usize) -> String {
    let mut n = id;
    let mut label = String::new();
    loop {
        label.insert(0, (b'A' + (n % 26) as u8) as char);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    label
}

fn chainable(graph: &StreamGraph, source: usize, target: &StreamNode, p: &Partitioner) -> bool {
    let up = &graph.nodes[source];
    graph.config.chaining_enabled
        && *p == Partitioner::Forward
        && up.parallelism == target.parallelism
        && graph.main_out_edges(source).count() == 1
        && up.chaining != ChainingStrategy::Never
        && target.chaining == ChainingStrategy::Always
}
