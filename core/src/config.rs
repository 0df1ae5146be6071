//! Typed job configuration with its defaults in one place.
//!
//! Layering: [`WeirConfig::default`] → environment variables
//! ([`WeirConfig::with_env`], `WEIR_*`) → explicit setters in code.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Result, WeirError};
use crate::keys::DEFAULT_MAX_PARALLELISM;

/// Streaming or batch execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum RuntimeMode {
    /// Continuous processing: watermarks advance as data arrives and windows
    /// fire as soon as the watermark passes their end.
    #[default]
    Streaming,
    /// Every source is bounded: no intermediate watermarks; one final watermark
    /// at the end of input fires everything. Results equal streaming mode.
    Batch,
}

/// How tasks of one process exchange records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum ExchangeMode {
    /// Bounded in-memory queues.
    #[default]
    Local,
    /// Arrow Flight streams over loopback, as between worker processes
    /// (for measuring and testing the network path in one process).
    Flight,
}

/// How exchange batches between worker processes are compressed (Arrow
/// IPC body compression: each buffer on its own, read by any Arrow IPC
/// reader built with compression).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum ExchangeCompression {
    /// Buffers as they are: the fastest on loopback and fast networks.
    #[default]
    None,
    /// LZ4 frames: cheap to compress, for links where bandwidth is scarce.
    Lz4,
    /// Zstandard: smaller than LZ4, at more CPU.
    Zstd,
}

impl ExchangeCompression {
    /// `none`, `lz4` or `zstd`, in any case.
    pub fn parse(v: &str) -> Option<Self> {
        match v.to_ascii_lowercase().as_str() {
            "none" => Some(Self::None),
            "lz4" => Some(Self::Lz4),
            "zstd" => Some(Self::Zstd),
            _ => None,
        }
    }
}

