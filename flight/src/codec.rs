//! `StreamMessage` ⇄ `FlightData`.
//!
//! Data batches are Arrow IPC stream messages (a schema message, then
//! dictionary and record batch messages) as arrow's IPC writer makes them,
//! so any Flight decoder reads them. Watermarks, barriers, idleness and
//! end-of-stream travel in the same stream as `FlightData` messages without
//! an IPC body, their content in `app_metadata` (a tag byte and fixed-width
//! little-endian fields), so they keep their order relative to the data.

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow::record_batch::RecordBatch;
use arrow_flight::FlightData;
use bytes::Bytes;
use weir_core::config::ExchangeCompression;
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

/// Batches larger than this (in buffer bytes) travel as several messages,
/// zero-copy slices of the batch, as arrow-flight's encoder splits them.
const MAX_MESSAGE_BYTES: usize = 2 * 1024 * 1024;

/// Encodes the messages of one channel, in order.
///
/// The channel is one Arrow IPC stream: the schema message once, then for
/// each batch its dictionaries (sent again whenever they change, so a batch
/// never depends on state the receiver may not have) and the record batch,
/// as arrow's IPC stream writer sequences them, with one dictionary tracker
/// for the schema and the batches. Each batch's body is written into a
/// buffer sized by the previous one: growing it from empty, as arrow-flight's
/// encoder does for every batch, copied each body about once more while it
/// doubled and touched fresh pages (`perf record` of `benches/cluster.sh`:
/// 2.4% of the two workers' cycles).
pub struct MessageEncoder {
    schema: Option<SchemaRef>,
    generator: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    context: IpcWriteContext,
    options: IpcWriteOptions,
}

impl Default for MessageEncoder {
    fn default() -> Self {
        let mut context = IpcWriteContext::default();
        context.set_reserve_scratch(true);
        Self {
            schema: None,
            generator: IpcDataGenerator::default(),
            dictionaries: DictionaryTracker::new(false),
            context,
            options: IpcWriteOptions::default(),
        }
    }
}

impl MessageEncoder {
    /// An encoder whose batch bodies are compressed with `codec`: each
    /// buffer on its own (left as it is where compressing would not shrink
    /// it), as the IPC format's body compression has it, so the receiving
    /// decoder needs no setting.
    pub fn new(codec: ExchangeCompression) -> Result<Self> {
        use arrow::ipc::CompressionType;
        let codec = match codec {
            ExchangeCompression::None => return Ok(Self::default()),
            ExchangeCompression::Lz4 => CompressionType::LZ4_FRAME,
            ExchangeCompression::Zstd => CompressionType::ZSTD,
        };
        let options = IpcWriteOptions::default()
            .try_with_compression(Some(codec))
            .map_err(|e| WeirError::Config(format!("exchange compression: {e}")))?;
        Ok(Self {
            options,
            ..Self::default()
        })
    }

    /// The `FlightData` messages for `message`.
    pub fn encode(&mut self, message: &StreamMessage) -> Result<Vec<FlightData>> {
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
        let fail =
            |e: arrow::error::ArrowError| WeirError::Execution(format!("Flight encoding: {e}"));
        let mut frames = Vec::new();
        let schema = batch.schema();
        match &self.schema {
            Some(s) if s.fields() != schema.fields() => {
                return Err(WeirError::Execution(format!(
                    "a Flight channel carries one schema: got {schema:?} after {s:?}"
                )));
            }
            Some(_) => {}
            None => {
                let encoded = self.generator.schema_to_bytes_with_dictionary_tracker(
                    &schema,
                    &mut self.dictionaries,
                    &self.options,
                );
                frames.push(encoded.into());
                self.schema = Some(schema);
            }
        }
        for piece in split(batch) {
            let (dictionaries, encoded) = self
                .generator
                .encode(
                    &piece,
                    &mut self.dictionaries,
                    &self.options,
                    &mut self.context,
                )
                .map_err(fail)?;
            frames.extend(dictionaries.into_iter().map(FlightData::from));
            frames.push(encoded.into());
        }
        Ok(frames)
    }
}

