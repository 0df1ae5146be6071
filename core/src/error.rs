//! Typed errors shared by every Weir crate.

use arrow::error::ArrowError;
use datafusion_common::DataFusionError;

/// Result alias used throughout Weir.
pub type Result<T, E = WeirError> = std::result::Result<T, E>;

/// Everything that can go wrong while building or running a Weir job.
///
/// Variants keep their cause so that an error raised deep inside a task (a
/// malformed CSV line, a Parquet file without the key column) reaches the user
/// with the file, position and column that were wrong.
#[derive(Debug, thiserror::Error)]
pub enum WeirError {
    /// The job description is invalid; raised before anything runs.
    #[error("invalid job: {0}")]
    Plan(String),
    /// Input data could not be read or decoded.
    #[error("bad input in {location}: {message}")]
    BadInput {
        /// File (and where known line, row group or column) that was wrong.
        location: String,
        /// What was wrong.
        message: String,
    },
    /// An operating-system I/O error on a named path.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The path the error occurred on.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An Arrow kernel failed.
    #[error("arrow error: {0}")]
    Arrow(#[from] ArrowError),
    /// A DataFusion expression or aggregate failed.
    #[error("expression error: {0}")]
    DataFusion(#[from] DataFusionError),
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A subtask failed; carries the subtask name and the cause.
    #[error("task {task} failed: {source}")]
    Task {
        /// Subtask name, e.g. `Window(...) -> Sink (2/4)`.
        task: String,
        /// The underlying error.
        #[source]
        source: Box<WeirError>,
    },
    /// The job was cancelled by its user.
    #[error("job {0} was cancelled")]
    Cancelled(String),
    /// The runtime itself failed (a task panicked, a runtime could not start).
    #[error("execution error: {0}")]
    Execution(String),
    /// A channel's other end went away: an input ended before its end of
    /// stream, or the consumer of an output is gone, because the task there
    /// failed or was cancelled. A symptom of a failure elsewhere, never
    /// reported as a job's cause while the failure that caused it is known.
    #[error("{0}")]
    ChannelGone(String),
}

impl WeirError {
    /// Whether this is an echo of a failure elsewhere (a closed input, a
    /// cancellation) rather than a cause of its own.
    pub fn is_symptom(&self) -> bool {
        match self {
            WeirError::ChannelGone(_) => true,
            WeirError::Execution(m) => m == "cancelled",
            WeirError::Task { source, .. } => source.is_symptom(),
            _ => false,
        }
    }

    /// Shorthand for [`WeirError::Plan`].
    pub fn plan(msg: impl Into<String>) -> Self {
        Self::Plan(msg.into())
    }

    /// Shorthand for [`WeirError::BadInput`].
    pub fn bad_input(location: impl Into<String>, message: impl Into<String>) -> Self {
        Self::BadInput {
            location: location.into(),
            message: message.into(),
        }
    }

    /// Wrap an I/O error with the path it happened on.
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

thread_local! {
    static GUARDED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Run a third-party decoder (arrow-ipc, parquet, the CSV reader) over
/// bytes Weir did not write itself. Those decoders trust lengths and
/// offsets inside the data and panic on some they cannot satisfy; here a
/// panic becomes [`WeirError::BadInput`] at `location()` (made only then), so a damaged file or
/// request fails its job or call instead of taking the process down.
/// (Allocations a damaged length asks for are checked before decoding
/// where Weir can see them, e.g. the framing of Arrow IPC payloads.)
pub fn guard_decoder<T>(
    location: impl FnOnce() -> String,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    GUARDED.with(|c| c.set(c.get() + 1));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|c| c.set(c.get() - 1));
    out.unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the decoder gave up".into());
        Err(WeirError::bad_input(
            location(),
            format!("malformed data: {why}"),
        ))
    })
}

/// Whether this thread is inside [`guard_decoder`]: a panic hook that
/// aborts on every panic (a fuzzing harness) lets these through to be
/// caught and reported as bad input.
pub fn decoder_guarded_now() -> bool {
    GUARDED.with(|c| c.get() > 0)
}