/// Job-wide configuration. Every field is documented with its default.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WeirConfig {
    /// Maximum rows per batch emitted by a source. Default 8192.
    /// `WEIR_BATCH_SIZE`.
    pub batch_size: usize,
    /// How long a rate-limited source may hold rows before emitting a partial
    /// batch: the throughput/latency dial. Default 5 ms. `WEIR_BATCH_LINGER_MS`.
    pub batch_linger: Duration,
    /// Number of key groups; fixed for the life of a job's state. Default 128.
    /// `WEIR_MAX_PARALLELISM`.
    pub max_parallelism: u32,
    /// Parallelism of operators that do not set their own. Default 1.
    /// `WEIR_PARALLELISM`.
    pub default_parallelism: usize,
    /// Capacity of every channel between tasks, in messages (batches or
    /// control messages). Bounds the memory in flight. Default 4.
    /// `WEIR_CHANNEL_CAPACITY`.
    pub channel_capacity: usize,
    /// Streaming or batch. Default streaming. `WEIR_RUNTIME_MODE`
    /// (`streaming` | `batch`).
    pub runtime_mode: RuntimeMode,
    /// Whether operators may be chained into one task. Default true.
    pub chaining_enabled: bool,
    /// How often sources emit a watermark (wall clock), as Flink's
    /// `pipeline.auto-watermark-interval`. Zero emits one after every batch.
    /// Default 200 ms. `WEIR_WATERMARK_INTERVAL_MS`.
    pub watermark_interval: Duration,
    /// How the local executor connects tasks. Default local queues.
    /// `WEIR_EXCHANGE` (`local` | `flight`).
    pub exchange: ExchangeMode,
    /// Compression of batches sent to other worker processes over Flight.
    /// Default none. SQL `weir.exchange.compression`,
    /// `WEIR_EXCHANGE_COMPRESSION` (`none` | `lz4` | `zstd`).
    #[serde(default)]
    pub exchange_compression: ExchangeCompression,
    /// Address the Flight endpoint serving a job's Flight sinks listens on.
    /// Default `127.0.0.1:0` (loopback, any free port). A non-loopback
    /// address requires [`sink_token`](Self::sink_token). `WEIR_SINK_BIND`.
    pub sink_bind: SocketAddr,
    /// Bearer token Flight clients must send (`authorization: Bearer <token>`)
    /// to list or read sinks. Default none (loopback only). `WEIR_SINK_TOKEN`.
    #[serde(skip)]
    pub sink_token: Option<Secret>,
    /// How much of its output a Flight sink keeps for clients. Default: the
    /// newest 256 MiB of Arrow memory per sink (so a sink nobody reads
    /// stays bounded). `WEIR_SINK_RETENTION_ROWS`, `WEIR_SINK_RETENTION_BYTES`,
    /// `WEIR_SINK_RETENTION_SECS`.
    pub sink_retention: SinkRetention,
    /// Serve Flight sinks over TLS with this certificate and key (PEM).
    /// Default none (plain HTTP/2). `WEIR_SINK_TLS_CERT` and
    /// `WEIR_SINK_TLS_KEY`, both or neither.
    pub sink_tls: Option<TlsFiles>,
    /// Flight sinks of a checkpointing job show clients only rows of
    /// completed checkpoints (read-committed, the default); with this set
    /// they show every row as it arrives. `WEIR_SINK_READ_UNCOMMITTED`.
    #[serde(default)]
    pub sink_read_uncommitted: bool,
    /// Checkpoint every this long (Flink's `execution.checkpointing.interval`).
    /// Default none: no checkpoints. `WEIR_CHECKPOINT_INTERVAL_MS`.
    #[serde(default)]
    pub checkpoint_interval: Option<Duration>,
    /// Where checkpoints go: a `file://` URL or path, or `memory://`. Each run
    /// writes under its own `{job}-{start ms}` folder. Default
    /// `{temp dir}/weir-checkpoints`. `WEIR_CHECKPOINT_DIR`.
    #[serde(default)]
    pub checkpoint_dir: Option<String>,
    /// Exactly-once (default: barriers are aligned, or unaligned) or
    /// at-least-once (Flink's `execution.checkpointing.mode`): barriers
    /// are tracked without blocking any channel — no alignment stalls, but
    /// after a restore some records may be counted twice.
    /// `WEIR_CHECKPOINT_MODE` = `exactly-once` | `at-least-once`.
    #[serde(default)]
    pub checkpoint_mode: CheckpointingMode,
    /// Unaligned checkpoints: barriers overtake queued data (on local
    /// channels) and tasks snapshot at the first barrier, storing the data
    /// in flight with the checkpoint — fast checkpoints under back-pressure.
    /// Default false (aligned). `WEIR_CHECKPOINT_UNALIGNED`.
    #[serde(default)]
    pub checkpoint_unaligned: bool,
    /// An aligned checkpoint still aligning a task's inputs after this long
    /// continues unaligned there (`aligned-checkpoint-timeout`). Default
    /// none. `WEIR_CHECKPOINT_ALIGNED_TIMEOUT_MS`.
    #[serde(default)]
    pub checkpoint_aligned_timeout: Option<Duration>,
    /// Data (bytes) a task reads ahead of its processing, per checkpoint
    /// in progress, to complete an unaligned checkpoint at once; beyond it
    /// the checkpoint's in-flight data is recorded as the task gets to it.
    /// Bounds a task's memory under sustained back-pressure. Default 64 MiB.
    #[serde(default = "default_read_ahead")]
    pub checkpoint_unaligned_read_ahead: usize,
    /// Least time between the end of one checkpoint and the trigger of the
    /// next (`execution.checkpointing.min-pause`). Default 0.
    #[serde(default)]
    pub checkpoint_min_pause: Duration,
    /// Consecutive failed checkpoints tolerated before the job fails over
    /// (`execution.checkpointing.tolerable-failed-checkpoints`). Default
    /// none: unlimited (Flink's default is 0). `WEIR_CHECKPOINT_TOLERABLE_FAILURES`.
    #[serde(default)]
    pub checkpoint_tolerable_failures: Option<u32>,
    /// A checkpoint not completed within this is abandoned. Default 10 min.
    #[serde(default = "default_checkpoint_timeout")]
    pub checkpoint_timeout: Duration,
    /// Incremental checkpoints (`state.backend.incremental`): keyed state
    /// is written in chunks of key groups under `shared/`, and a chunk
    /// unchanged since the last checkpoint is not written again. Needs at
    /// least 2 retained checkpoints. Default false.
    /// `WEIR_CHECKPOINT_INCREMENTAL`.
    #[serde(default)]
    pub checkpoint_incremental: bool,
    /// Live metrics while tasks run (rows and bytes per operator, busy and
    /// idle time, watermarks; see `metrics`). Default true; off only to
    /// measure what they cost. `WEIR_LIVE_METRICS`.
    #[serde(default = "default_true")]
    pub live_metrics: bool,
    /// Completed checkpoints kept (`checkpoint.retained`). Default 3.
    #[serde(default = "default_retained")]
    pub checkpoint_retained: usize,
    /// Restarts after a failure (fixed-delay strategy) when the job
    /// checkpoints; each resumes from the latest completed checkpoint.
    /// Default 3. `WEIR_RESTART_ATTEMPTS`.
    #[serde(default = "default_restart_attempts")]
    pub restart_attempts: u32,
    /// Wait before a restart (the first one, for exponential delay).
    /// Default 1 s. `WEIR_RESTART_DELAY_MS`.
    #[serde(default = "default_restart_delay")]
    pub restart_delay: Duration,
    /// How restarts are paced and when the job gives up. Default fixed
    /// delay (`restart_attempts` times, `restart_delay` apart).
    /// `WEIR_RESTART_STRATEGY` = `fixed-delay` | `exponential-delay` |
    /// `failure-rate` | `none`.
    #[serde(default)]
    pub restart_strategy: RestartStrategy,
    /// Start from this savepoint or retained checkpoint: a folder holding
    /// `chk-N/_metadata` (the newest completed one is used), as
    /// `weir run --from-savepoint` takes (Flink's `execution.savepoint.path`).
    /// Default none. `WEIR_SAVEPOINT_PATH`.
    #[serde(default)]
    pub restore_from: Option<String>,
    /// With [`Self::restore_from`]: skip state of operators the job no longer
    /// has instead of refusing to start
    /// (`execution.savepoint.ignore-unclaimed-state`). Default false.
    #[serde(default)]
    pub allow_non_restored_state: bool,
    /// Where keyed state lives, its memory budget and TTL
    /// (`state.backend.type`, `taskmanager.memory.managed.size`, …).
    #[serde(default)]
    pub state: crate::state_config::StateConfig,
}

