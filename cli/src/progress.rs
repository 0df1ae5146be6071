//! `weir run`'s progress on a terminal: per source, rows read and rows per
//! second; for the job, time, checkpoints completed, the watermark and the
//! status. Read from the same REST API as every other client, a few times
//! a second; nothing is drawn when stderr is not a terminal or with
//! `--quiet`.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::{Remote, api};

/// The display of one running job; it stops when dropped.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Follow job `id` on `remote`, unless `quiet` or stderr is not a
    /// terminal.
    pub fn follow(remote: &Remote, id: &str, quiet: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        if quiet || !std::io::stderr().is_terminal() {
            return Self { stop, thread: None };
        }
        let (remote, id, flag) = (remote.clone(), id.to_string(), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("weir progress".into())
            .spawn(move || draw(&remote, &id, &flag))
            .ok();
        Self { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn count(n: f64) -> String {
    let s = format!("{}", n.max(0.0).round() as u64);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn watermark(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
    )
}

/// A metric of a vertex summed over its subtasks.
fn sum(remote: &Remote, id: &str, vertex: u64, metric: &str) -> Option<f64> {
    let path = format!("/v1/jobs/{id}/vertices/{vertex}/subtasks/metrics?get={metric}");
    let m = api(remote, "GET", &path, None).ok()?;
    m.as_array()?.first()?["sum"].as_f64()
}

fn draw(remote: &Remote, id: &str, stop: &AtomicBool) {
    let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4));
    let style = ProgressStyle::with_template("{spinner} {prefix:<28!} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let status = bars.add(ProgressBar::new_spinner().with_style(style.clone()));
    status.set_prefix("job");
    let mut sources: Vec<(u64, ProgressBar)> = vec![];
    let started = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        if let Ok(job) = api(remote, "GET", &format!("/v1/jobs/{id}"), None) {
            let vertices = job["vertices"].as_array().cloned().unwrap_or_default();
            for v in &vertices {
                let vid = v["id"].as_u64().unwrap_or(0);
                let name = v["name"].as_str().unwrap_or_default();
                if name.starts_with("Source: ") && !sources.iter().any(|(i, _)| *i == vid) {
                    let bar = bars.insert_before(
                        &status,
                        ProgressBar::new_spinner().with_style(style.clone()),
                    );
                    bar.set_prefix(name.split(" -> ").next().unwrap_or(name).to_string());
                    sources.push((vid, bar));
                }
            }
            for (vid, bar) in &sources {
                let rows = sum(remote, id, *vid, "numRecordsIn").unwrap_or(0.0);
                let rate = sum(remote, id, *vid, "numRecordsInPerSecond").unwrap_or(0.0);
                let splits = match (
                    sum(remote, id, *vid, "splitsDone"),
                    sum(remote, id, *vid, "splitsTotal"),
                ) {
                    (Some(done), Some(all)) => {
                        format!(" · {} of {} splits", count(done), count(all))
                    }
                    _ => String::new(),
                };
                bar.set_message(format!(
                    "{} rows read · {} rows/s{splits}",
                    count(rows),
                    count(rate)
                ));
                bar.tick();
            }
            let wm = api(remote, "GET", &format!("/v1/jobs/{id}/watermarks"), None)
                .ok()
                .and_then(|w| {
                    w["vertices"]
                        .as_array()?
                        .iter()
                        .filter_map(|v| v["watermark"].as_i64())
                        .min()
                });
            let checkpoints = job["checkpoints"].as_array().map_or(0, Vec::len);
            status.set_message(format!(
                "{} · {:.0} s · {checkpoints} checkpoint{} · watermark {}",
                job["status"].as_str().unwrap_or_default(),
                started.elapsed().as_secs_f64(),
                if checkpoints == 1 { "" } else { "s" },
                wm.map_or_else(|| "none yet".to_string(), watermark),
            ));
            status.tick();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    for (_, bar) in &sources {
        bar.finish();
    }
    status.finish();
}

#[cfg(test)]
mod tests {
    #[test]
    fn figures_read_well() {
        assert_eq!(super::count(1_234_567.4), "1,234,567");
        assert_eq!(super::count(12.0), "12");
        assert_eq!(
            super::watermark(1_700_000_001_544),
            "2023-11-14 22:13:21.544"
        );
        assert_eq!(super::watermark(0), "1970-01-01 00:00:00.000");
    }
}
