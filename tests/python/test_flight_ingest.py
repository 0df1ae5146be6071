"""Flight ingestion: a pyarrow client pushes 1 M rows into a running job.

Started by scripts/test.sh with the path of the built `weir` binary. The
job (`weir run`, two subtasks, checkpoints every 300 ms) reads the `flight`
table `orders`, sums it per key and serves the changelog on the Flight sink
`totals`. A first client process pushes numbered batches and is killed with
SIGKILL part-way, with batches sent that no checkpoint covers yet; a second
one, under the same client name, asks the server where to resume (the
first acknowledgement of a put) and sends the rest. The totals read back
must be exactly those of the 1 M rows: nothing lost, nothing twice.

Run as `test_flight_ingest.py WEIR` (the test) or
`test_flight_ingest.py --client ADDR FIRST_BATCH ACK_FILE DELAY_MS`.
"""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight

BATCHES = 1000
ROWS_PER_BATCH = 1000
KEYS = 13
TOKEN = "ingest-test-token"
CLIENT = "loader-1"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])

JOB = """
SET 'execution.checkpointing.interval' = '300ms';
SET 'parallelism.default' = '2';
CREATE TABLE orders (k BIGINT, v BIGINT) WITH ('connector' = 'flight');
CREATE TABLE totals (k BIGINT, n BIGINT, s BIGINT) WITH ('connector' = 'flight');
INSERT INTO totals SELECT k, COUNT(*), SUM(v) FROM orders GROUP BY k;
"""


def options():
    return flight.FlightCallOptions(
        headers=[(b"authorization", f"Bearer {TOKEN}".encode())])


def rows_of(seq):
    """The rows of batch `seq` (1-based): v runs over 0..1M once."""
    first = (seq - 1) * ROWS_PER_BATCH
    v = pa.array(range(first, first + ROWS_PER_BATCH), pa.int64())
    k = pa.array([x % KEYS for x in range(first, first + ROWS_PER_BATCH)], pa.int64())
    return pa.record_batch([k, v], schema=SCHEMA)


def client(addr, ack_file, delay_ms):
    """Push batches from the server's last acknowledgement on; append each
    acknowledgement and each batch sent to `ack_file`."""
    c = flight.FlightClient(f"grpc://{addr}")
    writer, reader = c.do_put(
        flight.FlightDescriptor.for_path("orders", CLIENT), SCHEMA, options=options())
    first = json.loads(reader.read().to_pybytes())
    assert first["client"] == CLIENT, first
    start = (first["acked"] or 0) + 1
    log = open(ack_file, "a", buffering=1)
    log.write(f"resume {start}\n")
    acked = [first["acked"] or 0]

    def follow():
        while True:
            try:
                buf = reader.read()
            except flight.FlightError:
                return
            if buf is None:
                return
            a = json.loads(buf.to_pybytes())["acked"] or 0
            acked[0] = a
            log.write(f"acked {a}\n")

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    for seq in range(start, BATCHES + 1):
        writer.write_with_metadata(rows_of(seq), pa.py_buffer(str(seq).encode()))
        log.write(f"sent {seq}\n")
        if delay_ms:
            time.sleep(delay_ms / 1000)
    writer.done_writing()
    t.join(60)
    writer.close()
    assert acked[0] == BATCHES, f"the put ended with {acked[0]} of {BATCHES} acknowledged"
    log.write("done\n")


def log_lines(path):
    try:
        return open(path).read().split("\n")
    except FileNotFoundError:
        return []


