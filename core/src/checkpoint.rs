//! Checkpoint records shared by the coordinator, the workers and the
//! storage layer: which Parquet file holds which state, and the manifest
//! (`chk-{id}/_metadata`) that commits a checkpoint.

use serde::{Deserialize, Serialize};

/// One state table of one operator instance, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableHandle {
    /// State name (`panes`, `position`, `pending` …).
    pub name: String,
    /// Object path, relative to the checkpoint directory.
    pub path: String,
    /// First key group the table covers.
    pub key_group_start: u32,
    /// One past the last key group.
    pub key_group_end: u32,
    /// Rows written.
    pub rows: u64,
    /// Bytes written.
    pub bytes: u64,
    /// For a file of an incremental checkpoint (under `shared/`): its
    /// content key — operator, state, key groups, subtask and a hash of the
    /// rows. A later checkpoint whose table has the same key refers to the
    /// same file instead of writing it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<String>,
}

/// The state of one operator of one subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorHandle {
    /// Stream node id.
    pub node: usize,
    /// The operator's uid (its `uid()`, else `node-{id}`).
    pub uid: String,
    /// Its tables.
    pub tables: Vec<TableHandle>,
}

/// The state of one subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskHandle {
    /// Job vertex.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: usize,
    /// Operators with state, head first.
    pub operators: Vec<OperatorHandle>,
}

/// The commit record of a checkpoint (`chk-{id}/_metadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Job name.
    pub job_name: String,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Trigger time, ms since the epoch.
    pub timestamp_ms: i64,
    /// The job's key-group count.
    pub max_parallelism: u32,
    /// Every subtask's state.
    pub subtasks: Vec<SubtaskHandle>,
    /// The epoch of the coordinator that committed it, with an HA folder
    /// (a coordinator that no longer leads commits nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_epoch: Option<u64>,
}

impl Manifest {
    /// Total bytes of the checkpoint's files.
    pub fn bytes(&self) -> u64 {
        self.tables().map(|t| t.bytes).sum()
    }

    /// Bytes this checkpoint wrote itself — without the shared files of
    /// earlier checkpoints it refers to (its incremental size).
    pub fn written_bytes(&self) -> u64 {
        let own = format!("chk-{}/", self.checkpoint_id);
        let shared = format!("-c{}.parquet", self.checkpoint_id);
        self.tables()
            .filter(|t| t.path.starts_with(&own) || t.path.ends_with(&shared))
            .map(|t| t.bytes)
            .sum()
    }

    /// Every table of the checkpoint.
    pub fn tables(&self) -> impl Iterator<Item = &TableHandle> {
        self.subtasks
            .iter()
            .flat_map(|s| &s.operators)
            .flat_map(|o| &o.tables)
    }
}
