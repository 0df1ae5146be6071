//! # weir-state
//!
//! Keyed and operator state backends and their snapshots: one Parquet file
//! per (operator, key-group range, state table) in an `object_store`, and
//! the checkpoint manifest that commits them. The checkpoint issue fills this
//! crate; today keyed window state lives in the window operator
//! (`weir_operators::window`), organised per window pane.
#![warn(missing_docs)]

pub use weir_core::keys::KeyGroupRange;
