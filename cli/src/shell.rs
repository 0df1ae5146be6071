//! `weir sql`: an interactive SQL shell on the embedded runtime, like
//! Flink's SQL client. Statements end with `;`. DDL and `SET` take effect
//! at once; an `INSERT` (or statement set) starts a job in the background;
//! a `SELECT` runs and shows its result as it changes — a live table
//! (`'sql-client.execution.result-mode' = 'table'`, the default: the
//! changelog applied, redrawn every second) or each change as it comes
//! (`'changelog'`). On a terminal, Enter stops a running `SELECT`; from a
//! pipe, a `SELECT` runs to its end. `QUIT;` or end of input leaves (and
//! cancels the background jobs).

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use weir_core::graph::JobClient;
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_sql::{SqlSession, StatementResult};

/// Run the shell over stdin; `init` statements run first.
pub fn run(init: Option<&std::path::Path>) -> Result<std::process::ExitCode, String> {
    let mut session = SqlSession::new();
    let mut background: Vec<Box<dyn JobClient>> = vec![];
    let interactive = std::io::stdin().is_terminal();
    if let Some(path) = init {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        execute(&mut session, &text, &mut background, false)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if interactive {
        println!(
            "Weir SQL shell. End statements with ';'. QUIT; leaves. Enter stops a running SELECT."
        );
    }
    let stdin = std::io::stdin();
    let mut buffer = String::new();
    let mut failed = false;
    loop {
        if interactive {
            print!(
                "{}",
                if buffer.trim().is_empty() {
                    "weir> "
                } else {
                    "  ..> "
                }
            );
            let _ = std::io::stdout().flush();
        }
        let mut line = String::new();
        if stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| e.to_string())?
            == 0
        {
            break;
        }
        buffer.push_str(&line);
        if !line.trim_end().ends_with(';') {
            continue;
        }
        let text = std::mem::take(&mut buffer);
        if text
            .trim()
            .trim_end_matches(';')
            .trim()
            .eq_ignore_ascii_case("quit")
            || text
                .trim()
                .trim_end_matches(';')
                .trim()
                .eq_ignore_ascii_case("exit")
        {
            break;
        }
        if let Err(e) = execute(&mut session, &text, &mut background, interactive) {
            eprintln!("error: {e}");
            failed = true;
        }
    }
    for job in &background {
        job.cancel();
    }
    Ok(if failed && !interactive {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

fn execute(
    session: &mut SqlSession,
    text: &str,
    background: &mut Vec<Box<dyn JobClient>>,
    interactive: bool,
) -> Result<(), String> {
    let results = session.execute_script(text).map_err(|e| e.to_string())?;
    let mut has_query = false;
    for r in &results {
        match r {
            StatementResult::Ok(m) => println!("[INFO] {m}"),
            StatementResult::Explain(t) => println!("{t}"),
            StatementResult::Options(o) => {
                for (k, v) in o {
                    println!("'{k}' = '{v}'");
                }
            }
            StatementResult::Query => has_query = true,
        }
    }
    if !session.has_job() {
        return Ok(());
    }
    let env = weir_worker::local_environment().map_err(|e| e.to_string())?;
    let handle = CollectHandle::new();
    let sink = handle.clone();
    let built = session.build_with(&env, &|| SinkSpec::from(sink.clone()));
    let name = session.job_name();
    session.clear_job();
    built.map_err(|e| e.to_string())?;
    let job = env.execute_async(&name).map_err(|e| e.to_string())?;
    if !has_query {
        println!("[INFO] job '{name}' started");
        background.push(job);
        return Ok(());
    }
    let changelog_mode = session
        .options()
        .get("sql-client.execution.result-mode")
        .is_some_and(|m| m.eq_ignore_ascii_case("changelog"));
    show(job, &handle, changelog_mode, interactive)
}

/// Follow a running SELECT until it ends (or Enter, on a terminal).
fn show(
    job: Box<dyn JobClient>,
    results: &CollectHandle,
    changelog_mode: bool,
    interactive: bool,
) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    if interactive {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
            stop.store(true, Ordering::SeqCst);
        });
    }
    let mut table: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    let mut header: Option<Vec<String>> = None;
    let mut seen = 0;
    let mut last_draw = Instant::now();
    loop {
        let finished = job.is_finished();
        let batches = results.batches();
        for b in &batches[seen..] {
            let (names, rows) = rows_of(b)?;
            if header.is_none() {
                header = Some(names.clone());
                if changelog_mode {
                    println!("{}", names.join(" | "));
                }
            }
            for (op, row) in rows {
                if changelog_mode {
                    println!("{op} {}", row.join(" | "));
                }
                *table.entry(row).or_default() += if op.starts_with('+') { 1 } else { -1 };
            }
        }
        seen = batches.len();
        if !changelog_mode && interactive && last_draw.elapsed() >= Duration::from_secs(1) {
            // Redraw the live table in place.
            print!("\x1b[2J\x1b[H");
            draw(header.as_deref(), &table, "running — Enter stops");
            last_draw = Instant::now();
        }
        if finished || stop.load(Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped = stop.load(Ordering::SeqCst) && !job.is_finished();
    if stopped {
        job.cancel();
    }
    let outcome = job.wait();
    if !changelog_mode {
        draw(
            header.as_deref(),
            &table,
            if stopped { "stopped" } else { "finished" },
        );
    }
    match outcome {
        Ok(_) => Ok(()),
        Err(_) if stopped => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// The rows of a batch as text, with their change kind (`+I` when the
/// result is not a changelog).
type Rows = Vec<(String, Vec<String>)>;

fn rows_of(b: &RecordBatch) -> Result<(Vec<String>, Rows), String> {
    let schema = b.schema();
    let op = weir_core::spec::is_changelog_schema(&schema).then(|| schema.fields().len() - 1);
    let options = FormatOptions::default().with_null("NULL");
    let formatters = b
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let names = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != op)
        .map(|(_, f)| f.name().clone())
        .collect();
    let ops = match op {
        Some(_) => Some(weir_core::changelog::row_kinds(b).map_err(|e| e.to_string())?),
        None => None,
    };
    let rows = (0..b.num_rows())
        .map(|r| {
            let kind = match ops {
                Some(o) => weir_core::changelog::row_kind_at(o, r).map_err(|e| e.to_string())?,
                None => weir_core::spec::RowKind::Insert,
            }
            .to_string();
            let values = formatters
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != op)
                .map(|(_, f)| f.value(r).to_string())
                .collect();
            Ok((kind, values))
        })
        .collect::<Result<_, String>>()?;
    Ok((names, rows))
}

fn draw(header: Option<&[String]>, table: &BTreeMap<Vec<String>, i64>, status: &str) {
    let rows: Vec<&Vec<String>> = table
        .iter()
        .flat_map(|(r, &n)| std::iter::repeat_n(r, n.max(0) as usize))
        .collect();
    let Some(header) = header else {
        println!("(no rows; {status})");
        return;
    };
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, v) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(v.len());
        }
    }
    let line = |cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("| {} |", parts.join(" | "))
    };
    let rule = format!(
        "+{}+",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+")
    );
    println!("{rule}\n{}\n{rule}", line(header));
    for r in &rows {
        println!("{}", line(r));
    }
    println!("{rule}\n{} row(s), {status}", rows.len());
}
