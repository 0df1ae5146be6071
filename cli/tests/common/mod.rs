//! A real coordinator and real worker processes on loopback, driven
//! through the `weir` binary and the REST API: shared by the end-to-end
//! tests.
#![allow(dead_code)]

pub mod kafka;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// Child processes, killed when the test ends — also when it panics.
#[derive(Default)]
pub struct Processes(pub Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub struct Cluster {
    pub url: String,
    pub rpc: String,
    /// The cluster's token: given, or the one the coordinator made and left
    /// in its token file.
    pub token: Option<String>,
    /// Whether the token was given (and is passed to workers) or found by
    /// them in the token file.
    pub given_token: bool,
    /// Arguments given to the coordinator and every worker.
    pub extra: Vec<String>,
    pub procs: Processes,
    /// Each worker's process index and Flight address.
    pub workers: Vec<(usize, String)>,
}

impl Cluster {
    /// A coordinator (fast heartbeats) and `workers` workers of `slots` slots.
    pub fn start(workers: usize, slots: usize, token: Option<&str>) -> Self {
        Self::start_with(workers, slots, token, &[])
    }

    /// As [`Self::start`], passing `extra` to every process.
    pub fn start_with(workers: usize, slots: usize, token: Option<&str>, extra: &[String]) -> Self {
        Self::start_full(workers, slots, token, extra, &[])
    }

    /// As [`Self::start_with`], passing `coordinator_only` to the
    /// coordinator alone.
    pub fn start_full(
        workers: usize,
        slots: usize,
        token: Option<&str>,
        extra: &[String],
        coordinator_only: &[&str],
    ) -> Self {
        let mut procs = Processes::default();
        let mut cmd = Command::new(WEIR);
        cmd.args([
            "coordinator",
            "--rest",
            "127.0.0.1:0",
            "--rpc",
            "127.0.0.1:0",
            "--heartbeat-interval-ms",
            "200",
            "--heartbeat-timeout-ms",
            "2000",
        ])
        .args(extra)
        .args(coordinator_only)
        .env_remove("WEIR_TOKEN")
        .stdout(Stdio::piped());
        if let Some(t) = token {
            cmd.args(["--token", t]);
        }
        let mut child = cmd.spawn().expect("start the coordinator");
        let stdout = child.stdout.take().unwrap();
        procs.0.push(child);
        let mut lines = BufReader::new(stdout).lines();
        let mut url = None;
        let mut rpc = None;
        while url.is_none() || rpc.is_none() {
            let line = lines
                .next()
                .expect("the coordinator printed its addresses")
                .unwrap();
            if let Some(u) = line.strip_prefix("coordinator REST API on ") {
                url = Some(u.to_string());
            }
            if let Some(r) = line.strip_prefix("coordinator control endpoint on ") {
                rpc = Some(r.to_string());
            }
        }
        // What it prints later is read, so its stdout stays open.
        std::thread::spawn(move || lines.for_each(drop));
        let url = url.unwrap();
        let made = weir_flight::token_file::read(&url)
            .ok()
            .flatten()
            .map(|t| t.expose().to_string());
        let mut cluster = Cluster {
            given_token: token.is_some(),
            token: token.map(str::to_string).or(made),
            url,
            rpc: rpc.unwrap(),
            extra: extra.to_vec(),
            procs,
            workers: vec![],
        };
        for _ in 0..workers {
            cluster.add_worker(slots);
        }
        cluster.wait_for_workers(workers);
        cluster
    }

    /// Start a worker; returns its Flight address once it has registered.
    pub fn add_worker(&mut self, slots: usize) -> String {
        self.add_worker_with(slots, &[])
    }

    /// [`Self::add_worker`], with `args` for this worker alone.
    pub fn add_worker_with(&mut self, slots: usize, args: &[&str]) -> String {
        let mut cmd = Command::new(WEIR);
        cmd.args([
            "worker",
            "--coordinator",
            &self.rpc,
            "--slots",
            &slots.to_string(),
        ])
        .args(&self.extra)
        .args(args)
        .env_remove("WEIR_TOKEN")
        .stdout(Stdio::piped());
        if let Some(t) = self.token.as_ref().filter(|_| self.given_token) {
            cmd.args(["--token", t]);
        }
        let mut child = cmd.spawn().expect("start a worker");
        let stdout = child.stdout.take().unwrap();
        self.procs.0.push(child);
        // "worker worker-N serving Flight on ADDR with S slots"
        let mut lines = BufReader::new(stdout).lines();
        let line = lines.next().expect("the worker announced itself").unwrap();
        // What it prints later is read, so its stdout stays open.
        std::thread::spawn(move || lines.for_each(drop));
        let address = line
            .split_whitespace()
            .nth(5)
            .expect("an address in the worker's first line")
            .to_string();
        self.workers.push((self.procs.0.len() - 1, address.clone()));
        address
    }

    /// Kill -9 the worker process listening on `address`.
    pub fn kill_worker_at(&mut self, address: &str) {
        let index = self
            .workers
            .iter()
            .find(|(_, a)| a == address)
            .map(|(i, _)| *i)
            .expect("a known worker");
        let child = &mut self.procs.0[index];
        child.kill().unwrap();
        child.wait().unwrap();
    }

    pub fn wait_for_workers(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, workers) = self.rest("GET", "/v1/workers", "");
            if workers.as_array().map(|w| w.len()) == Some(n) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "workers did not register: {workers}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A raw REST call: status and JSON body.
    pub fn rest(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        rest_call(&self.url, self.token.as_deref(), method, path, body)
    }

    /// Run the `weir` CLI against this cluster.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(WEIR);
        cmd.args(args).env("WEIR_COORDINATOR_URL", &self.url);
        // A made token is found by the CLI in the token file, as a user's.
        match self.token.as_ref().filter(|_| self.given_token) {
            Some(t) => cmd.env("WEIR_TOKEN", t),
            None => cmd.env_remove("WEIR_TOKEN"),
        };
        cmd.output().expect("run weir")
    }

    pub fn wait_for_status(
        &self,
        job: &str,
        wanted: &[&str],
        within: Duration,
    ) -> serde_json::Value {
        let deadline = Instant::now() + within;
        loop {
            let (_, details) = self.rest("GET", &format!("/v1/jobs/{job}"), "");
            let status = details["status"].as_str().unwrap_or_default();
            if wanted.contains(&status) {
                return details;
            }
            assert!(
                Instant::now() < deadline,
                "job {job} did not reach {wanted:?}: {details:#}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A raw REST call whose answer is text: status and body.
pub fn rest_text(url: &str, token: Option<&str>, path: &str) -> (u16, String) {
    raw_call(url, token, "GET", path, "")
}

fn raw_call(url: &str, token: Option<&str>, method: &str, path: &str, body: &str) -> (u16, String) {
    let host = url.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(host).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, rest.to_string())
}

pub fn rest_call(
    url: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, serde_json::Value) {
    let (status, text) = raw_call(url, token, method, path, body);
    let json = serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// Run a SQL `script` in this process at `parallelism`; its query's rows
/// (none when it only inserts), or the error as text.
pub fn run_sql(
    script: &str,
    parallelism: usize,
) -> Result<Vec<arrow::record_batch::RecordBatch>, String> {
    let mut s = weir_sql::SqlSession::new();
    s.execute_script(script).map_err(|e| e.to_string())?;
    let env = weir_worker::local_environment().map_err(|e| e.to_string())?;
    env.set_parallelism(parallelism);
    let rows = weir_core::spec::CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || weir_core::spec::SinkSpec::from(sink.clone()))
        .map_err(|e| e.to_string())?;
    env.execute("sql").map_err(|e| e.to_string())?;
    Ok(rows.batches())
}
