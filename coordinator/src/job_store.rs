//! The job store of an HA folder: every submitted job's graph, status and
//! restore point, so a coordinator started again on the same folder runs
//! again the jobs that were running, from their latest completed
//! checkpoint, under the same ids.
//!
//! One JSON record a job, `{ha dir}/jobs/{id}.json`, rewritten when its
//! status or its latest checkpoint changes (a background task compares the
//! cluster state with what it last wrote, every [`SYNC_INTERVAL`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use weir_core::graph::JobGraph;
use weir_core::{Result, WeirError};

use crate::jobs::{self, ClusterState};

/// How often the records follow the cluster state.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(200);

/// How long a recovered job waits for workers with enough free slots.
const RECOVERY_WAIT: Duration = Duration::from_secs(120);

/// One job's record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredJob {
    /// The job id (`job-0001`).
    pub id: String,
    /// The job's name.
    pub name: String,
    /// Its status when the record was written (`RUNNING`, `FINISHED`, …).
    pub status: String,
    /// Whether that status is final.
    pub ended: bool,
    /// Why it failed, when it did.
    pub failure: Option<String>,
    /// Where it resumes from: its checkpoint folder once a checkpoint
    /// completed (the latest `chk-N` in it), else the savepoint it started
    /// from.
    pub restore: Option<String>,
    /// The job graph (JSON), while the job runs.
    pub graph: Option<String>,
    /// The attempt that ran (a recovered job runs the next one).
    #[serde(default)]
    pub attempt: u32,
    /// When it was submitted and ended (ms since the epoch).
    #[serde(default)]
    pub submitted_at_ms: u64,
    /// When it ended, if it did.
    #[serde(default)]
    pub ended_at_ms: Option<u64>,
}

/// The `jobs/` records of an HA folder.
pub struct JobStore {
    store: Arc<dyn ObjectStore>,
    base: Path,
}

impl JobStore {
    /// The job store of HA folder `url` (a path, `file://`, `s3://`, …,
    /// `memory://`).
    pub fn open(url: &str) -> Result<Self> {
        let storage = weir_state::CheckpointStorage::open(url)
            .map_err(|e| WeirError::Config(format!("--ha-dir {url}: {e}")))?;
        let (store, base) = storage.object_store();
        Ok(Self {
            store,
            base: base.clone().join("jobs"),
        })
    }

    fn path(&self, id: &str) -> Path {
        self.base.clone().join(format!("{id}.json").as_str())
    }

    /// Write `job`'s record.
    pub async fn put(&self, job: &StoredJob) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(job).map_err(|e| WeirError::plan(e.to_string()))?;
        self.store
            .put(&self.path(&job.id), PutPayload::from(bytes))
            .await
            .map_err(|e| WeirError::Execution(format!("job store: write {}: {e}", job.id)))?;
        Ok(())
    }

    /// Every record, by id. A record that cannot be read is an error
    /// naming it: a job would otherwise be lost without a word.
    pub async fn list(&self) -> Result<Vec<StoredJob>> {
        let store_error = |e: object_store::Error| WeirError::Execution(format!("job store: {e}"));
        let metas: Vec<_> = self
            .store
            .list(Some(&self.base))
            .try_collect()
            .await
            .map_err(store_error)?;
        let mut jobs = Vec::new();
        for meta in metas {
            if meta.location.extension() != Some("json") {
                continue;
            }
            let bytes = self
                .store
                .get(&meta.location)
                .await
                .map_err(store_error)?
                .bytes()
                .await
                .map_err(store_error)?;
            let job: StoredJob = serde_json::from_slice(&bytes).map_err(|e| {
                WeirError::Execution(format!("job store: {} is malformed: {e}", meta.location))
            })?;
            jobs.push(job);
        }
        jobs.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(jobs)
    }
}

