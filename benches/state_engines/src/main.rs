//! Two storage engines for keyed state larger than memory, one workload:
//! `SELECT k, COUNT(*), SUM(v) FROM events GROUP BY k` over EVENTS = 2 x
//! KEYS events whose key is `id * 2654435761 % KEYS` (keys scattered, each
//! seen twice; the events of `benches/state_vs_flink.py`).
//!
//!     cargo run --release --manifest-path benches/state_engines/Cargo.toml -- \
//!         path/to/release/weir [KEYS] [BUDGET_MB]
//!
//! - **Weir's disk backend**: `weir run` of the SQL above with
//!   `state.backend.type = 'disk'` and the budget as managed memory
//!   (hash partitions of columnar state, spilled whole as Arrow IPC).
//! - **fjall** (an embedded LSM-tree store written in Rust, the design of
//!   RocksDB): the state as one key-value pair per key — 8 key bytes, 16
//!   value bytes (count, sum) — with the budget as its block cache. Each
//!   batch of 8192 events is pre-aggregated per key in memory first (as a
//!   mini-batch operator would), then every distinct key is read,
//!   updated and written back in one write batch: the point-lookup path
//!   a key-value backend takes. The journal is not synced (Weir's spill
//!   files are not either); the changelog is not produced (Weir's is, into
//!   a blackhole), so the store gets the easier job.
//!
//! Both run in this process's CPU set: pin with `taskset -c 0` for a
//! per-core figure. Prints events/s of each and the ratio.

use std::process::Command;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: u64 = 8192;

fn key(id: u64, keys: u64) -> u64 {
    id.wrapping_mul(2_654_435_761) % keys
}

fn value(id: u64) -> i64 {
    (id % 100) as i64 + 1
}

fn fjall(keys: u64, budget_mb: u64, dir: &std::path::Path) -> Result<f64, fjall::Error> {
    let events = 2 * keys;
    let start = Instant::now();
    let store = fjall::Config::new(dir)
        .cache_size(budget_mb << 20)
        .manual_journal_persist(true)
        .open()?;
    let state = store.open_partition("groups", fjall::PartitionCreateOptions::default())?;
    let mut batch_keys: std::collections::HashMap<u64, (u64, i64)> = Default::default();
    let mut id = 0;
    while id < events {
        let end = (id + BATCH).min(events);
        batch_keys.clear();
        for i in id..end {
            let e = batch_keys.entry(key(i, keys)).or_default();
            e.0 += 1;
            e.1 += value(i);
        }
        let mut writes = store.batch();
        for (k, (n, s)) in &batch_keys {
            let kb = k.to_be_bytes();
            let (mut count, mut sum) = (0u64, 0i64);
            if let Some(old) = state.get(kb)? {
                count = u64::from_le_bytes(old[..8].try_into().unwrap());
                sum = i64::from_le_bytes(old[8..16].try_into().unwrap());
            }
            count += n;
            sum += s;
            let mut v = [0u8; 16];
            v[..8].copy_from_slice(&count.to_le_bytes());
            v[8..].copy_from_slice(&sum.to_le_bytes());
            writes.insert(&state, kb, v);
        }
        writes.commit()?;
        id = end;
    }
    // Check the result: every key counted twice.
    let probe = state
        .get(key(0, keys).to_be_bytes())?
        .expect("key 0 is stored");
    assert_eq!(u64::from_le_bytes(probe[..8].try_into().unwrap()), 2);
    Ok(events as f64 / start.elapsed().as_secs_f64())
}

fn weir(weir: &str, keys: u64, budget_mb: u64, dir: &std::path::Path) -> f64 {
    let events = 2 * keys;
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("job.sql");
    std::fs::write(
        &script,
        format!(
            "SET 'parallelism.default' = '1';
SET 'state.backend.type' = 'disk';
SET 'taskmanager.memory.managed.size' = '{budget_mb}mb';
SET 'state.backend.local-dir' = '{}';
CREATE TABLE events (id BIGINT, v BIGINT, k AS id * 2654435761 % {keys}) WITH (
 'connector' = 'datagen', 'number-of-rows' = '{events}', 'rows-per-second' = '1000000000',
 'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{}',
 'fields.v.min' = '1', 'fields.v.max' = '100');
CREATE TABLE out_t (k BIGINT, n BIGINT, s BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO out_t SELECT k, COUNT(*), SUM(v) FROM events GROUP BY k;
",
            dir.join("state").display(),
            events - 1
        ),
    )
    .unwrap();
    let start = Instant::now();
    let status = Command::new(weir)
        .args(["run", "--quiet"])
        .arg(&script)
        .status()
        .expect("weir runs");
    assert!(status.success(), "weir run failed");
    events as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let weir_bin = args
        .get(1)
        .expect("usage: state_engines WEIR [KEYS] [BUDGET_MB]");
    let keys: u64 = args.get(2).map_or(10_000_000, |k| k.parse().unwrap());
    let budget_mb: u64 = args.get(3).map_or(512, |b| b.parse().unwrap());
    let tmp = std::env::temp_dir().join(format!("weir-state-engines-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    println!("{keys} keys, {} events, budget {budget_mb} MiB", 2 * keys);
    let w = weir(weir_bin, keys, budget_mb, &tmp.join("weir"));
    println!("weir disk backend  {w:>12.0} events/s");
    let f = fjall(keys, budget_mb, &tmp.join("fjall")).expect("fjall runs");
    println!("fjall (LSM KV)     {f:>12.0} events/s");
    println!("weir / fjall       {:>12.1}x", w / f);
    let _ = std::fs::remove_dir_all(&tmp);
}
