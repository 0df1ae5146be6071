//! `StreamMessage` ⇄ `FlightData`.
//!
//! Data batches are Arrow IPC messages produced by arrow-flight's own
//! encoder, so any Flight decoder reads them. Watermarks, barriers, idleness and
//! end-of-stream travel in the same stream as `FlightData` messages without
//! an IPC body, their content in `app_metadata` (a tag byte and fixed-width
//! little-endian fields), so they keep their order relative to the data.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow_flight::FlightData;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoder, FlightDataEncoderBuilder};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use weir_core::message::{AlignmentMode, BarrierKind, CheckpointBarrier, StreamMessage, Watermark};
use weir_core::{Result, WeirError};

const WATERMARK: u8 = 1;
const BARRIER: u8 = 2;
const IDLE: u8 = 3;
const END_OF_STREAM: u8 = 4;

/// An IPC message with no header and no body: what Flight decoders expect
/// of a message that only carries `app_metadata`.
fn empty_ipc_message() -> Bytes {
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let mut message = arrow::ipc::MessageBuilder::new(&mut fbb);
    message.add_version(arrow::ipc::MetadataVersion::V5);
    message.add_header_type(arrow::ipc::MessageHeader::NONE);
    message.add_bodyLength(0);
    let root = message.finish();
    fbb.finish(root, None);
    Bytes::copy_from_slice(fbb.finished_data())
}

/// Encode a control message as `app_metadata`; `None` for data.
pub fn encode_control(message: &StreamMessage) -> Option<Bytes> {
    let mut b = Vec::with_capacity(19);
    match message {
        StreamMessage::Data(_) => return None,
        StreamMessage::Watermark(w) => {
            b.push(WATERMARK);
            b.extend_from_slice(&w.0.to_le_bytes());
        }
        StreamMessage::Barrier(barrier) | StreamMessage::PriorityBarrier(barrier) => {
            b.push(BARRIER);
            b.extend_from_slice(&barrier.id.to_le_bytes());
            b.extend_from_slice(&barrier.timestamp.to_le_bytes());
            b.push(match barrier.kind {
                BarrierKind::Checkpoint => 0,
                BarrierKind::Savepoint => 1,
                BarrierKind::SavepointDrain => 2,
                BarrierKind::SavepointSuspend => 3,
            });
            b.push(matches!(barrier.mode, AlignmentMode::Unaligned) as u8);
        }
        StreamMessage::Idle(idle) => {
            b.push(IDLE);
            b.push(*idle as u8);
        }
        StreamMessage::EndOfStream => b.push(END_OF_STREAM),
    }
    Some(Bytes::from(b))
}

/// Decode a control message from `app_metadata`.
pub fn decode_control(metadata: &[u8]) -> Result<StreamMessage> {
    let bad = || {
        WeirError::Execution(format!(
            "malformed control message {metadata:?} on a Flight channel"
        ))
    };
    let i64_at = |at: usize| -> Result<i64> {
        Ok(i64::from_le_bytes(
            metadata
                .get(at..at + 8)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        ))
    };
    match *metadata.first().ok_or_else(bad)? {
        WATERMARK => Ok(StreamMessage::Watermark(Watermark(i64_at(1)?))),
        BARRIER => {
            let flags = metadata.get(17..19).ok_or_else(bad)?;
            Ok(StreamMessage::Barrier(CheckpointBarrier {
                id: i64_at(1)? as u64,
                timestamp: i64_at(9)?,
                kind: match flags[0] {
                    0 => BarrierKind::Checkpoint,
                    1 => BarrierKind::Savepoint,
                    2 => BarrierKind::SavepointDrain,
                    3 => BarrierKind::SavepointSuspend,
                    _ => return Err(bad()),
                },
                mode: if flags[1] == 1 {
                    AlignmentMode::Unaligned
                } else {
                    AlignmentMode::Aligned
                },
            }))
        }
        IDLE => Ok(StreamMessage::Idle(*metadata.get(1).ok_or_else(bad)? == 1)),
        END_OF_STREAM => Ok(StreamMessage::EndOfStream),
        _ => Err(bad()),
    }
}

/// Encodes the messages of one channel, in order.
///
/// Batches go through one arrow-flight encoder for the channel's life: the
/// schema message is sent once, dictionaries with every batch
/// (`DictionaryHandling::Resend`, so a batch never depends on state the
/// receiver may not have). The encoder is fed a batch at a time and drained
/// until it waits for the next one, which keeps control messages in place.
#[derive(Default)]
pub struct MessageEncoder {
    schema: Option<SchemaRef>,
    input:
        Option<futures::channel::mpsc::UnboundedSender<arrow_flight::error::Result<RecordBatch>>>,
    encoder: Option<FlightDataEncoder>,
}

impl MessageEncoder {
    /// The `FlightData` messages for `message`.
    pub async fn encode(&mut self, message: &StreamMessage) -> Result<Vec<FlightData>> {
        if let Some(metadata) = encode_control(message) {
            return Ok(vec![FlightData {
                data_header: empty_ipc_message(),
                app_metadata: metadata,
                ..Default::default()
            }]);
        }
        let StreamMessage::Data(batch) = message else {
            unreachable!("every control message has metadata")
        };
        let schema = batch.schema();
        match &self.schema {
            Some(s) if s.fields() != schema.fields() => {
                return Err(WeirError::Execution(format!(
                    "a Flight channel carries one schema: got {schema:?} after {s:?}"
                )));
            }
            Some(_) => {}
            None => {
                let (tx, rx) = futures::channel::mpsc::unbounded();
                self.encoder = Some(
                    FlightDataEncoderBuilder::new()
                        .with_dictionary_handling(DictionaryHandling::Resend)
                        .build(rx),
                );
                self.input = Some(tx);
                self.schema = Some(schema);
            }
        }
        let (Some(input), Some(encoder)) = (&self.input, &mut self.encoder) else {
            unreachable!("set with the schema")
        };
        input
            .unbounded_send(Ok(batch.clone()))
            .map_err(|_| WeirError::Execution("Flight encoder input closed".into()))?;
        let mut frames = Vec::new();
        // Drain what this batch produced; the encoder then waits for input.
        while let Some(Some(frame)) = encoder.next().now_or_never() {
            frames.push(frame.map_err(|e| WeirError::Execution(format!("Flight encoding: {e}")))?);
        }
        Ok(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip() {
        let messages = [
            StreamMessage::Watermark(Watermark(i64::MIN)),
            StreamMessage::Watermark(Watermark(1_700_000_000_123)),
            StreamMessage::Barrier(CheckpointBarrier {
                id: u64::MAX,
                timestamp: -5,
                kind: BarrierKind::Checkpoint,
                mode: AlignmentMode::Unaligned,
            }),
            StreamMessage::Idle(false),
            StreamMessage::Idle(true),
            StreamMessage::EndOfStream,
        ];
        for m in messages {
            let bytes = encode_control(&m).unwrap();
            assert_eq!(
                format!("{:?}", decode_control(&bytes).unwrap()),
                format!("{m:?}")
            );
        }
    }

    #[test]
    fn malformed_control_messages_are_errors_not_panics() {
        for bad in [
            &[][..],
            &[9][..],
            &[WATERMARK, 1, 2][..],
            &[BARRIER, 0, 0][..],
        ] {
            assert!(decode_control(bad).is_err(), "{bad:?}");
        }
    }
}
