//! The execution graph: every vertex expanded to its parallel subtasks.

use std::fmt::Write;

use super::job_graph::vertex_label;
use super::{JobGraph, Partitioner};

/// One parallel instance of a job vertex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionVertex {
    /// Job vertex id.
    pub vertex: usize,
    /// Subtask index in `0..parallelism`.
    pub subtask: usize,
    /// Parallelism of the vertex.
    pub parallelism: usize,
    /// `name (i+1/p)`, as Flink names subtasks.
    pub name: String,
}

/// One channel: a producer subtask feeding a consumer subtask along a job edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionEdge {
    /// Job edge index.
    pub job_edge: usize,
    /// Producer subtask.
    pub producer: usize,
    /// Consumer subtask.
    pub consumer: usize,
}

/// Subtasks and channels of a job.
#[derive(Debug, Clone)]
pub struct ExecutionGraph {
    /// Subtasks, grouped by vertex in vertex order.
    pub subtasks: Vec<ExecutionVertex>,
    /// Channels, grouped by job edge, then producer, then consumer.
    pub channels: Vec<ExecutionEdge>,
}

impl ExecutionGraph {
    /// Expand `job`.
    pub fn from_job_graph(job: &JobGraph) -> Self {
        let mut subtasks = Vec::new();
        for v in &job.vertices {
            for i in 0..v.parallelism {
                subtasks.push(ExecutionVertex {
                    vertex: v.id,
                    subtask: i,
                    parallelism: v.parallelism,
                    name: format!("{} ({}/{})", v.name, i + 1, v.parallelism),
                });
            }
        }
        let mut channels = Vec::new();
        for (idx, e) in job.edges.iter().enumerate() {
            let (pp, cp) = (
                job.vertices[e.source].parallelism,
                job.vertices[e.target].parallelism,
            );
            for producer in 0..pp {
                if e.partitioner == Partitioner::Forward {
                    channels.push(ExecutionEdge {
                        job_edge: idx,
                        producer,
                        consumer: producer,
                    });
                } else {
                    for consumer in 0..cp {
                        channels.push(ExecutionEdge {
                            job_edge: idx,
                            producer,
                            consumer,
                        });
                    }
                }
            }
        }
        Self { subtasks, channels }
    }

    /// Readable listing: subtasks per vertex and channel counts per edge.
    pub fn explain(&self, job: &JobGraph) -> String {
        let mut s = String::new();
        for v in &job.vertices {
            let ids: Vec<String> = self
                .subtasks
                .iter()
                .filter(|t| t.vertex == v.id)
                .map(|t| format!("{}.{}", vertex_label(v.id), t.subtask))
                .collect();
            let _ = writeln!(s, "  {}: {}", vertex_label(v.id), ids.join(" "));
        }
        for (idx, e) in job.edges.iter().enumerate() {
            let n = self.channels.iter().filter(|c| c.job_edge == idx).count();
            let _ = writeln!(
                s,
                "  {} -> {} {}: {n} channels ({}x{})",
                vertex_label(e.source),
                vertex_label(e.target),
                e.partitioner,
                job.vertices[e.source].parallelism,
                if e.partitioner == Partitioner::Forward {
                    1
                } else {
                    job.vertices[e.target].parallelism
                }
            );
        }
        s
    }
}
