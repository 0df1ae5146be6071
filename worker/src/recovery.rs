//! Running a checkpointed job in this process: checkpoints every interval,
//! and on a failure a restart from the latest completed checkpoint, paced
//! by the job's restart strategy.
//!
//! A restart rebuilds every task; each restores its source position and
//! operator state from the checkpoint's Parquet files (the subtasks whose
//! key groups overlap its own), and data in flight at the failure is
//! discarded — the sources replay it. Two-phase-commit sinks publish the
//! files of the restored checkpoint and delete what was written after it,
//! so their output is exactly once. With no completed checkpoint the job
//! restarts from the beginning, and the sinks have published nothing yet.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use weir_core::graph::{JobGraph, JobResult};
use weir_core::{Result, WeirError};
use weir_state::{CheckpointStorage, Manifest};

use crate::checkpoint::{
    CheckpointConfig, LocalCheckpointCoordinator, tables_for, task_checkpoints,
};
use crate::executor::{TaskObserver, build_tasks, run_observed_tasks};
use crate::task::TaskInput;

/// The folder of this run's checkpoints: `{checkpoint_dir}/{job}-{start ms}`.
fn run_directory(job: &JobGraph) -> String {
    let base = job.config.checkpoint_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir()
            .join("weir-checkpoints")
            .display()
            .to_string()
    });
    let name: String = job
        .job_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{}/{name}-{}",
        base.trim_end_matches('/'),
        weir_operators::process::now_ms()
    )
}

