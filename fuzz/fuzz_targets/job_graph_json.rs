//! Any bytes as a submitted job graph: decode and validate, then everything
//! the coordinator does with an accepted graph before deploying it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_core::graph::JobGraph;
use weir_fuzz_support::let_decoder_panics_be_caught;

#[allow(dead_code)]
mod weir_fuzz_support {
    include!("support.rs");
}

fuzz_target!(|data: &[u8]| {
    let_decoder_panics_be_caught();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(job) = JobGraph::from_json(text) {
        let graph = job.execution_graph();
        let _ = graph.subtasks.len();
        let _ = job.explain();
        // What was accepted must survive its own round trip.
        if let Ok(again) = job.to_json() {
            JobGraph::from_json(&again).expect("an accepted graph re-reads");
        }
    }
});