/// The guarantee checkpoints give (Flink's `CheckpointingMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointingMode {
    /// Aligned (or unaligned) barriers: state and output exactly once.
    #[default]
    ExactlyOnce,
    /// Barriers never block a channel: records that overtook a barrier
    /// are in the snapshot and are replayed after a restore, so they may
    /// count twice; nothing is lost.
    AtLeastOnce,
}

/// Flink's restart strategies.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartStrategy {
    /// `restart_attempts` restarts, `restart_delay` apart.
    #[default]
    FixedDelay,
    /// Unlimited restarts; the delay starts at `restart_delay` and is
    /// multiplied after each failure up to `max_delay`, with ± `jitter`
    /// (a fraction); after `reset_after` without failure it starts over.
    ExponentialDelay {
        /// Largest delay.
        max_delay: Duration,
        /// Growth per consecutive failure.
        multiplier: f64,
        /// Random spread, as a fraction of the delay (0.1 = ±10 %).
        jitter: f64,
        /// A quiet period after which the delay resets.
        reset_after: Duration,
    },
    /// Restart `restart_delay` after each failure unless more than
    /// `max_failures` happened within `interval`.
    FailureRate {
        /// Failures tolerated per interval.
        max_failures: u32,
        /// The interval.
        interval: Duration,
    },
    /// Never restart.
    None,
}

