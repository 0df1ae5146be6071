//! Where keyed state lives and how much memory it may take: Flink's
//! `state.backend.type`, `state.backend.local-dir`,
//! `taskmanager.memory.managed.size` and `table.exec.state.ttl`.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Result, WeirError};

/// Which state backend keyed operators use (`state.backend.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateBackend {
    /// Every key's state in memory (Flink's `hashmap`). Over the managed
    /// memory budget, the task fails with a clear error.
    #[default]
    HashMap,
    /// Hot state in memory, the rest spilled to files under
    /// [`StateConfig::local_dir`]; the managed memory budget bounds what
    /// stays in memory. `rocksdb` is accepted as its name, so Flink
    /// scripts run unchanged.
    Disk,
}

impl StateBackend {
    /// The backend of a `state.backend.type` value.
    pub fn parse(value: &str) -> Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "hashmap" | "heap" | "memory" => Ok(Self::HashMap),
            "disk" | "rocksdb" | "embedded" => Ok(Self::Disk),
            _ => Err(WeirError::Config(format!(
                "state.backend.type = '{value}': expected 'hashmap' or 'disk' ('rocksdb' names the disk backend)"
            ))),
        }
    }
}

/// Managed memory the disk backend takes when none is configured: 512 MiB
/// (about what Flink gives a default task manager).
pub const DEFAULT_DISK_BUDGET: usize = 512 << 20;

/// State settings of a job.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StateConfig {
    /// `state.backend.type`. Default `hashmap`. `WEIR_STATE_BACKEND`.
    pub backend: StateBackend,
    /// `state.backend.local-dir`: where the disk backend spills, each
    /// task in a folder of its own removed when the task ends. Default a
    /// `weir-state` folder in the temp dir. `WEIR_STATE_LOCAL_DIR`.
    pub local_dir: Option<PathBuf>,
    /// `taskmanager.memory.managed.size`: bytes of keyed state the tasks of
    /// a job may hold in memory in one process (shared by its tasks). The
    /// in-memory backend fails a task past it; the disk backend spills.
    /// Default: no limit in memory, [`DEFAULT_DISK_BUDGET`] on disk.
    /// `WEIR_MANAGED_MEMORY` (a size such as `2gb`).
    pub managed_memory: Option<usize>,
    /// `table.exec.state.ttl`: keyed state (group aggregates, Top-N and
    /// deduplication) not written for this long is dropped, in processing
    /// time, as Flink's state TTL. Default none: kept forever.
    pub ttl: Option<Duration>,
}

impl StateConfig {
    /// The memory budget in force: the configured one, else the disk
    /// backend's default, else none.
    pub fn budget(&self) -> Option<usize> {
        match (self.managed_memory, self.backend) {
            (Some(b), _) => Some(b),
            (None, StateBackend::Disk) => Some(DEFAULT_DISK_BUDGET),
            (None, StateBackend::HashMap) => None,
        }
    }

    /// The folder the disk backend spills into.
    pub fn spill_root(&self) -> PathBuf {
        self.local_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("weir-state"))
    }

    /// Overlay `WEIR_STATE_BACKEND`, `WEIR_STATE_LOCAL_DIR` and
    /// `WEIR_MANAGED_MEMORY`.
    pub fn apply_env(&mut self) -> Result<()> {
        if let Ok(v) = std::env::var("WEIR_STATE_BACKEND") {
            self.backend = StateBackend::parse(&v)?;
        }
        if let Some(v) = std::env::var_os("WEIR_STATE_LOCAL_DIR") {
            self.local_dir = Some(v.into());
        }
        if let Ok(v) = std::env::var("WEIR_MANAGED_MEMORY") {
            self.managed_memory = Some(
                parse_memory_size(&v)
                    .map_err(|e| WeirError::Config(format!("WEIR_MANAGED_MEMORY: {e}")))?,
            );
        }
        Ok(())
    }
}

/// A memory size as Flink writes them: a number and an optional unit,
/// `b`, `k`/`kb`, `m`/`mb`, `g`/`gb`, `t`/`tb` (powers of 1024, any case,
/// spaces allowed): `2gb`, `512 mb`, `1048576`.
pub fn parse_memory_size(text: &str) -> Result<usize> {
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let bad = || {
        WeirError::Config(format!(
            "'{text}' is not a memory size (a number with b, kb, mb, gb or tb)"
        ))
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    let shift = match unit.trim() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kib" | "kibibytes" => 10,
        "m" | "mb" | "mib" | "mebibytes" => 20,
        "g" | "gb" | "gib" | "gibibytes" => 30,
        "t" | "tb" | "tib" | "tebibytes" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_read_as_flink_writes_them() {
        assert_eq!(parse_memory_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_memory_size("2gb").unwrap(), 2 << 30);
        assert_eq!(parse_memory_size(" 512 MB ").unwrap(), 512 << 20);
        assert_eq!(parse_memory_size("64k").unwrap(), 64 << 10);
        assert_eq!(parse_memory_size("1g").unwrap(), 1 << 30);
        for bad in ["", "mb", "1.5gb", "12 parsecs", "-1"] {
            let e = parse_memory_size(bad).unwrap_err().to_string();
            assert!(e.contains("not a memory size"), "{bad}: {e}");
        }
    }

    #[test]
    fn rocksdb_names_the_disk_backend() {
        assert_eq!(StateBackend::parse("rocksdb").unwrap(), StateBackend::Disk);
        assert_eq!(
            StateBackend::parse("HashMap").unwrap(),
            StateBackend::HashMap
        );
        assert!(StateBackend::parse("forst").is_err());
    }

    #[test]
    fn the_disk_backend_has_a_default_budget() {
        let mut c = StateConfig::default();
        assert_eq!(c.budget(), None);
        c.backend = StateBackend::Disk;
        assert_eq!(c.budget(), Some(DEFAULT_DISK_BUDGET));
        c.managed_memory = Some(1 << 20);
        assert_eq!(c.budget(), Some(1 << 20));
    }
}
