"""Connector and format figures, measured side by side in one run:

1. JSON decoding: rows/s on one core of Weir's `json` format (a batch job
   reading a JSON-lines file into COUNT/SUM, `weir run` pinned with
   taskset, parallelism 1, the whole process timed) against DuckDB's
   `read_json` on the same file with one thread.
2. Parquet from S3: the same scan + filter + aggregate over the same file
   on local disk and in an S3-compatible server on loopback (moto), so the
   cost of object storage shows as a ratio; the filter selects a tenth of
   the rows, which are one row group in ten (the others are skipped by
   their statistics).

    python benches/connectors_bench.py path/to/release/weir [ROWS]

Needs duckdb, pyarrow, boto3 and moto_server (the test command's venv).
Each measurement is the best of 3. Results are checked equal.
"""

import csv
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import duckdb


def best(f, runs=3):
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = f()
        times.append(time.perf_counter() - start)
    return min(times), result


def pinned():
    return ["taskset", "-c", "0"] if shutil.which("taskset") else []


def weir_run(weir, work, script, env=None):
    path = os.path.join(work, "job.sql")
    with open(path, "w") as f:
        f.write(script)
    p = subprocess.run(pinned() + [weir, "run", path], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"weir failed:\n{p.stderr}")


def read_result(folder):
    rows = []
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if f.startswith(".") or f.startswith("_"):
                continue
            with open(os.path.join(dirpath, f)) as fh:
                rows.extend(tuple(int(v) for v in r) for r in csv.reader(fh))
    return sorted(rows)


def json_decode(weir, work, rows):
    data = os.path.join(work, "events.json")
    duckdb.sql(
        f"""COPY (SELECT i AS id, (hash(i) % 1000)::BIGINT AS user_id,
                   (hash(i * 7) % 100000)::BIGINT AS amount,
                   'item-' || (i % 977)::VARCHAR AS item,
                   TIMESTAMP '2023-11-14 22:13:20' + INTERVAL (i) MILLISECOND AS ts
                 FROM range({rows}) t(i))
            TO '{data}' (FORMAT json)"""
    )
    size = os.path.getsize(data)

    def run_weir():
        out = os.path.join(work, f"json-out-{time.time_ns()}")
        weir_run(
            weir,
            work,
            f"""SET 'execution.runtime-mode' = 'batch';
SET 'parallelism.default' = '1';
CREATE TABLE events (id BIGINT, user_id BIGINT, amount BIGINT, item STRING, ts TIMESTAMP(3))
  WITH ('connector' = 'filesystem', 'path' = '{data}', 'format' = 'json');
CREATE TABLE result (n BIGINT, total BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
INSERT INTO result SELECT COUNT(*), SUM(amount) FROM events;
""",
        )
        return read_result(out)

    def run_duckdb():
        db = duckdb.connect()
        db.execute("SET threads = 1")
        return sorted(
            db.execute(
                f"""SELECT COUNT(*), SUM(amount)::BIGINT FROM read_json('{data}',
                      format = 'newline_delimited',
                      columns = {{'id': 'BIGINT', 'user_id': 'BIGINT', 'amount': 'BIGINT',
                                  'item': 'VARCHAR', 'ts': 'TIMESTAMP'}})"""
            ).fetchall()
        )

    t_weir, r_weir = best(run_weir)
    t_duck, r_duck = best(run_duckdb)
    assert r_weir == [tuple(r) for r in r_duck], (r_weir, r_duck)
    print(f"JSON decode, {rows:,} rows ({size / 1e6:.0f} MB), one core:")
    print(f"  Weir   {rows / t_weir / 1e6:6.2f} M rows/s  ({t_weir:.2f} s, whole process)")
    print(f"  DuckDB {rows / t_duck / 1e6:6.2f} M rows/s  ({t_duck:.2f} s, in-process)")
    print(f"  ratio Weir/DuckDB {t_duck / t_weir:.2f}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parquet_s3(weir, work, rows):
    import boto3

    data = os.path.join(work, "orders.parquet")
    duckdb.sql(
        f"""COPY (SELECT i AS order_id, (hash(i) % 10000)::BIGINT AS user_id,
                   (100 + hash(i * 7) % 50000)::BIGINT AS amount
                 FROM range({rows}) t(i))
            TO '{data}' (FORMAT parquet, ROW_GROUP_SIZE {max(rows // 10, 1)})"""
    )
    server = os.environ.get("WEIR_TEST_MOTO_SERVER", "moto_server")
    port = free_port()
    moto = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        env = dict(os.environ, AWS_ENDPOINT=endpoint, AWS_ALLOW_HTTP="true",
                   AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench")
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
        for _ in range(100):
            try:
                s3.create_bucket(Bucket="bench")
                break
            except Exception:
                time.sleep(0.1)
        s3.upload_file(data, "bench", "orders/orders.parquet")

        def run(path):
            out = os.path.join(work, f"pq-out-{time.time_ns()}")
            weir_run(
                weir,
                work,
                f"""SET 'execution.runtime-mode' = 'batch';
SET 'parallelism.default' = '1';
CREATE TABLE orders (order_id BIGINT, user_id BIGINT, amount BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet');
CREATE TABLE result (user_id BIGINT, n BIGINT, total BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
INSERT INTO result SELECT user_id, COUNT(*), SUM(amount) FROM orders
  WHERE order_id < {rows // 10} GROUP BY user_id;
""",
                env=env,
            )
            return read_result(out)

        t_local, r_local = best(lambda: run(data))
        t_s3, r_s3 = best(lambda: run("s3://bench/orders"))
        assert r_local == r_s3
        print(f"Parquet scan + filter (1 row group in 10) + aggregate, {rows:,} rows, one core:")
        print(f"  local disk {t_local:.2f} s")
        print(f"  moto S3    {t_s3:.2f} s  (ratio S3/local {t_s3 / t_local:.2f})")
    finally:
        moto.kill()


def main():
    weir = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000_000
    work = tempfile.mkdtemp(prefix="connectors-bench-")
    json_decode(weir, work, rows)
    parquet_s3(weir, work, rows)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
