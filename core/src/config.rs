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
    /// Address the Flight endpoint serving a job's Flight sinks listens on.
    /// Default `127.0.0.1:0` (loopback, any free port). A non-loopback
    /// address requires [`sink_token`](Self::sink_token). `WEIR_SINK_BIND`.
    pub sink_bind: SocketAddr,
    /// Bearer token Flight clients must send (`authorization: Bearer <token>`)
    /// to list or read sinks. Default none (loopback only). `WEIR_SINK_TOKEN`.
    #[serde(skip)]
    pub sink_token: Option<Secret>,
    /// How much of its output a Flight sink keeps for clients. Default:
    /// everything. `WEIR_SINK_RETENTION_ROWS`, `WEIR_SINK_RETENTION_BYTES`,
    /// `WEIR_SINK_RETENTION_SECS`.
    pub sink_retention: SinkRetention,
    /// Serve Flight sinks over TLS with this certificate and key (PEM).
    /// Default none (plain HTTP/2). `WEIR_SINK_TLS_CERT` and
    /// `WEIR_SINK_TLS_KEY`, both or neither.
    pub sink_tls: Option<TlsFiles>,
    /// Checkpoint every this long (Flink's `execution.checkpointing.interval`).
    /// Default none: no checkpoints. `WEIR_CHECKPOINT_INTERVAL_MS`.
    #[serde(default)]
    pub checkpoint_interval: Option<Duration>,
    /// Where checkpoints go: a `file://` URL or path, or `memory://`. Each run
    /// writes under its own `{job}-{start ms}` folder. Default
    /// `{temp dir}/weir-checkpoints`. `WEIR_CHECKPOINT_DIR`.
    #[serde(default)]
    pub checkpoint_dir: Option<String>,
    /// A checkpoint not completed within this is abandoned. Default 10 min.
    #[serde(default = "default_checkpoint_timeout")]
    pub checkpoint_timeout: Duration,
    /// Completed checkpoints kept (`checkpoint.retained`). Default 3.
    #[serde(default = "default_retained")]
    pub checkpoint_retained: usize,
    /// Restarts after a failure (fixed-delay strategy) when the job
    /// checkpoints; each resumes from the latest completed checkpoint.
    /// Default 3. `WEIR_RESTART_ATTEMPTS`.
    #[serde(default = "default_restart_attempts")]
    pub restart_attempts: u32,
    /// Wait before a restart. Default 1 s. `WEIR_RESTART_DELAY_MS`.
    #[serde(default = "default_restart_delay")]
    pub restart_delay: Duration,
}

fn default_checkpoint_timeout() -> Duration {
    Duration::from_secs(600)
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
/// naming the dropped rows rather than a silent gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SinkRetention {
    /// Keep at most this many rows.
    pub max_rows: Option<usize>,
    /// Keep at most this many bytes of Arrow memory.
    pub max_bytes: Option<usize>,
    /// Drop batches older than this.
    pub max_age: Option<Duration>,
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
            sink_bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            sink_token: None,
            sink_retention: SinkRetention::default(),
            sink_tls: None,
            checkpoint_interval: None,
            checkpoint_dir: None,
            checkpoint_timeout: default_checkpoint_timeout(),
            checkpoint_retained: default_retained(),
            restart_attempts: default_restart_attempts(),
            restart_delay: default_restart_delay(),
        }
    }
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
        if let Ok(v) = std::env::var("WEIR_CHECKPOINT_DIR") {
            self.checkpoint_dir = Some(v);
        }
        if let Some(v) = parse_env("WEIR_RESTART_ATTEMPTS")? {
            self.restart_attempts = v;
        }
        if let Some(v) = parse_env::<u64>("WEIR_RESTART_DELAY_MS")? {
            self.restart_delay = Duration::from_millis(v);
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
