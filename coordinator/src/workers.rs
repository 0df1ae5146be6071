//! The worker side of the cluster state: heartbeats and task updates
//! from workers, lost workers found by silence or by probing, and the
//! cancellations sent to them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_core::cluster::{self, Cancel, Heartbeat, TaskState};
use weir_flight::{Credentials, call_action};

use crate::job_info::WorkerInfo;
use crate::jobs::{ClusterState, lock};

/// After a task failed, ask every worker of the job
/// whether it is alive: one that cannot be reached is declared lost at
/// once (rather than after the heartbeat timeout), and becomes the cause.
pub(crate) fn probe_workers(state: &Arc<Mutex<ClusterState>>, addresses: Vec<String>) {
    let token = lock(state).credentials.clone();
    for addr in addresses {
        let state = Arc::clone(state);
        let token = token.clone();
        tokio::spawn(async move {
            if let Err(e) = call_action(&addr, &token, cluster::PING, vec![]).await {
                let cancels = {
                    let mut s = lock(&state);
                    match s.worker_at(&addr) {
                        Some(wid) => s.declare_lost(&wid, &format!("unreachable ({e})")),
                        None => vec![],
                    }
                };
                send_cancels(token, cancels);
            }
        });
    }
}

/// Whether a call naming worker `w` comes from the process `w`'s id was
/// given to (callers that name no process are taken at their word).
fn same_process(w: &WorkerInfo, instance: &str) -> bool {
    instance.is_empty() || w.instance == instance
}

/// A heartbeat: refresh the worker and its task reports. False when the
/// worker is unknown, already declared lost, or the id was given to
/// another process (a restarted coordinator hands ids out again).
pub fn heartbeat(state: &Arc<Mutex<ClusterState>>, h: Heartbeat) -> bool {
    let mut s = lock(state);
    match s.workers.get_mut(&h.worker_id) {
        Some(w) if !w.lost && same_process(w, &h.instance) => w.last_seen = Instant::now(),
        _ => return false,
    }
    let mut cancels = vec![];
    for r in &h.tasks {
        for addr in s.apply_report(&h.worker_id, r) {
            cancels.push((r.job_id.clone(), addr));
        }
    }
    let token = s.credentials.clone();
    drop(s);
    send_cancels(token, cancels);
    true
}

/// A pushed task update.
pub fn task_update(state: &Arc<Mutex<ClusterState>>, u: cluster::TaskUpdate) {
    let mut s = lock(state);
    if !s
        .workers
        .get(&u.worker_id)
        .is_some_and(|w| same_process(w, &u.instance))
    {
        // Another process's report under an id this coordinator gave to
        // someone else (it restarted): its next heartbeat re-registers it.
        return;
    }
    let workers = s.apply_report(&u.worker_id, &u.report);
    let token = s.credentials.clone();
    drop(s);
    // A failure next to a dead worker shows up as broken channels first:
    // check the job's workers so the dead one becomes the cause.
    if u.report.state == TaskState::Failed && !workers.is_empty() {
        probe_workers(state, workers.clone());
    }
    let cancels = workers
        .into_iter()
        .map(|a| (u.report.job_id.clone(), a))
        .collect();
    send_cancels(token, cancels);
}

pub(crate) fn send_cancels(token: Credentials, cancels: Vec<(String, String)>) {
    for (job_id, addr) in cancels {
        let token = token.clone();
        tokio::spawn(async move {
            let body = serde_json::to_vec(&Cancel {
                job_id: job_id.clone(),
            })
            .unwrap_or_default();
            if let Err(e) = call_action(&addr, &token, cluster::CANCEL, body).await {
                tracing::warn!("cannot cancel {job_id} on {addr}: {e}");
            }
        });
    }
}

/// Declare workers lost when they stop heartbeating.
pub async fn monitor_heartbeats(state: Arc<Mutex<ClusterState>>) {
    let period = lock(&state)
        .heartbeat_interval
        .max(Duration::from_millis(50))
        / 2;
    loop {
        tokio::time::sleep(period).await;
        if !lock(&state).may_act() {
            continue;
        }
        let (cancels, token) = {
            let mut s = lock(&state);
            (s.check_heartbeats(), s.credentials.clone())
        };
        send_cancels(token, cancels);
    }
}