impl WeirConfig {
    /// The wait before restarting after the failures at `failures` (the
    /// newest last, the current one included), or `None` to give up.
    pub fn restart_delay_after(&self, failures: &[std::time::Instant]) -> Option<Duration> {
        let now = failures.last().copied()?;
        match self.restart_strategy {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay => {
                (failures.len() as u32 <= self.restart_attempts).then_some(self.restart_delay)
            }
            RestartStrategy::FailureRate {
                max_failures,
                interval,
            } => {
                let recent = failures
                    .iter()
                    .filter(|&&t| now.duration_since(t) <= interval)
                    .count() as u32;
                (recent <= max_failures).then_some(self.restart_delay)
            }
            RestartStrategy::ExponentialDelay {
                max_delay,
                multiplier,
                jitter,
                reset_after,
            } => {
                // Failures since the last quiet period of `reset_after`.
                let mut streak = 1;
                for pair in failures.windows(2).rev() {
                    if pair[1].duration_since(pair[0]) > reset_after {
                        break;
                    }
                    streak += 1;
                }
                let base = self.restart_delay.as_secs_f64() * multiplier.max(1.0).powi(streak - 1);
                let base = base.min(max_delay.as_secs_f64());
                // Spread restarts of many jobs: a pseudo-random ± jitter.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0);
                let unit = (nanos % 2001) as f64 / 1000.0 - 1.0;
                Some(Duration::from_secs_f64(
                    (base * (1.0 + jitter.clamp(0.0, 1.0) * unit)).max(0.0),
                ))
            }
        }
    }
}

fn default_checkpoint_timeout() -> Duration {
    Duration::from_secs(600)
}

fn default_true() -> bool {
    true
}

fn default_retained() -> usize {
    3
}

fn default_restart_attempts() -> u32 {
    3
}

fn default_restart_delay() -> Duration {
    Duration::from_secs(1)
}

/// A PEM certificate chain and its private key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsFiles {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
}

/// Limits on what a Flight sink retains; the oldest batches go first once
/// any limit is exceeded. Readers that fall behind get a clear error
/// naming the dropped rows rather than a silent gap. A read-committed sink
/// applies them to committed rows; rows waiting for their checkpoint are
/// held by the sink task until it completes (one checkpoint interval of
/// output), never dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SinkRetention {
    /// Keep at most this many rows.
    pub max_rows: Option<usize>,
    /// Keep at most this many bytes of Arrow memory.
    pub max_bytes: Option<usize>,
    /// Drop batches older than this.
    pub max_age: Option<Duration>,
}

/// Default bytes a Flight sink retains: 256 MiB.
pub const DEFAULT_SINK_RETENTION_BYTES: usize = 256 << 20;

impl Default for SinkRetention {
    fn default() -> Self {
        Self {
            max_rows: None,
            max_bytes: Some(DEFAULT_SINK_RETENTION_BYTES),
            max_age: None,
        }
    }
}

/// A credential: compared and used, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a credential; empty ones are refused.
    pub fn new(value: impl Into<String>) -> Result<Self> {
        let value = value.into();
        if value.trim().is_empty() {
            return Err(WeirError::Config("a token must not be empty".into()));
        }
        Ok(Self(value))
    }

    /// The credential itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Default for WeirConfig {
    fn default() -> Self {
        Self {
            batch_size: 8192,
            batch_linger: Duration::from_millis(5),
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            default_parallelism: 1,
            channel_capacity: 4,
            runtime_mode: RuntimeMode::Streaming,
            chaining_enabled: true,
            watermark_interval: Duration::from_millis(200),
            exchange: ExchangeMode::Local,
            exchange_compression: ExchangeCompression::None,
            sink_bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            sink_token: None,
            sink_retention: SinkRetention::default(),
            sink_tls: None,
            sink_read_uncommitted: false,
            checkpoint_interval: None,
            checkpoint_dir: None,
            checkpoint_mode: CheckpointingMode::ExactlyOnce,
            checkpoint_unaligned: false,
            checkpoint_aligned_timeout: None,
            checkpoint_unaligned_read_ahead: default_read_ahead(),
            checkpoint_min_pause: Duration::ZERO,
            checkpoint_tolerable_failures: None,
            checkpoint_timeout: default_checkpoint_timeout(),
            checkpoint_incremental: false,
            live_metrics: true,
            checkpoint_retained: default_retained(),
            restart_attempts: default_restart_attempts(),
            restart_delay: default_restart_delay(),
            restart_strategy: RestartStrategy::default(),
            restore_from: None,
            allow_non_restored_state: false,
            state: Default::default(),
        }
    }
}

