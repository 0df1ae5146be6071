//! # weir-flight
//!
//! Arrow Flight between workers and towards clients: the network
//! implementation of `weir_worker::channel::{ChannelSender, ChannelReceiver}`
//! (IPC batches plus in-band control batches for watermarks, barriers,
//! idleness and end-of-stream) and the client-facing sink endpoint. The
//! distributed-runtime issue fills this crate; in-process jobs use the local
//! channels of `weir-worker`, which have the same semantics.
#![warn(missing_docs)]

pub use weir_core::message::StreamMessage;