/// `batch` in zero-copy slices of about [`MAX_MESSAGE_BYTES`] each.
fn split(batch: &RecordBatch) -> Vec<RecordBatch> {
    let bytes: usize = batch
        .columns()
        .iter()
        .map(|c| c.get_buffer_memory_size())
        .sum();
    let pieces = bytes.div_ceil(MAX_MESSAGE_BYTES).max(1);
    if pieces == 1 {
        return vec![batch.clone()];
    }
    let rows = batch.num_rows().div_ceil(pieces).max(1);
    (0..batch.num_rows())
        .step_by(rows)
        .map(|offset| batch.slice(offset, rows.min(batch.num_rows() - offset)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batches arrow-flight's decoder (the exchange server's) reads
    /// from `frames`.
    fn decode_all(frames: Vec<FlightData>) -> Vec<RecordBatch> {
        use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
        use futures::StreamExt;
        futures::executor::block_on(
            FlightDataDecoder::new(futures::stream::iter(frames.into_iter().map(Ok)))
                .filter_map(|d| async move {
                    match d.unwrap().payload {
                        DecodedPayload::RecordBatch(b) => Some(b),
                        _ => None,
                    }
                })
                .collect(),
        )
    }

    /// Batches read back equal through arrow-flight's decoder (the one the
    /// exchange server uses): dictionaries that change between batches, and
    /// a batch over the message limit, which arrives as several.
    #[test]
    fn batches_decode_as_sent_with_changing_dictionaries_and_splits() {
        use arrow::array::{ArrayRef, DictionaryArray, Int64Array};
        use arrow::datatypes::Int32Type;
        use std::sync::Arc;
        let batch = |from: i64, n: i64, words: &[&'static str]| {
            let dict: DictionaryArray<Int32Type> = (from..from + n)
                .map(|i| words[i as usize % words.len()])
                .collect();
            RecordBatch::try_from_iter([
                (
                    "n",
                    Arc::new(Int64Array::from_iter_values(from..from + n)) as ArrayRef,
                ),
                ("word", Arc::new(dict) as ArrayRef),
            ])
            .unwrap()
        };
        let sent = [
            batch(0, 10, &["alpha", "beta"]),
            batch(10, 10, &["gamma", "delta", "epsilon"]),
            // 8 bytes of n alone make 2.4 MiB: over the limit.
            batch(20, 300_000, &["zeta"]),
            batch(300_020, 5, &["alpha", "beta"]),
        ];
        let mut encoder = MessageEncoder::default();
        let mut frames = Vec::new();
        for b in &sent {
            frames.extend(encoder.encode(&StreamMessage::Data(b.clone())).unwrap());
        }
        let decoded = decode_all(frames);
        // The big batch came as more than one message.
        assert!(decoded.len() > sent.len(), "{} messages", decoded.len());
        let schema = sent[0].schema();
        assert_eq!(
            arrow::compute::concat_batches(&schema, &decoded).unwrap(),
            arrow::compute::concat_batches(&schema, &sent).unwrap()
        );
    }

    /// Compressed bodies are smaller for repetitive columns and decode
    /// back equal with no setting on the reading side.
    #[test]
    fn compressed_batches_are_smaller_and_decode_as_sent() {
        use arrow::array::{ArrayRef, Int64Array, StringArray};
        use std::sync::Arc;
        let batch = RecordBatch::try_from_iter([
            (
                "user",
                Arc::new(Int64Array::from_iter_values((0..50_000).map(|i| i % 100))) as ArrayRef,
            ),
            (
                "page",
                Arc::new(StringArray::from_iter_values(
                    (0..50_000).map(|i| format!("/page/{}", i % 7)),
                )) as ArrayRef,
            ),
        ])
        .unwrap();
        let body = |codec| {
            let mut encoder = MessageEncoder::new(codec).unwrap();
            let frames = encoder.encode(&StreamMessage::Data(batch.clone())).unwrap();
            let size = frames.iter().map(|f| f.data_body.len()).sum::<usize>();
            let decoded = decode_all(frames);
            assert_eq!(decoded, vec![batch.clone()], "{codec:?}");
            size
        };
        let plain = body(ExchangeCompression::None);
        for codec in [ExchangeCompression::Lz4, ExchangeCompression::Zstd] {
            let packed = body(codec);
            assert!(packed * 4 < plain, "{codec:?}: {packed} bytes of {plain}");
        }
    }

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
