//! # weir-kafka
//!
//! Flink's `kafka` connector for Weir — a source reading the partitions of
//! one or more topics with checkpointed offsets, and a sink with Flink's
//! delivery guarantees — on librdkafka (`rdkafka`, built from its bundled
//! source). Registered with [`register`] (the `weir` binary's workers do).
//!
//! Options are Flink's (`topic`, `properties.*`, `scan.startup.mode`,
//! `scan.bounded.mode`, `format` or `key.format` + `value.format`,
//! `sink.delivery-guarantee`, `sink.partitioner`, …), so a Flink SQL table
//! over Kafka moves unchanged. Values (and keys) are decoded by the format
//! registry a poll at a time and encoded a batch at a time.
#![warn(missing_docs)]

pub mod plan;
mod sink;
mod source;

use std::sync::Arc;

use weir_core::Result;
use weir_core::connector::{ConnectorOption, ConnectorSource, SinkSpec, TableDescriptor};
use weir_core::graph::StreamNode;
use weir_core::spec::SourceSpec;
use weir_operators::connectors::ConnectorFactory;
use weir_operators::{Operator, OperatorContext, Source};

pub use plan::KafkaPlan;

/// `'connector' = 'kafka'`.
pub struct Kafka;

fn planned_source(t: &TableDescriptor, upsert: bool) -> Result<SourceSpec> {
    let plan = plan::plan(t, upsert)?;
    let connector = if upsert { "upsert-kafka" } else { "kafka" };
    let bounded = plan.bounded != plan::Bounded::Unbounded;
    let display = format!(
        "{connector}({}{})",
        match &plan.topic_pattern {
            Some(p) => format!("pattern '{p}'"),
            None => plan.topics.join(";"),
        },
        if bounded { ", bounded" } else { "" }
    );
    Ok(SourceSpec::Connector(
        ConnectorSource::new(
            connector,
            source::rows_schema(&plan),
            bounded,
            planned(&plan)?,
        )
        .with_display(display)
        .with_options(t.options.clone())
        .with_changelog(source::changelog_mode(&plan)),
    ))
}

fn planned_sink(t: &TableDescriptor, upsert: bool) -> Result<SinkSpec> {
    let plan = plan::plan(t, upsert)?;
    let connector = if upsert { "upsert-kafka" } else { "kafka" };
    let Some(topic) = plan.topics.first() else {
        return Err(t.error("a Kafka sink writes one 'topic', not a 'topic-pattern'"));
    };
    let display = if upsert {
        format!("{connector}({topic})")
    } else {
        format!("{connector}({topic}, {})", plan.delivery)
    };
    Ok(SinkSpec::new(connector, planned(&plan)?)
        .with_display(display)
        .with_options(t.options.clone()))
}

fn planned(plan: &KafkaPlan) -> Result<serde_json::Value> {
    serde_json::to_value(plan).map_err(|e| weir_core::WeirError::plan(e.to_string()))
}

impl ConnectorFactory for Kafka {
    fn identifier(&self) -> &str {
        "kafka"
    }

    fn description(&self) -> &str {
        "topics of a Kafka cluster, read with checkpointed offsets and written with Flink's guarantees"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        plan::options(false)
    }

    fn is_source(&self) -> bool {
        true
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn delivery(&self) -> &str {
        "sink.delivery-guarantee: none, at-least-once (default) or exactly-once"
    }

    fn metadata(&self) -> Vec<weir_core::connector::MetadataKey> {
        plan::metadata_keys()
    }

    fn plan_source(&self, t: &TableDescriptor) -> Option<Result<SourceSpec>> {
        Some(planned_source(t, false))
    }

    fn plan_sink(&self, t: &TableDescriptor) -> Option<Result<SinkSpec>> {
        Some(planned_sink(t, false))
    }

    /// With a changelog format (`debezium-json`).
    fn accepts_changelog(&self, t: &TableDescriptor) -> Result<bool> {
        let format = t.option("format").or(t.option("value.format"));
        Ok(format.is_some_and(|f| {
            weir_operators::formats::formats()
                .get(f)
                .is_ok_and(|f| f.changelog())
        }))
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        source.planned_as::<KafkaPlan>().map(|_| ())
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        Some(source.planned_as::<KafkaPlan>().map(|plan| {
            Box::new(source::KafkaSource::new(
                plan,
                ctx.task_name.clone(),
                ctx.subtask,
                ctx.parallelism,
                ctx.config.batch_size,
            )) as Box<dyn Source>
        }))
    }

    fn open_sink(
        &self,
        sink: &SinkSpec,
        node: &StreamNode,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        Some((|| {
            let plan: KafkaPlan = sink.planned_as()?;
            Ok(Box::new(sink::KafkaSink::new(
                node.name.clone(),
                plan,
                Arc::clone(&node.schema),
                ctx.subtask,
                ctx.parallelism,
            )?) as Box<dyn Operator>)
        })())
    }
}

/// `'connector' = 'upsert-kafka'`: a topic as a table keyed by its
/// PRIMARY KEY — read as a changelog (a key's later value updates it, a
/// tombstone deletes it), written from an updating query as upserts.
pub struct UpsertKafka;

impl ConnectorFactory for UpsertKafka {
    fn identifier(&self) -> &str {
        "upsert-kafka"
    }

    fn description(&self) -> &str {
        "a compacted topic as a keyed table: upserts and tombstones, read as a changelog"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        plan::options(true)
    }

    fn is_source(&self) -> bool {
        true
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn delivery(&self) -> &str {
        "at-least-once (upserts are idempotent per key)"
    }

    fn plan_source(&self, t: &TableDescriptor) -> Option<Result<SourceSpec>> {
        Some(planned_source(t, true))
    }

    fn plan_sink(&self, t: &TableDescriptor) -> Option<Result<SinkSpec>> {
        Some(planned_sink(t, true))
    }

    fn accepts_changelog(&self, _: &TableDescriptor) -> Result<bool> {
        Ok(true)
    }

    /// Its PRIMARY KEY: the message key.
    fn sink_upsert_key(&self, t: &TableDescriptor) -> Result<Option<Vec<String>>> {
        Ok(Some(t.primary_key.clone()).filter(|k| !k.is_empty()))
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        Kafka.check_source(source)
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        Kafka.open_source(source, ctx)
    }

    fn open_sink(
        &self,
        sink: &SinkSpec,
        node: &StreamNode,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        Kafka.open_sink(sink, node, ctx)
    }
}

/// Register the Kafka connectors with a registry.
pub fn register(connectors: &mut weir_operators::connectors::Connectors) {
    connectors.register(Arc::new(Kafka));
    connectors.register(Arc::new(UpsertKafka));
}
