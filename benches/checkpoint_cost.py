"""What checkpoints every second cost: the quick-start job and Nexmark q5,
each with and without checkpoints, in one run on the same binary.

    python benches/checkpoint_cost.py path/to/release/weir [--rows N] [--events N] [--runs R]

- quick start: examples/sql/orders_per_minute.sql (parallelism 2, both
  cores) with N generated orders (default 200,000,000, so the job runs long
  enough for checkpoints to matter) and the print sink swapped for a
  blackhole;
- q5: sql/nexmark/q5.sql over the nexmark generator, N events (default
  30,000,000), parallelism 1, pinned to CPU 0.

"with" adds `execution.checkpointing.interval = 1 s` and a checkpoint folder
in a temporary directory (local disk). Runs alternate with and without, R
times each (default 3); the best time of each counts. Prints the times,
the checkpoints taken, and the throughput lost.
"""

import argparse
import atexit
import glob
import os
import re
import shutil
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def quick_start(rows):
    text = open(os.path.join(ROOT, "examples", "sql", "orders_per_minute.sql")).read()
    text = text.replace("'10000000'", f"'{rows}'")
    return text.replace("'connector' = 'print'", "'connector' = 'blackhole'")


def q5(events):
    ddl = open(os.path.join(ROOT, "sql", "nexmark", "ddl.sql")).read()
    ddl = ddl.replace("${TPS}", "10000000").replace("${EVENTS_NUM}", str(events))
    return "SET 'parallelism.default' = '1';\n" + ddl + open(os.path.join(ROOT, "sql", "nexmark", "q5.sql")).read()


def run(weir, text, cpus, checkpoints, work):
    folder = tempfile.mkdtemp(dir=work)
    script = os.path.join(folder, "job.sql")
    with open(script, "w") as f:
        if checkpoints:
            f.write("SET 'execution.checkpointing.interval' = '1 s';\n")
            f.write(f"SET 'execution.checkpointing.dir' = 'file://{folder}/checkpoints';\n")
        f.write(text)
    start = time.perf_counter()
    subprocess.run(["taskset", "-c", cpus, weir, "run", "--quiet", script], check=True,
                   capture_output=True, cwd=folder)
    took = time.perf_counter() - start
    taken = len(glob.glob(f"{folder}/checkpoints/**/_metadata", recursive=True))
    return took, taken


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("weir")
    ap.add_argument("--rows", type=int, default=200_000_000)
    ap.add_argument("--events", type=int, default=30_000_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="checkpoint-cost-")
    # Its files (events and outputs, gigabytes at times) go when the script ends.
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    jobs = [
        (f"quick start, {a.rows:,} rows, p=2", quick_start(a.rows), "0,1", a.rows),
        (f"Nexmark q5, {a.events:,} events, p=1", q5(a.events), "0", a.events),
    ]
    print(f"{'job':<40} {'without':>9} {'with 1 s':>9} {'checkpoints':>11} {'lost':>7}")
    for name, text, cpus, n in jobs:
        without, with_, taken = [], [], 0
        for _ in range(a.runs):
            without.append(run(a.weir, text, cpus, False, work)[0])
            t, c = run(a.weir, text, cpus, True, work)
            with_.append(t)
            taken = max(taken, c)
        b, w = min(without), min(with_)
        print(f"{name:<40} {b:>8.2f}s {w:>8.2f}s {taken:>11} {100 * (1 - b / w):>6.1f}%  "
              f"({n / b / 1e6:.2f} vs {n / w / 1e6:.2f} M/s)", flush=True)


if __name__ == "__main__":
    main()