/// Run `job` with checkpoints and restarts; `cancel` stops it.
pub fn run_checkpointed(
    job: JobGraph,
    cancel: Option<Arc<watch::Sender<bool>>>,
) -> Result<JobResult> {
    let started = Instant::now();
    // A job resumed from a savepoint without an interval takes no
    // periodic checkpoints.
    let interval = job
        .config
        .checkpoint_interval
        .unwrap_or(Duration::from_secs(u32::MAX as u64));
    let directory = run_directory(&job);
    let storage = CheckpointStorage::open(&directory)?;
    tracing::info!("job '{}' checkpoints to {directory}", job.job_name);
    let config = CheckpointConfig {
        interval,
        timeout: job.config.checkpoint_timeout,
        retained: job.config.checkpoint_retained,
        min_pause: job.config.checkpoint_min_pause,
        tolerable_failures: job.config.checkpoint_tolerable_failures,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WeirError::Execution(format!("cannot start a runtime: {e}")))?;
    let mut restarts = Vec::new();
    let mut completed = Vec::new();
    let mut sizes = Vec::new();
    let mut declined = Vec::new();
    let mut restored: Option<Manifest> = None;
    let mut failures: Vec<Instant> = Vec::new();
    let mut last_id = 0;
    let initial = match &job.config.restore_from {
        Some(path) => Some(runtime.block_on(open_restore_point(path))?),
        None => None,
    };
    loop {
        let attempt = restarts.len();
        let (mut tasks, host) = build_tasks(&job)?;
        // The latest checkpoint of this run, else the savepoint it started
        // from, else (on a restart) nothing: sinks still clear up.
        let point = match (&restored, &initial) {
            (Some(m), _) => Some((&storage, m, false)),
            (None, Some((s, m))) => Some((s, m, job.config.allow_non_restored_state)),
            (None, None) => None,
        };
        match point {
            Some((s, m, allow)) => {
                runtime.block_on(restore(s, Some(m), &job, &mut tasks, allow))?;
            }
            None if attempt > 0 => {
                runtime.block_on(restore(&storage, None, &job, &mut tasks, false))?;
            }
            None => {}
        }
        let sources: Vec<(usize, usize)> = tasks
            .iter()
            .filter(|(_, i)| matches!(i, TaskInput::Source { .. }))
            .map(|(t, _)| (t.vertex, t.subtask))
            .collect();
        let (mut coordinator, mut wiring) = LocalCheckpointCoordinator::new(
            &job,
            storage.clone(),
            config.clone(),
            &sources,
            tasks.len(),
            last_id,
        );
        if let Some(m) = &restored {
            // A checkpoint of this run's storage: its shared files stay.
            coordinator.reuse_files_of(m);
        }
        for (task, input) in &mut tasks {
            let is_source = matches!(input, TaskInput::Source { .. });
            let triggers = wiring.triggers.remove(&(task.vertex, task.subtask));
            task.checkpoints = Some(task_checkpoints(
                &job,
                task,
                is_source,
                triggers,
                wiring.acks.clone(),
                wiring.completed.clone(),
            ));
        }
        drop(wiring);
        let stats = Arc::clone(&coordinator.stats);
        let stop = Arc::new(AtomicBool::new(false));
        let coordinator_stop = Arc::clone(&stop);
        let attempt_cancel = Arc::new(watch::channel(false).0);
        let fail_job = Arc::clone(&attempt_cancel);
        let coordinator_thread = std::thread::Builder::new()
            .name("weir checkpoints".into())
            .spawn(move || coordinator.run(coordinator_stop, fail_job))
            .map_err(|e| WeirError::Execution(format!("cannot start checkpointing: {e}")))?;
        let forwarder = cancel.as_ref().map(|outer| {
            let (outer, inner, stop) = (
                outer.subscribe(),
                Arc::clone(&attempt_cancel),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if *outer.borrow() {
                        inner.send_replace(true);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        });
        let observer: TaskObserver = Arc::new(|_| {});
        let result = run_observed_tasks(tasks, attempt_cancel, observer);
        stop.store(true, Ordering::SeqCst);
        let _ = coordinator_thread.join();
        if let Some(f) = forwarder {
            let _ = f.join();
        }
        drop(host);
        let stats = stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
        last_id = last_id.max(stats.last_triggered);
        completed.extend(stats.completed.iter().copied());
        sizes.extend(stats.sizes.iter().copied());
        declined.extend(stats.declined.iter().cloned());
        let result = match (result, &stats.fatal) {
            (Err(_), Some(fatal)) => Err(WeirError::Execution(fatal.clone())),
            (r, _) => r,
        };
        let failure = match result {
            Ok(metrics) => {
                if job.config.checkpoint_incremental
                    && let Err(e) = runtime.block_on(storage.clean_up_after_job())
                {
                    tracing::warn!("checkpoint clean-up: {e}");
                }
                return Ok(JobResult {
                    job_name: job.job_name.clone(),
                    duration: started.elapsed(),
                    tasks: metrics,
                    restarts,
                    checkpoints: completed,
                    checkpoint_sizes: sizes,
                    checkpoints_declined: declined,
                });
            }
            Err(e) => e,
        };
        let cancelled = cancel.as_ref().is_some_and(|c| *c.borrow());
        failures.push(Instant::now());
        let delay = match job.config.restart_delay_after(&failures) {
            Some(d) if !cancelled => d,
            _ => return Err(failure),
        };
        std::thread::sleep(delay);
        restored = match runtime.block_on(storage.completed())?.last() {
            Some(&id) => Some(runtime.block_on(storage.manifest(id))?),
            None => None,
        };
        let from = match (&restored, &job.config.restore_from) {
            (Some(m), _) => format!("checkpoint {}", m.checkpoint_id),
            (None, Some(path)) => format!("the savepoint at {path}"),
            (None, None) => "the beginning (no checkpoint had completed)".into(),
        };
        tracing::warn!(
            "job '{}' failed: {failure}; restart {} ({:?}) from {from}",
            job.job_name,
            attempt + 1,
            job.config.restart_strategy
        );
        restarts.push(format!("{failure} — restarted from {from}"));
    }
}

/// The newest completed savepoint or checkpoint in folder `path` (or the
/// `…/chk-N` folder `path` names), read whole (a corrupt manifest fails here, before anything runs).
pub async fn open_restore_point(path: &str) -> Result<(CheckpointStorage, Manifest)> {
    let (storage, id) = CheckpointStorage::open_restore_point(path).await?;
    let manifest = storage.manifest(id).await?;
    Ok((storage, manifest))
}

/// Give every task its state from `manifest` (none: a fresh start, which
/// still lets sinks clear what the failed attempt left behind).
/// Also used by workers for the tasks deployed to them.
pub async fn restore(
    storage: &CheckpointStorage,
    manifest: Option<&Manifest>,
    job: &JobGraph,
    tasks: &mut [(crate::task::Task, TaskInput)],
    allow_non_restored_state: bool,
) -> Result<()> {
    for (task, input) in tasks.iter_mut() {
        let mut tables = match manifest {
            Some(m) => {
                let parallelism = job.vertices[task.vertex].parallelism;
                tables_for(
                    storage,
                    m,
                    job,
                    task.vertex,
                    task.subtask,
                    parallelism,
                    allow_non_restored_state,
                )
                .await?
            }
            None => HashMap::new(),
        };
        let nodes = &job.vertices[task.vertex].nodes;
        let chain_nodes = match input {
            TaskInput::Source { source, .. } => {
                match tables.remove(&nodes[0]) {
                    Some(t) => source.restore_position(t.into_iter().map(|t| t.batch).collect())?,
                    // A source subtask absent from a completed checkpoint
                    // had finished: it has nothing left to read.
                    None if manifest.is_some() => source.restore_position(vec![])?,
                    None => {}
                }
                &nodes[1..]
            }
            TaskInput::Gate(_) => &nodes[..],
        };
        let rescaled = manifest.is_some_and(|m| {
            m.subtasks
                .iter()
                .filter(|s| s.vertex == task.vertex)
                .count()
                != job.vertices[task.vertex].parallelism
        });
        let mut states: Vec<Vec<weir_operators::StateTable>> = chain_nodes
            .iter()
            .map(|n| tables.remove(n).unwrap_or_default())
            .collect();
        // In-flight data of an unaligned checkpoint: replayed first.
        if let Some(head) = states.first_mut() {
            let (in_flight, own): (Vec<_>, Vec<_>) = std::mem::take(head)
                .into_iter()
                .partition(|t| t.name.starts_with("__inflight_"));
            *head = own;
            if rescaled && !in_flight.is_empty() {
                return Err(WeirError::Execution(format!(
                    "{}: an unaligned checkpoint with in-flight data cannot be restored at \
                     another parallelism; take a savepoint (aligned) to rescale",
                    task.name
                )));
            }
            for t in in_flight {
                let input = t.name["__inflight_".len()..].parse().unwrap_or(0);
                task.replay.push((input, t.batch));
            }
        }
        task.chain.restore(states).map_err(|e| WeirError::Task {
            task: task.name.clone(),
            source: Box::new(e),
        })?;
    }
    Ok(())
}
