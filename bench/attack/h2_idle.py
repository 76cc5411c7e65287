#!/usr/bin/env python3
"""Idle HTTP/2 connections for bench/attack-check.sh: FULL h2c connections send the whole
preface and SETTINGS, answer the gateway's PINGs and send one PING of their own every
--ping-every seconds, but open no stream; HALF connections send half the preface
("PRI * HTTP/2.0\\r\\n") and then nothing. All wait until the gateway closes them or
--max-seconds.

Prints one line of key=value results on stdout (times in seconds from the connection's
last byte of preface); progress on stderr. Needs the `h2` package.
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

HALF_PREFACE = b"PRI * HTTP/2.0\r\n"


class Tally:
    def __init__(self):
        self.opened = 0
        self.failed = 0
        self.closed_at = []
        self.goaway = 0
        self.pings_acked = 0   # our PINGs the gateway answered
        self.still_open = 0


async def connect(a, t):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(a.host, a.port), 20)
    except (OSError, asyncio.TimeoutError):
        t.failed += 1
        return None
    t.opened += 1
    return r, w


async def wait_close(reader, t, sent, deadline, on_data=None):
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            t.still_open += 1
            return
        try:
            data = await asyncio.wait_for(reader.read(65536), min(left, 0.5))
        except asyncio.TimeoutError:
            if on_data:
                on_data(None)
            continue
        except OSError:
            data = b""
        if not data:
            t.closed_at.append(time.monotonic() - sent)
            return
        if on_data:
            on_data(data)


async def full(a, t, deadline):
    rw = await connect(a, t)
    if rw is None:
        return
    reader, writer = rw
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    writer.write(conn.data_to_send())
    sent = time.monotonic()
    next_ping = sent + a.ping_every

    goaway = False

    def on_data(data):
        nonlocal next_ping, goaway
        if data:
            try:
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.ConnectionTerminated):
                        goaway = True
                    elif isinstance(ev, h2.events.PingAckReceived):
                        t.pings_acked += 1
            except h2.exceptions.ProtocolError:
                # After a GOAWAY the h2 package refuses further frames (hyper's graceful
                # close sends a PING after its first GOAWAY); CLOSED means a GOAWAY came.
                goaway = goaway or conn.state_machine.state == h2.connection.ConnectionState.CLOSED
        if time.monotonic() >= next_ping:
            try:
                conn.ping(b"tollgate")
            except h2.exceptions.ProtocolError:
                pass
            next_ping = time.monotonic() + a.ping_every
        out = conn.data_to_send()
        if out:
            writer.write(out)

    try:
        await wait_close(reader, t, sent, deadline, on_data)
    finally:
        t.goaway += goaway
        writer.close()


async def half(a, t, deadline):
    rw = await connect(a, t)
    if rw is None:
        return
    reader, writer = rw
    writer.write(HALF_PREFACE)
    sent = time.monotonic()
    try:
        await wait_close(reader, t, sent, deadline)
    finally:
        writer.close()


def spread(xs):
    if not xs:
        return "-", "-", "-"
    return f"{min(xs):.1f}", f"{statistics.median(xs):.1f}", f"{max(xs):.1f}"


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--full", type=int, default=500)
    p.add_argument("--half", type=int, default=500)
    p.add_argument("--ping-every", type=float, default=1)
    p.add_argument("--max-seconds", type=float, default=60)
    a = p.parse_args()
    f, h = Tally(), Tally()
    deadline = time.monotonic() + a.max_seconds
    await asyncio.gather(*(full(a, f, deadline) for _ in range(a.full)),
                         *(half(a, h, deadline) for _ in range(a.half)))
    print(f"h2_idle: {f.opened} full and {h.opened} half-preface connections done",
          file=sys.stderr, flush=True)
    fs, hs = spread(f.closed_at), spread(h.closed_at)
    print(f"full={f.opened} full_failed={f.failed} full_closed={len(f.closed_at)} "
          f"full_goaway={f.goaway} full_pings_acked={f.pings_acked} full_min={fs[0]} "
          f"full_median={fs[1]} full_max={fs[2]} full_open={f.still_open} "
          f"half={h.opened} half_failed={h.failed} half_closed={len(h.closed_at)} "
          f"half_min={hs[0]} half_median={hs[1]} half_max={hs[2]} half_open={h.still_open}")


if __name__ == "__main__":
    asyncio.run(main())
