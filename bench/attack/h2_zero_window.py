#!/usr/bin/env python3
"""HTTP/2 zero-window clients for bench/attack-check.sh: CONNS h2c connections (prior
knowledge) announce SETTINGS_INITIAL_WINDOW_SIZE = 0, open STREAMS streams each to PATH
and never send a WINDOW_UPDATE, so no response body can move. They answer PINGs (the h2
package does) and otherwise wait until the gateway closes the connection or --max-seconds.

Prints one line of key=value results on stdout (times in seconds from the requests);
progress on stderr. Needs the `h2` package.
"""

import argparse
import asyncio
import statistics
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings


class Tally:
    def __init__(self):
        self.streams = 0
        self.headers = {}      # status -> count
        self.resets = {}       # error code name -> count
        self.reset_at = []     # seconds after the request
        self.ended = 0         # whole body received (should not happen)
        self.data = 0          # DATA bytes received
        self.goaway_at = []
        self.closed_at = []
        self.still_open = 0
        self.failed = 0
        self.protocol_errors = 0


async def one(a, t, start):
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(a.host, a.port), 10)
    except (OSError, asyncio.TimeoutError):
        t.failed += 1
        return
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    for _ in range(a.streams):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"),
                                (":authority", f"{a.host}:{a.port}"), (":path", a.path)],
                          end_stream=True)
        t.streams += 1
    writer.write(conn.data_to_send())
    sent = time.monotonic()
    deadline = start + a.max_seconds
    goaway_at = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                t.still_open += 1
                return
            try:
                data = await asyncio.wait_for(reader.read(65536), left)
            except asyncio.TimeoutError:
                t.still_open += 1
                return
            if not data:
                t.closed_at.append(time.monotonic() - sent)
                return
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                # After a GOAWAY the h2 package refuses further frames (hyper's graceful
                # close sends a PING after its first GOAWAY); CLOSED means a GOAWAY came.
                events = []
                if conn.state_machine.state == h2.connection.ConnectionState.CLOSED:
                    goaway_at = goaway_at or time.monotonic() - sent
                else:
                    t.protocol_errors += 1
            for ev in events:
                if isinstance(ev, h2.events.ResponseReceived):
                    status = dict(ev.headers).get(b":status", b"?").decode()
                    t.headers[status] = t.headers.get(status, 0) + 1
                elif isinstance(ev, h2.events.DataReceived):
                    t.data += len(ev.data)  # never acknowledged: no WINDOW_UPDATE
                elif isinstance(ev, h2.events.StreamEnded):
                    t.ended += 1
                elif isinstance(ev, h2.events.StreamReset):
                    name = getattr(ev.error_code, "name", str(ev.error_code))
                    t.resets[name] = t.resets.get(name, 0) + 1
                    t.reset_at.append(time.monotonic() - sent)
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    goaway_at = goaway_at or time.monotonic() - sent
            out = conn.data_to_send()
            if out:
                writer.write(out)
    except OSError:
        t.closed_at.append(time.monotonic() - sent)
    finally:
        if goaway_at is not None:
            t.goaway_at.append(goaway_at)
        writer.close()


def spread(xs):
    if not xs:
        return "-", "-", "-"
    return f"{min(xs):.1f}", f"{statistics.median(xs):.1f}", f"{max(xs):.1f}"


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/big")
    p.add_argument("--conns", type=int, default=20)
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--max-seconds", type=float, default=90)
    a = p.parse_args()
    t = Tally()
    start = time.monotonic()
    await asyncio.gather(*(one(a, t, start) for _ in range(a.conns)))
    r = spread(t.reset_at)
    c = spread(t.closed_at)
    g = spread(t.goaway_at)
    statuses = ",".join(f"{k}:{v}" for k, v in sorted(t.headers.items())) or "-"
    resets = ",".join(f"{k}:{v}" for k, v in sorted(t.resets.items())) or "-"
    print(f"zero_window: {t.streams} streams on {a.conns - t.failed} connections done",
          file=sys.stderr, flush=True)
    print(f"conns={a.conns - t.failed} failed={t.failed} streams={t.streams} statuses={statuses} "
          f"resets={resets} reset_n={len(t.reset_at)} reset_min={r[0]} reset_median={r[1]} "
          f"reset_max={r[2]} ended={t.ended} data_bytes={t.data} goaway={len(t.goaway_at)} "
          f"goaway_median={g[1]} closed={len(t.closed_at)} closed_min={c[0]} "
          f"closed_median={c[1]} closed_max={c[2]} still_open={t.still_open} "
          f"protocol_errors={t.protocol_errors}")


if __name__ == "__main__":
    asyncio.run(main())
