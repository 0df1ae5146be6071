//! The execution environment: where a job's transformations are recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow::datatypes::SchemaRef;

use super::stream::DataStream;
use crate::config::{RuntimeMode, WeirConfig};
use crate::connector::{ConnectorPlanner, Options, TableDescriptor};
use crate::error::{Result, WeirError};
use crate::graph::{
    ChainingStrategy, JobClient, JobExecutor, JobGraph, JobResult, StreamGraph, Transformation,
    TransformationKind,
};
use crate::spec::SourceSpec;
use crate::time::WatermarkStrategy;

#[derive(Default)]
struct EnvState {
    config: WeirConfig,
    transformations: Vec<Transformation>,
    /// While sub-plan reuse is on: the transformations added so far that a
    /// later identical one is, by their description.
    reuse: Option<HashMap<String, usize>>,
}

/// Records a job's transformations; nothing runs before [`Self::execute`].
///
/// Cloning gives another handle to the same environment.
#[derive(Clone)]
pub struct StreamExecutionEnvironment {
    state: Arc<Mutex<EnvState>>,
    executor: Option<Arc<dyn JobExecutor>>,
    connectors: Option<Arc<dyn ConnectorPlanner>>,
}

impl StreamExecutionEnvironment {
    /// A new environment with `config` and no executor (explain-only until
    /// [`Self::with_executor`] is called; `weir_worker::local_environment`
    /// gives one that runs in-process).
    pub fn new(config: WeirConfig) -> Self {
        Self {
            state: Arc::new(Mutex::new(EnvState {
                config,
                transformations: vec![],
                reuse: None,
            })),
            executor: None,
            connectors: None,
        }
    }

    /// Plan connectors (`from_connector`, `sink_to_connector`) with
    /// `connectors`, which also checks every source added.
    pub fn with_connectors(mut self, connectors: Arc<dyn ConnectorPlanner>) -> Self {
        self.connectors = Some(connectors);
        self
    }

    /// The connectors this environment plans with.
    pub fn connectors(&self) -> Result<&Arc<dyn ConnectorPlanner>> {
        self.connectors.as_ref().ok_or_else(|| {
            WeirError::plan(
                "this environment has no connectors; create it with weir_worker::local_environment()",
            )
        })
    }

    /// Plan the source of `connector` with `options` (Flink's `WITH`
    /// options, checked against what the connector declares) and, when
    /// given, the columns it must produce; without them the connector
    /// gives its own (a Parquet file's, Nexmark's).
    pub fn connector_source<K: Into<String>, V: Into<String>>(
        &self,
        connector: &str,
        options: impl IntoIterator<Item = (K, V)>,
        schema: Option<SchemaRef>,
        name: &str,
    ) -> Result<SourceSpec> {
        let mut options: Options = options
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        options.insert("connector".into(), connector.to_string());
        self.connectors()?
            .plan_source(&TableDescriptor::new(name, options, schema))
    }

    /// Add the source of `connector` with `options`, producing the
    /// connector's own columns (see [`Self::connector_source`]).
    pub fn from_connector<K: Into<String>, V: Into<String>>(
        &self,
        connector: &str,
        options: impl IntoIterator<Item = (K, V)>,
        watermarks: WatermarkStrategy,
        name: &str,
    ) -> Result<DataStream> {
        let spec = self.connector_source(connector, options, None, name)?;
        self.from_source(spec, watermarks, name)
    }

    /// Use `executor` for [`Self::execute`].
    pub fn with_executor(mut self, executor: Arc<dyn JobExecutor>) -> Self {
        self.executor = Some(executor);
        self
    }

    fn lock(&self) -> MutexGuard<'_, EnvState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Default parallelism of operators that do not set one.
    pub fn set_parallelism(&self, parallelism: usize) -> &Self {
        self.lock().config.default_parallelism = parallelism;
        self
    }

    /// Number of key groups.
    pub fn set_max_parallelism(&self, max_parallelism: u32) -> &Self {
        self.lock().config.max_parallelism = max_parallelism;
        self
    }

    /// Streaming or batch.
    pub fn set_runtime_mode(&self, mode: RuntimeMode) -> &Self {
        self.lock().config.runtime_mode = mode;
        self
    }

    /// Run every operator in its own task.
    pub fn disable_operator_chaining(&self) -> &Self {
        self.lock().config.chaining_enabled = false;
        self
    }

    /// Change the configuration in place.
    pub fn configure(&self, f: impl FnOnce(&mut WeirConfig)) -> &Self {
        f(&mut self.lock().config);
        self
    }

    /// The current configuration.
    pub fn config(&self) -> WeirConfig {
        self.lock().config.clone()
    }

    /// Add a source. The watermark strategy's event-time column becomes the
    /// stream's rowtime, which event-time windows use.
    pub fn from_source(
        &self,
        spec: impl Into<SourceSpec>,
        watermarks: WatermarkStrategy,
        name: &str,
    ) -> Result<DataStream> {
        let spec = spec.into();
        let context =
            |e: WeirError| WeirError::plan(format!("source '{name}' [{}]: {e}", spec.describe()));
        spec.validate().map_err(context)?;
        if let Some(connectors) = &self.connectors {
            connectors.check_source(spec.connector()).map_err(context)?;
        }
        let schema = spec.schema();
        watermarks.validate(&schema).map_err(context)?;
        let rowtime = watermarks.timestamp_column.clone();
        let id = self.add(
            format!("Source: {name}"),
            TransformationKind::Source { spec, watermarks },
            vec![],
            Arc::clone(&schema),
        );
        Ok(DataStream::new(self.clone(), id, schema, rowtime))
    }