fn default_read_ahead() -> usize {
    64 * 1024 * 1024
}

fn parse_env<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| WeirError::Config(format!("{name}={v:?} is not a valid value"))),
        Err(_) => Ok(None),
    }
}

impl WeirConfig {
    /// Overlay `WEIR_*` environment variables on this configuration.
    pub fn with_env(mut self) -> Result<Self> {
        if let Some(v) = parse_env("WEIR_BATCH_SIZE")? {
            self.batch_size = v;
        }
        if let Some(v) = parse_env::<u64>("WEIR_BATCH_LINGER_MS")? {
            self.batch_linger = Duration::from_millis(v);
        }
        if let Some(v) = parse_env("WEIR_MAX_PARALLELISM")? {
            self.max_parallelism = v;
        }
        if let Some(v) = parse_env("WEIR_PARALLELISM")? {
            self.default_parallelism = v;
        }
        if let Some(v) = parse_env::<u64>("WEIR_WATERMARK_INTERVAL_MS")? {
            self.watermark_interval = Duration::from_millis(v);
        }
        if let Some(v) = parse_env::<u64>("WEIR_CHECKPOINT_INTERVAL_MS")? {
            self.checkpoint_interval = Some(Duration::from_millis(v));
        }
        if let Some(v) = parse_env::<u64>("WEIR_CHECKPOINT_ALIGNED_TIMEOUT_MS")? {
            self.checkpoint_aligned_timeout = Some(Duration::from_millis(v));
        }
        if let Some(v) = parse_env("WEIR_CHECKPOINT_TOLERABLE_FAILURES")? {
            self.checkpoint_tolerable_failures = Some(v);
        }
        if let Ok(v) = std::env::var("WEIR_CHECKPOINT_MODE") {
            self.checkpoint_mode = match v.trim() {
                "exactly-once" | "EXACTLY_ONCE" => CheckpointingMode::ExactlyOnce,
                "at-least-once" | "AT_LEAST_ONCE" => CheckpointingMode::AtLeastOnce,
                other => {
                    return Err(WeirError::Config(format!(
                        "WEIR_CHECKPOINT_MODE={other:?}: use exactly-once or at-least-once"
                    )));
                }
            };
        }
        if let Some(v) = parse_env("WEIR_CHECKPOINT_INCREMENTAL")? {
            self.checkpoint_incremental = v;
        }
        if let Some(v) = parse_env("WEIR_LIVE_METRICS")? {
            self.live_metrics = v;
        }
        if let Some(v) = parse_env("WEIR_CHECKPOINT_UNALIGNED")? {
            self.checkpoint_unaligned = v;
        }
        if let Ok(v) = std::env::var("WEIR_SAVEPOINT_PATH") {
            self.restore_from = Some(v);
        }
        if let Ok(v) = std::env::var("WEIR_CHECKPOINT_DIR") {
            self.checkpoint_dir = Some(v);
        }
        if let Some(v) = parse_env("WEIR_SINK_READ_UNCOMMITTED")? {
            self.sink_read_uncommitted = v;
        }
        if let Some(v) = parse_env("WEIR_RESTART_ATTEMPTS")? {
            self.restart_attempts = v;
        }
        if let Some(v) = parse_env::<u64>("WEIR_RESTART_DELAY_MS")? {
            self.restart_delay = Duration::from_millis(v);
        }
        if let Ok(v) = std::env::var("WEIR_RESTART_STRATEGY") {
            self.restart_strategy = match v.to_ascii_lowercase().as_str() {
                "fixed-delay" => RestartStrategy::FixedDelay,
                "exponential-delay" => RestartStrategy::ExponentialDelay {
                    max_delay: Duration::from_secs(60),
                    multiplier: 2.0,
                    jitter: 0.1,
                    reset_after: Duration::from_secs(3600),
                },
                "failure-rate" => RestartStrategy::FailureRate {
                    max_failures: self.restart_attempts,
                    interval: Duration::from_secs(60),
                },
                "none" => RestartStrategy::None,
                _ => {
                    return Err(WeirError::Config(format!(
                        "WEIR_RESTART_STRATEGY={v:?}: expected fixed-delay, exponential-delay, \
                         failure-rate or none"
                    )));
                }
            };
        }
        if let Some(v) = parse_env("WEIR_CHANNEL_CAPACITY")? {
            self.channel_capacity = v;
        }
        if let Some(v) = parse_env("WEIR_SINK_BIND")? {
            self.sink_bind = v;
        }
        if let Ok(v) = std::env::var("WEIR_SINK_TOKEN") {
            self.sink_token = Some(Secret::new(v)?);
        }
        if let Some(v) = parse_env("WEIR_SINK_RETENTION_ROWS")? {
            self.sink_retention.max_rows = Some(v);
        }
        if let Some(v) = parse_env("WEIR_SINK_RETENTION_BYTES")? {
            self.sink_retention.max_bytes = Some(v);
        }
        if let Some(v) = parse_env::<u64>("WEIR_SINK_RETENTION_SECS")? {
            self.sink_retention.max_age = Some(Duration::from_secs(v));
        }
        match (
            std::env::var_os("WEIR_SINK_TLS_CERT"),
            std::env::var_os("WEIR_SINK_TLS_KEY"),
        ) {
            (Some(cert), Some(key)) => {
                self.sink_tls = Some(TlsFiles {
                    cert: cert.into(),
                    key: key.into(),
                })
            }
            (None, None) => {}
            _ => {
                return Err(WeirError::Config(
                    "WEIR_SINK_TLS_CERT and WEIR_SINK_TLS_KEY go together: set both or neither"
                        .into(),
                ));
            }
        }
        if let Ok(v) = std::env::var("WEIR_EXCHANGE") {
            self.exchange = match v.to_ascii_lowercase().as_str() {
                "local" => ExchangeMode::Local,
                "flight" => ExchangeMode::Flight,
                _ => {
                    return Err(WeirError::Config(format!(
                        "WEIR_EXCHANGE={v:?}: expected 'local' or 'flight'"
                    )));
                }
            };
        }
        if let Ok(v) = std::env::var("WEIR_EXCHANGE_COMPRESSION") {
            self.exchange_compression = ExchangeCompression::parse(&v).ok_or_else(|| {
                WeirError::Config(format!(
                    "WEIR_EXCHANGE_COMPRESSION={v:?}: expected 'none', 'lz4' or 'zstd'"
                ))
            })?;
        }
        if let Ok(v) = std::env::var("WEIR_RUNTIME_MODE") {
            self.runtime_mode = match v.to_ascii_lowercase().as_str() {
                "streaming" => RuntimeMode::Streaming,
                "batch" => RuntimeMode::Batch,
                _ => {
                    return Err(WeirError::Config(format!(
                        "WEIR_RUNTIME_MODE={v:?}: expected 'streaming' or 'batch'"
                    )));
                }
            };
        }
        self.state.apply_env()?;
        self.validate()?;
        Ok(self)
    }

