//! Any text through the SQL front end: parse, plan, lower to a job graph.
//! Errors are fine; a panic, a hang or an abort is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Planning may look at files a table names; keep the fuzzer away from
    // devices and the process's own tree.
    if text.contains("/dev") || text.contains("/proc") || text.contains("/sys") {
        return;
    }
    let mut session = weir_sql::SqlSession::new();
    if session.execute_script(text).is_err() || !session.has_job() {
        return;
    }
    let env = weir_core::api::StreamExecutionEnvironment::new(Default::default());
    if session.build(&env).is_ok() {
        let _ = env.job_graph("fuzz");
    }
});
