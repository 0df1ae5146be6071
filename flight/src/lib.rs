//! # weir-flight
//!
//! Arrow Flight between workers: the network implementation of
//! [`weir_core::channel`]'s `ChannelSender` / `ChannelReceiver`. Data batches
//! travel as Arrow IPC (arrow-flight's encoder, dictionaries sent with each
//! batch); watermarks, barriers, idleness and end-of-stream travel in
//! the same `do_put` stream as body-less messages whose `app_metadata`
//! carries them, so they keep their place relative to the data.
//!
//! It also holds the `flight` connector ([`connector`]): a sink Flight
//! clients read, kept in the process's [`sinkhub::SinkHub`], and a source
//! they push rows into ([`ingest`]).
//!
//! The design sketch encodes control messages as small control *batches*;
//! metadata-only Flight messages do the same job without inventing a batch
//! schema, and any Flight client still sees a valid stream.
#![warn(missing_docs)]

pub mod codec;
pub mod connector;
pub mod exchange;
pub mod ingest;
pub mod node;
pub mod peers;
pub mod sinkhub;
pub mod sinks;
pub mod token_file;

pub use connector::flight_sink;
pub use exchange::{ExchangeServer, FlightChannelSender, LazyFlightSender};
pub use node::{ActionHandler, Credentials, EpochFence, FlightNode, call_action};
pub use sinks::{SinkServer, TlsPem};
