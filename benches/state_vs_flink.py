"""An unbounded GROUP BY whose state outgrows memory: Weir's disk backend
against Flink 2.3's RocksDB backend, same query, same core, same run.

    python benches/state_vs_flink.py path/to/release/weir path/to/pyflink/python [KEYS] [BUDGET]

Both engines generate EVENTS = 2 x KEYS events with `datagen` (a sequence
id; the key is `id * 2654435761 % KEYS`, so keys arrive scattered, each
twice) and run

    SELECT k, COUNT(*), SUM(v) FROM events GROUP BY k

into a blackhole at parallelism 1, pinned to CPU 0 (`taskset -c 0`), with
the managed memory budget BUDGET (default 2gb): Weir with
`state.backend.type = 'disk'`, Flink with `rocksdb` (its defaults
otherwise: no mini-batch). KEYS defaults to 100,000,000.

Weir's time is its whole process (start, plan, work, exit); Flink's is the
job's time from submission to its end, its JVM start-up left out. The peak
resident set of each (GNU time's maximum RSS) is printed beside its rate,
and Weir's in-memory (`hashmap`) backend too when its state fits (KEYS up
to 20,000,000 here).
"""

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def source(keys):
    events = 2 * keys
    return (
        "CREATE TABLE events (id BIGINT, v BIGINT, k AS id * 2654435761 % {keys}) WITH ("
        "'connector' = 'datagen', 'number-of-rows' = '{events}', 'rows-per-second' = '1000000000', "
        "'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{last}', "
        "'fields.v.min' = '1', 'fields.v.max' = '100');\n"
        "CREATE TABLE out_t (k BIGINT, n BIGINT, s BIGINT) WITH ('connector' = 'blackhole');\n"
        "INSERT INTO out_t SELECT k, COUNT(*), SUM(v) FROM events GROUP BY k"
    ).format(keys=keys, events=events, last=events - 1)


def max_rss_mb(stderr):
    m = re.search(r"MAXRSS (\d+)", stderr)
    return int(m.group(1)) / 1024 if m else float("nan")


def weir_run(weir, backend, budget, keys, work):
    script = os.path.join(work, f"weir-{backend}.sql")
    with open(script, "w") as f:
        f.write("SET 'parallelism.default' = '1';\n")
        f.write(f"SET 'state.backend.type' = '{backend}';\n")
        if backend == "disk":
            f.write(f"SET 'taskmanager.memory.managed.size' = '{budget}';\n")
            f.write(f"SET 'state.backend.local-dir' = '{work}/state';\n")
        f.write(source(keys) + ";\n")
    start = time.perf_counter()
    o = subprocess.run(
        ["/usr/bin/time", "-f", "MAXRSS %M", "taskset", "-c", "0", weir, "run", "--quiet", script],
        capture_output=True,
        text=True,
    )
    if o.returncode != 0:
        sys.exit(f"weir failed: {o.stderr[-2000:]}")
    return time.perf_counter() - start, max_rss_mb(o.stderr)


FLINK_JOB = r"""
import sys, time
from pyflink.table import EnvironmentSettings, TableEnvironment
t = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
c = t.get_config()
c.set("parallelism.default", "1")
c.set("state.backend.type", "rocksdb")
c.set("state.backend.rocksdb.localdir", sys.argv[3])
c.set("taskmanager.memory.managed.size", sys.argv[2])
statements = [s.strip() for s in open(sys.argv[1]).read().split(";") if s.strip()]
for s in statements[:-1]:
    t.execute_sql(s)
start = time.perf_counter()
t.execute_sql(statements[-1]).wait()
print(time.perf_counter() - start)
"""


def flink_run(python, budget, keys, work):
    script = os.path.join(work, "flink-job.sql")
    with open(script, "w") as f:
        f.write(source(keys))
    driver = os.path.join(work, "flink_job.py")
    with open(driver, "w") as f:
        f.write(FLINK_JOB)
    o = subprocess.run(
        ["/usr/bin/time", "-f", "MAXRSS %M", "taskset", "-c", "0", python, driver, script, budget,
         os.path.join(work, "rocksdb")],
        capture_output=True,
        text=True,
    )
    if o.returncode != 0:
        sys.exit(f"flink failed: {o.stderr[-3000:]}")
    return float(o.stdout.strip().splitlines()[-1]), max_rss_mb(o.stderr)


def main():
    weir, python = sys.argv[1], sys.argv[2]
    keys = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000_000
    budget = sys.argv[4] if len(sys.argv) > 4 else "2gb"
    events = 2 * keys
    work = tempfile.mkdtemp(prefix="state-bench-")
    # Its files (events and outputs, gigabytes at times) go when the script ends.
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    print(f"GROUP BY over {keys:,} keys, {events:,} events, budget {budget}, one core")
    print(f"{'engine':<28} {'seconds':>9} {'events/s':>12} {'peak RSS MB':>12}")
    rows = []
    disk = weir_run(weir, "disk", budget, keys, work)
    rows.append(("Weir disk backend", disk))
    if keys <= 20_000_000:
        rows.append(("Weir hashmap backend", weir_run(weir, "hashmap", budget, keys, work)))
    flink = flink_run(python, budget, keys, work)
    rows.append(("Flink 2.3 RocksDB backend", flink))
    for name, (secs, rss) in rows:
        print(f"{name:<28} {secs:>9.1f} {events / secs:>12,.0f} {rss:>12,.0f}")
    print(f"Weir disk / Flink RocksDB: {flink[0] / disk[0]:.1f}x")


if __name__ == "__main__":
    main()