    /// While on, an operator, partitioning, union or side output added
    /// with the same inputs, the same output schema and the same
    /// description as one added before (since reuse was turned on) is that
    /// one: its stream is computed once and read by both consumers. The
    /// SQL planner turns it on for the queries of a job (Flink's
    /// `table.optimizer.reuse-sub-plan-enabled`), so a subquery written
    /// twice (Nexmark q5's window aggregation) runs once. Sources and
    /// sinks are never merged; operators whose description cannot be
    /// written down (closures) neither.
    pub fn set_reuse_identical(&self, on: bool) -> &Self {
        let mut state = self.lock();
        match (on, state.reuse.is_some()) {
            (true, false) => state.reuse = Some(HashMap::new()),
            (false, true) => state.reuse = None,
            _ => {}
        }
        self
    }

    pub(crate) fn add(
        &self,
        name: String,
        kind: TransformationKind,
        inputs: Vec<usize>,
        schema: SchemaRef,
    ) -> usize {
        let mut state = self.lock();
        let reuse_key = state
            .reuse
            .is_some()
            .then(|| reuse_key(&kind, &inputs, &schema))
            .flatten();
        if let Some(key) = &reuse_key
            && let Some(&id) = state.reuse.as_ref().and_then(|r| r.get(key))
        {
            return id;
        }
        let id = state.transformations.len();
        if let (Some(key), Some(reuse)) = (reuse_key, state.reuse.as_mut()) {
            reuse.insert(key, id);
        }
        let modes: Vec<_> = inputs
            .iter()
            .map(|&i| state.transformations[i].changelog.clone())
            .collect();
        let changelog = kind.changelog_mode(&modes, &schema);
        state.transformations.push(Transformation {
            id,
            name,
            uid: None,
            parallelism: None,
            kind,
            inputs,
            schema,
            chaining: ChainingStrategy::Always,
            side_outputs: vec![],
            changelog,
        });
        id
    }

    pub(crate) fn update(&self, id: usize, f: impl FnOnce(&mut Transformation)) {
        f(&mut self.lock().transformations[id]);
    }

    pub(crate) fn transformation(&self, id: usize) -> Transformation {
        self.lock().transformations[id].clone()
    }

    /// The recorded transformations.
    pub fn transformations(&self) -> Vec<Transformation> {
        self.lock().transformations.clone()
    }

    /// Lower to a stream graph.
    pub fn stream_graph(&self, job_name: &str) -> Result<StreamGraph> {
        let state = self.lock();
        StreamGraph::from_transformations(job_name, &state.config, &state.transformations)
    }

    /// Lower to a job graph (chained).
    pub fn job_graph(&self, job_name: &str) -> Result<JobGraph> {
        JobGraph::from_stream_graph(&self.stream_graph(job_name)?)
    }

    /// The stream graph, job graph and execution graph, printed readably.
    pub fn explain(&self, job_name: &str) -> Result<String> {
        let stream = self.stream_graph(job_name)?;
        let job = JobGraph::from_stream_graph(&stream)?;
        let exec = job.execution_graph();
        Ok(format!(
            "== Stream graph ==\n{}== Job graph ==\n{}== Execution graph ==\n{}",
            stream.explain(),
            job.explain(),
            exec.explain(&job)
        ))
    }

    fn executor(&self) -> Result<&Arc<dyn JobExecutor>> {
        self.executor.as_ref().ok_or_else(|| {
            WeirError::plan(
                "this environment has no executor; create it with weir_worker::local_environment()",
            )
        })
    }

    /// Lower the job and run it to its end with the environment's executor.
    /// The recorded transformations stay, so a second call runs the job again.
    pub fn execute(&self, job_name: &str) -> Result<JobResult> {
        let job = self.job_graph(job_name)?;
        self.executor()?.execute(job)
    }

    /// Lower the job and start it; the returned client cancels or awaits it.
    pub fn execute_async(&self, job_name: &str) -> Result<Box<dyn JobClient>> {
        let job = self.job_graph(job_name)?;
        self.executor()?.submit(job)
    }
}

/// What makes two transformations the same stream, for sub-plan reuse:
/// their kind with its whole description, inputs and schema. `None` for
/// sources, sinks and operators that cannot be described (closures).
fn reuse_key(kind: &TransformationKind, inputs: &[usize], schema: &SchemaRef) -> Option<String> {
    let what = match kind {
        TransformationKind::Operator(spec) => serde_json::to_string(spec).ok()?,
        TransformationKind::Partition(p) => format!("partition {}", serde_json::to_string(p).ok()?),
        TransformationKind::Union => "union".to_string(),
        TransformationKind::SideOutput(tag) => format!("side output {tag:?}"),
        TransformationKind::Source { .. } | TransformationKind::Sink(_) => return None,
    };
    Some(format!("{inputs:?} {schema:?} {what}"))
}
