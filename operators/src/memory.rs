//! The managed-memory budget keyed state draws from
//! (`taskmanager.memory.managed.size`).
//!
//! One [`StateMemory`] is made per job in each process and shared by its
//! tasks; every stateful operator holds a [`StateReservation`] sized to the
//! bytes its state takes. The pools are DataFusion's: a greedy pool for the
//! in-memory backend (the first operator past the budget fails its task
//! with a clear message instead of the process being killed by the OS),
//! and a fair spill pool for the disk backend (operators that spill get an
//! equal share each, and spill when they reach it).

use std::path::PathBuf;
use std::sync::Arc;

use datafusion_execution::memory_pool::{
    FairSpillPool, GreedyMemoryPool, MemoryConsumer, MemoryPool, MemoryReservation,
    UnboundedMemoryPool,
};
use weir_core::state_config::{StateBackend, StateConfig};
use weir_core::{Result, WeirError};

/// The memory budget of a job's tasks in one process, and where the disk
/// backend spills.
#[derive(Clone)]
pub struct StateMemory {
    pool: Arc<dyn MemoryPool>,
    limit: Option<usize>,
    backend: StateBackend,
    spill_root: PathBuf,
}

impl std::fmt::Debug for StateMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMemory")
            .field("limit", &self.limit)
            .field("backend", &self.backend)
            .field("reserved", &self.pool.reserved())
            .finish()
    }
}

impl Default for StateMemory {
    fn default() -> Self {
        Self::new(&StateConfig::default())
    }
}

impl StateMemory {
    /// The budget `config` sets, for one job in this process.
    pub fn new(config: &StateConfig) -> Self {
        let limit = config.budget();
        let pool: Arc<dyn MemoryPool> = match (limit, config.backend) {
            (None, _) => Arc::new(UnboundedMemoryPool::default()),
            (Some(l), StateBackend::HashMap) => Arc::new(GreedyMemoryPool::new(l)),
            (Some(l), StateBackend::Disk) => Arc::new(FairSpillPool::new(l)),
        };
        Self {
            pool,
            limit,
            backend: config.backend,
            spill_root: config.spill_root(),
        }
    }

    /// The backend in force.
    pub fn backend(&self) -> StateBackend {
        self.backend
    }

    /// The budget, if any.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// Bytes reserved by every operator of the job in this process.
    pub fn reserved(&self) -> usize {
        self.pool.reserved()
    }

    /// Where the disk backend spills.
    pub fn spill_root(&self) -> &std::path::Path {
        &self.spill_root
    }

    /// A reservation for operator `name`; `spills` when the operator can
    /// move state to disk instead of failing (disk backend only).
    pub fn reserve(&self, name: &str, spills: bool) -> StateReservation {
        let spills = spills && self.backend == StateBackend::Disk;
        StateReservation {
            inner: MemoryConsumer::new(name)
                .with_can_spill(spills)
                .register(&self.pool),
            pool: Arc::clone(&self.pool),
            limit: self.limit,
            backend: self.backend,
            spills,
            name: name.to_string(),
        }
    }
}

/// What one operator holds of the budget.
#[derive(Debug)]
pub struct StateReservation {
    inner: MemoryReservation,
    pool: Arc<dyn MemoryPool>,
    limit: Option<usize>,
    backend: StateBackend,
    spills: bool,
    name: String,
}

impl StateReservation {
    /// Hold `bytes` of state. `Ok(true)`: granted. `Ok(false)`: over the
    /// budget, and the operator spills (it should move state to disk and
    /// call again). Otherwise the error that fails the task.
    pub fn resize(&mut self, bytes: usize) -> Result<bool> {
        match self.inner.try_resize(bytes) {
            Ok(()) => Ok(true),
            Err(_) if self.spills => Ok(false),
            Err(_) => Err(self.exceeded(bytes)),
        }
    }

    /// Hold `bytes` whatever the budget says (state that cannot be made
    /// smaller: one spill partition alone over the budget).
    pub fn force(&mut self, bytes: usize) {
        self.inner.resize(bytes);
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.inner.size()
    }

    fn exceeded(&self, bytes: usize) -> WeirError {
        let limit = self.limit.unwrap_or(0);
        let advice = match self.backend {
            StateBackend::HashMap => {
                "use the disk backend (SET 'state.backend.type' = 'disk') or raise the budget"
            }
            StateBackend::Disk => {
                "this operator keeps its state in memory under the disk backend too: raise the budget"
            }
        };
        WeirError::Execution(format!(
            "{}: state exceeds {limit} bytes of managed memory (taskmanager.memory.managed.size; \
             this operator needs {bytes} bytes, the job's operators in this process hold {}): {advice}",
            self.name,
            self.pool.reserved()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_state_past_the_budget_fails_with_the_budget_named() {
        let memory = StateMemory::new(&StateConfig {
            managed_memory: Some(1000),
            ..Default::default()
        });
        let mut a = memory.reserve("GroupAggregate", true);
        let mut b = memory.reserve("TopN", false);
        assert!(a.resize(600).unwrap());
        assert!(b.resize(300).unwrap());
        let e = b.resize(500).unwrap_err().to_string();
        assert!(e.contains("TopN: state exceeds 1000 bytes"), "{e}");
        assert!(e.contains("state.backend.type"), "{e}");
        // Shrinking frees room for the others.
        assert!(a.resize(100).unwrap());
        assert!(b.resize(800).unwrap());
        assert_eq!(memory.reserved(), 900);
    }

    #[test]
    fn the_disk_backend_asks_spilling_operators_to_spill() {
        let memory = StateMemory::new(&StateConfig {
            backend: StateBackend::Disk,
            managed_memory: Some(1000),
            ..Default::default()
        });
        let mut a = memory.reserve("GroupAggregate", true);
        assert!(a.resize(900).unwrap());
        assert!(!a.resize(1100).unwrap());
        let mut b = memory.reserve("TopN", false);
        assert!(b.resize(50).unwrap());
    }

    #[test]
    fn no_budget_no_limit() {
        let memory = StateMemory::default();
        let mut a = memory.reserve("x", false);
        assert!(a.resize(usize::MAX / 4).unwrap());
    }
}
