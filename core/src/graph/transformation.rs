//! Transformations: what the DataStream API records, one per API call.

use arrow::datatypes::{Schema, SchemaRef};

use super::Partitioner;
use crate::changelog::ChangelogMode;
use crate::spec::{OperatorSpec, SinkSpec, SourceSpec};
use crate::time::WatermarkStrategy;

/// Whether an operator may be fused with its neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum ChainingStrategy {
    /// Chain with predecessor and successors where the edge allows it.
    #[default]
    Always,
    /// Start a new chain here; successors may still chain to it.
    Head,
    /// Never chain with anything.
    Never,
}

/// What a transformation does.
#[derive(Debug, Clone)]
pub enum TransformationKind {
    /// A source with its watermark strategy.
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
    /// Virtual: changes how its input is partitioned (key_by, rebalance, …).
    Partition(Partitioner),
    /// Virtual: merges its inputs into one stream.
    Union,
    /// Virtual: the named side output of its input operator.
    SideOutput(String),
}

/// One recorded API call.
#[derive(Debug, Clone)]
pub struct Transformation {
    /// Position in the environment's list; inputs always have smaller ids.
    pub id: usize,
    /// Display name.
    pub name: String,
    /// Stable user id (names the operator's state across job versions).
    pub uid: Option<String>,
    /// Explicit parallelism; `None` takes the job default.
    pub parallelism: Option<usize>,
    /// What it does.
    pub kind: TransformationKind,
    /// Input transformation ids.
    pub inputs: Vec<usize>,
    /// Schema of the output.
    pub schema: SchemaRef,
    /// Chaining behaviour.
    pub chaining: ChainingStrategy,
    /// Side outputs the operator declares: tag and schema.
    pub side_outputs: Vec<(String, SchemaRef)>,
    /// What the output carries, as the transformation declares it
    /// ([`TransformationKind::changelog_mode`]).
    pub changelog: ChangelogMode,
}

impl TransformationKind {
    /// The changelog mode of the output, given the inputs' modes and the
    /// output schema: what each kind of transformation declares.
    pub fn changelog_mode(&self, inputs: &[ChangelogMode], output: &Schema) -> ChangelogMode {
        match self {
            TransformationKind::Source { spec, .. } => spec.changelog_mode(),
            TransformationKind::Operator(o) => o.changelog_mode(inputs, output),
            TransformationKind::Partition(_) | TransformationKind::Union => {
                ChangelogMode::merge(inputs)
            }
            TransformationKind::Sink(_) | TransformationKind::SideOutput(_) => {
                ChangelogMode::Append
            }
        }
    }
}

impl Transformation {
    /// Virtual transformations (partition, union) become edges, not nodes.
    pub fn is_virtual(&self) -> bool {
        matches!(
            self.kind,
            TransformationKind::Partition(_)
                | TransformationKind::Union
                | TransformationKind::SideOutput(_)
        )
    }
}