    /// Check every value is in range.
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(WeirError::Config("batch_size must be at least 1".into()));
        }
        if self.max_parallelism == 0 || self.max_parallelism > 32768 {
            return Err(WeirError::Config(format!(
                "max_parallelism {} must be in 1..=32768",
                self.max_parallelism
            )));
        }
        if self.default_parallelism == 0 {
            return Err(WeirError::Config("parallelism must be at least 1".into()));
        }
        if self.checkpoint_interval.is_some_and(|i| i.is_zero()) {
            return Err(WeirError::Config(
                "checkpoint_interval must be positive".into(),
            ));
        }
        if self.checkpoint_mode == CheckpointingMode::AtLeastOnce
            && (self.checkpoint_unaligned || self.checkpoint_aligned_timeout.is_some())
        {
            return Err(WeirError::Config(
                "unaligned checkpoints (and the aligned-checkpoint timeout) need the \
                 exactly-once checkpoint mode; at-least-once never aligns"
                    .into(),
            ));
        }
        if self.checkpoint_incremental && self.checkpoint_retained < 2 {
            return Err(WeirError::Config(
                "incremental checkpoints need checkpoint_retained of at least 2".into(),
            ));
        }
        if self.channel_capacity == 0 {
            return Err(WeirError::Config(
                "channel_capacity must be at least 1".into(),
            ));
        }
        if !self.sink_bind.ip().is_loopback() && self.sink_token.is_none() {
            return Err(WeirError::Config(format!(
                "sink_bind {} is reachable from other hosts: set sink_token \
                 (WEIR_SINK_TOKEN) so remote Flight clients must authenticate",
                self.sink_bind
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_strategies_pace_and_stop_restarts() {
        use std::time::Instant;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let fixed = WeirConfig {
            restart_attempts: 2,
            ..Default::default()
        };
        assert_eq!(
            fixed.restart_delay_after(&[at(0)]),
            Some(Duration::from_secs(1))
        );
        assert_eq!(fixed.restart_delay_after(&[at(0), at(1), at(2)]), None);
        let rate = WeirConfig {
            restart_strategy: RestartStrategy::FailureRate {
                max_failures: 2,
                interval: Duration::from_secs(10),
            },
            ..Default::default()
        };
        assert!(
            rate.restart_delay_after(&[at(0), at(20_000), at(40_000)])
                .is_some()
        );
        assert!(
            rate.restart_delay_after(&[at(0), at(1_000), at(2_000)])
                .is_none()
        );
        let exp = WeirConfig {
            restart_delay: Duration::from_millis(100),
            restart_strategy: RestartStrategy::ExponentialDelay {
                max_delay: Duration::from_millis(350),
                multiplier: 2.0,
                jitter: 0.0,
                reset_after: Duration::from_secs(5),
            },
            ..Default::default()
        };
        let d = |f: &[Instant]| exp.restart_delay_after(f).unwrap().as_millis();
        assert_eq!(d(&[at(0)]), 100);
        assert_eq!(d(&[at(0), at(10)]), 200);
        assert_eq!(d(&[at(0), at(10), at(20)]), 350);
        assert_eq!(
            d(&[at(0), at(10), at(20), at(60_000)]),
            100,
            "reset after a quiet period"
        );
        let none = WeirConfig {
            restart_strategy: RestartStrategy::None,
            ..Default::default()
        };
        assert_eq!(none.restart_delay_after(&[at(0)]), None);
    }

    #[test]
    fn defaults_are_valid() {
        WeirConfig::default().validate().unwrap();
    }

    #[test]
    fn invalid_values_are_rejected() {
        let c = WeirConfig {
            max_parallelism: 0,
            ..Default::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("max_parallelism")
        );
    }

    #[test]
    fn remote_sink_listeners_need_a_token() {
        let mut c = WeirConfig {
            sink_bind: "0.0.0.0:8815".parse().unwrap(),
            ..Default::default()
        };
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("sink_token"), "{err}");
        c.sink_token = Some(Secret::new("s3cret").unwrap());
        c.validate().unwrap();
        assert!(
            !format!("{c:?}").contains("s3cret"),
            "tokens are never printed"
        );
        assert!(Secret::new("  ").is_err());
    }
}
