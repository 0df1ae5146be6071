// Shared by the file-reader targets (included, not a module of its own).

/// Read every batch of a one-subtask source, bounded in polls.
pub fn read_all(spec: weir_core::spec::SourceSpec) {
    use weir_core::graph::{ChainingStrategy, StreamNode, StreamNodeKind};
    use weir_operators::sources::{SourcePoll, create_source};
    let node = StreamNode {
        id: 0,
        name: "fuzz".into(),
        uid: None,
        parallelism: 1,
        schema: spec.schema(),
        kind: StreamNodeKind::Source {
            spec,
            watermarks: weir_core::time::WatermarkStrategy::no_watermarks(),
        },
        chaining: ChainingStrategy::Always,
        side_outputs: vec![],
    };
    let ctx = weir_operators::OperatorContext {
        task_name: "fuzz (1/1)".into(),
        subtask: 0,
        parallelism: 1,
        key_groups: weir_core::keys::KeyGroupRange::for_subtask(0, 1, 128),
        config: Default::default(),
        connectors: Default::default(),
        memory: Default::default(),
        local_tasks: 1,
    };
    let Ok(mut source) = create_source(&node, &ctx) else {
        return;
    };
    for _ in 0..10_000 {
        match source.poll_next() {
            Ok(SourcePoll::Batch(_)) | Ok(SourcePoll::Pending(_)) => {}
            Ok(SourcePoll::Finished) | Err(_) => return,
        }
    }
}

/// libFuzzer's hook aborts on every panic; panics of third-party decoders
/// that Weir catches (`weir_core::error::guard_decoder`) must reach that
/// catch and become bad-input errors. Every other panic still aborts.
pub fn let_decoder_panics_be_caught() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !weir_core::error::decoder_guarded_now() {
                abort(info);
            }
        }));
    });
}