def last(path, what):
    values = [int(line.split()[1]) for line in log_lines(path) if line.startswith(what + " ")]
    return max(values, default=0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Totals:
    """Follows the `totals` changelog in a thread."""

    def __init__(self, addr):
        self.state = {}
        self.rows = 0
        self.lock = threading.Lock()
        c = flight.FlightClient(f"grpc://{addr}")
        infos = {tuple(i.descriptor.path): i for i in c.list_flights(options=options())}
        info = infos[(b"totals",)]
        # A changelog ends with the row kind: Int8, Flink's RowKind byte values.
        assert info.schema.names == ["k", "n", "s", "$row_kind"], info.schema
        assert str(info.schema.field("$row_kind").type) == "int8", info.schema
        self.stream = c.do_get(info.endpoints[0].ticket, options=options())
        threading.Thread(target=self.follow, daemon=True).start()

    def follow(self):
        while True:
            try:
                chunk = self.stream.read_chunk()
            except (StopIteration, flight.FlightError):
                return
            with self.lock:
                for row in chunk.data.to_pylist():
                    self.rows += 1
                    if row["$row_kind"] in (0, 2):  # +I, +U
                        self.state[row["k"]] = (row["n"], row["s"])
                    else:
                        self.state.pop(row["k"], None)

    def snapshot(self):
        with self.lock:
            return dict(self.state)


def expected():
    out = {}
    for v in range(BATCHES * ROWS_PER_BATCH):
        n, s = out.get(v % KEYS, (0, 0))
        out[v % KEYS] = (n + 1, s + v)
    return out


def main(weir):
    work = tempfile.mkdtemp(prefix="flight-ingest-")
    # Its files (events and outputs, gigabytes at times) go when the script ends.
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    sql = os.path.join(work, "job.sql")
    with open(sql, "w") as f:
        f.write(JOB)
    port = free_port()
    addr = f"127.0.0.1:{port}"
    env = dict(os.environ, WEIR_TOKEN=TOKEN, WEIR_CHECKPOINT_DIR=os.path.join(work, "chk"))
    job = subprocess.Popen([weir, "run", "--flight-bind", addr, sql], env=env,
                           stderr=subprocess.PIPE, text=True)
    try:
        line = job.stderr.readline()
        assert line.startswith("worker 1 serves Flight on"), line
        # The job's source registers when it starts: wait for the sink too.
        deadline = time.time() + 60
        while True:
            try:
                names = [i.descriptor.path for i in flight.FlightClient(
                    f"grpc://{addr}").list_flights(options=options())]
                if [b"totals"] in names:
                    break
            except flight.FlightError:
                pass
            assert time.time() < deadline, "the job's Flight sink did not appear"
            time.sleep(0.1)

        # No token, no put.
        try:
            w, _ = flight.FlightClient(f"grpc://{addr}").do_put(
                flight.FlightDescriptor.for_path("orders", "intruder"), SCHEMA)
            w.write_with_metadata(rows_of(1), pa.py_buffer(b"1"))
            w.close()
            raise AssertionError("a put without the token was accepted")
        except flight.FlightUnauthenticatedError:
            pass

        totals = Totals(addr)
        acks = os.path.join(work, "acks.log")
        me = os.path.abspath(__file__)
        first = subprocess.Popen([sys.executable, me, "--client", addr, acks, "3"])
        # Kill the first client once checkpoints acknowledged some of its
        # batches, while it is still sending.
        deadline = time.time() + 60
        while last(acks, "acked") < 200:
            assert first.poll() is None, "the first client ended before it was killed"
            assert time.time() < deadline, "no acknowledgements within 60 s"
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait()
        sent, acked = last(acks, "sent"), last(acks, "acked")
        assert sent < BATCHES, "the first client sent everything before it was killed"
        print(f"first client killed after sending {sent} batches, {acked} acknowledged")

        second = subprocess.run([sys.executable, me, "--client", addr, acks, "0"], timeout=120)
        assert second.returncode == 0, "the resumed client failed"
        resumed = [int(line.split()[1]) for line in log_lines(acks) if line.startswith("resume")]
        # The kill may land between a write and its log line: the server can
        # hold (and acknowledge) one batch more than the log says was sent.
        assert resumed[0] == 1 and acked < resumed[1] <= sent + 2, (
            f"the resumed client started at batch {resumed[1]}; acknowledged {acked}, sent {sent}")
        print(f"second client resumed at batch {resumed[1]} and finished")

        want = expected()
        total = BATCHES * ROWS_PER_BATCH
        deadline = time.time() + 60
        while sum(n for n, _ in totals.snapshot().values()) < total:
            assert time.time() < deadline, (
                f"totals reached {sum(n for n, _ in totals.snapshot().values())} of {total} rows")
            time.sleep(0.05)
        # Anything taken twice would show up after the covering checkpoint.
        time.sleep(1.5)
        got = totals.snapshot()
        assert got == want, f"totals differ: got {sorted(got.items())[:3]}…, want {sorted(want.items())[:3]}…"
        print(f"flight ingestion: {total} rows exactly once through a killed client "
              f"({totals.rows} changelog rows read)")
    finally:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(10)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        client(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main(sys.argv[1])