/// The record of every job the cluster knows, as it stands — without its
/// graph, which does not change while the job keeps its id (it is
/// serialized only when the record is written).
fn current(state: &Mutex<ClusterState>) -> Vec<StoredJob> {
    let s = jobs::lock(state);
    s.job_refs()
        .map(|info| {
            let restore = match (&info.checkpoint_dir, info.checkpoints.is_empty()) {
                (Some(dir), false) => Some(dir.clone()),
                _ => s.initial_restore(&info.id),
            };
            StoredJob {
                id: info.id.clone(),
                name: info.name.clone(),
                status: format!("{:?}", info.status).to_uppercase(),
                ended: info.status.is_terminal(),
                failure: info.failure.clone(),
                restore,
                graph: None,
                attempt: info.attempt,
                submitted_at_ms: info.submitted_at_ms,
                ended_at_ms: info.ended_at_ms,
            }
        })
        .collect()
}

/// Keep the records up to date with the cluster state.
pub async fn sync(state: Arc<Mutex<ClusterState>>, store: Arc<JobStore>) {
    let mut written: BTreeMap<String, StoredJob> = BTreeMap::new();
    loop {
        for job in current(&state) {
            if written.get(&job.id) == Some(&job) {
                continue;
            }
            // A running job's record carries its graph; a finished one's
            // (also one that ended before it was first written) does not.
            let mut record = job.clone();
            if !job.ended {
                record.graph = jobs::lock(&state)
                    .job_graph(&job.id)
                    .and_then(|g| g.to_json().ok());
            }
            match store.put(&record).await {
                Ok(()) => {
                    written.insert(job.id.clone(), job);
                }
                Err(e) => tracing::warn!("{e}"),
            }
        }
        tokio::time::sleep(SYNC_INTERVAL).await;
    }
}

/// Run again every job the store lists as running, under its id, from its
/// restore point, once workers offer the slots it needs; job ids go on
/// after the highest stored.
pub async fn recover(state: Arc<Mutex<ClusterState>>, store: Arc<JobStore>) -> Result<()> {
    let stored = store.list().await?;
    let highest = stored
        .iter()
        .filter_map(|j| j.id.strip_prefix("job-")?.parse::<u64>().ok())
        .max();
    {
        let mut s = jobs::lock(&state);
        if let Some(n) = highest {
            s.continue_job_ids_after(n);
        }
        // Ended jobs stay listed, as their records say.
        for job in stored.iter().filter(|j| j.ended) {
            s.add_ended(job);
        }
    }
    let mut recovered = Vec::new();
    for job in stored.into_iter().filter(|j| !j.ended) {
        let Some(text) = &job.graph else {
            continue;
        };
        let graph = JobGraph::from_json(text)?;
        recovered.push((job.id.clone(), job.name.clone()));
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let next = (job.id.clone(), job.attempt + 1);
            if let Err(e) = recover_one(&state, next, graph, job.restore).await {
                tracing::error!("cannot recover {}: {e}", job.id);
            }
        });
    }
    jobs::lock(&state).recovered = Some(recovered);
    Ok(())
}

async fn recover_one(
    state: &Arc<Mutex<ClusterState>>,
    (id, attempt): (String, u32),
    graph: JobGraph,
    restore: Option<String>,
) -> Result<()> {
    let needed = graph
        .vertices
        .iter()
        .map(|v| v.parallelism)
        .max()
        .unwrap_or(1);
    let deadline = tokio::time::Instant::now() + RECOVERY_WAIT;
    while jobs::lock(state).free_slots_total() < needed {
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let restore = match restore {
        Some(path) => {
            let (storage, checkpoint) =
                weir_state::CheckpointStorage::open_restore_point(&path).await?;
            Some((
                weir_core::cluster::RestorePoint {
                    dir: storage.url().to_string(),
                    id: checkpoint,
                },
                false,
            ))
        }
        None => None,
    };
    tracing::info!("recovering {id} from {:?}", restore.as_ref().map(|r| &r.0));
    jobs::submit_as(state, graph, restore, Some((id, attempt)))
        .await
        .map(|_| ())
        .map_err(|e| WeirError::Execution(format!("{e:?}")))
}
