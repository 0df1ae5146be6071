"""A pyarrow.flight client lists and reads the Flight sink of a running job.

Started by scripts/test.sh with the path of the built `flight_sink_demo`
binary. The demo job emits n = 0..ROWS at a limited rate into the sink
`numbers`; the client connects while it runs, follows the sink to its end
and must receive every row exactly once. The sink requires a token: a
client without it, or with a wrong one, is refused.
"""

import os
import subprocess
import sys

import pyarrow.flight as flight

ROWS = 40_000
RATE = 20_000  # rows/s: the job runs for about two seconds
TOKEN = "pyarrow-test-token"


def main(binary: str) -> None:
    env = dict(os.environ, WEIR_SINK_TOKEN=TOKEN)
    job = subprocess.Popen(
        [binary, str(ROWS), str(RATE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        first = job.stdout.readline().split()
        assert first[:1] == ["endpoint"], f"unexpected first line {first!r}"
        client = flight.FlightClient(f"grpc://{first[1]}")

        for headers, expected in [([], "bearer token is required"),
                                  ([(b"authorization", b"Bearer wrong")], "invalid token")]:
            try:
                list(client.list_flights(options=flight.FlightCallOptions(headers=headers)))
                raise AssertionError("the sink server accepted a client without the token")
            except flight.FlightUnauthenticatedError as e:
                assert expected in str(e), str(e)

        options = flight.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {TOKEN}".encode())])
        infos = {tuple(p.decode() for p in i.descriptor.path): i
                 for i in client.list_flights(options=options)}
        assert ("numbers",) in infos, f"sink not listed: {list(infos)}"
        info = infos[("numbers",)]
        assert info.schema.names == ["n"], info.schema
        schema = client.get_schema(
            flight.FlightDescriptor.for_path("numbers"), options=options).schema
        assert schema.names == ["n"] and str(schema.field("n").type) == "int64", schema
        ticket = info.endpoints[0].ticket
        assert b"/" not in ticket.ticket, "tickets are opaque ids"
        running = job.poll() is None
        table = client.do_get(ticket, options=options).read_all()
        values = sorted(table.column("n").to_pylist())
        assert values == list(range(ROWS)), (
            f"read {len(values)} rows, expected exactly 0..{ROWS}")

        try:
            client.do_get(flight.Ticket(b"not-a-ticket"), options=options).read_all()
            raise AssertionError("an unknown ticket was accepted")
        except KeyError as e:  # pyarrow raises NOT_FOUND as ArrowKeyError
            assert "unknown ticket" in str(e), str(e)

        # The Flight login: handshake with basic credentials (the token as
        # password) returns the bearer header to send from then on.
        try:
            client.authenticate_basic_token(b"weir", b"wrong")
            raise AssertionError("a login with a wrong token was accepted")
        except flight.FlightUnauthenticatedError:
            pass
        login = client.authenticate_basic_token(b"weir", TOKEN.encode())
        logged_in = flight.FlightCallOptions(headers=[login])
        again = client.do_get(ticket, options=logged_in).read_all()
        assert again.num_rows == ROWS, again.num_rows

        last = job.stdout.readline().split()
        assert last == ["finished", str(ROWS)], f"unexpected line {last!r}"
        print(f"pyarrow.flight: read {len(values)} rows "
              f"(job running when the read began: {running})")
    finally:
        if job.poll() is None:
            job.stdin.close()
            try:
                job.wait(timeout=30)
            except subprocess.TimeoutExpired:
                job.kill()
    assert job.returncode == 0, f"the demo job exited with {job.returncode}"


if __name__ == "__main__":
    main(sys.argv[1])
