#!/usr/bin/env python3
"""Idle tunnels for bench/attack-check.sh: CONNS clients, --concurrency at a time, each
send a WebSocket upgrade request for PATH and then nothing. A client that gets 101 keeps
its socket until the gateway closes it (or --max-seconds); any other answer closes it.

Prints one line of key=value results on stdout: answers by status, how many came late
(more than 1 s after the request: the gateway had no slot to accept it sooner), and when
the tunnels closed (seconds after their 101). Progress on stderr.
"""

import argparse
import asyncio
import base64
import os
import statistics
import sys
import time


class Tally:
    def __init__(self):
        self.status = {}
        self.late = 0
        self.closed_at = []
        self.still_open = 0


async def one(a, t, gate, deadline):
    async with gate:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(a.host, a.port), a.answer_timeout)
        except (OSError, asyncio.TimeoutError):
            t.status["no-connect"] = t.status.get("no-connect", 0) + 1
            return
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write((f"GET {a.path} HTTP/1.1\r\nHost: {a.host}:{a.port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                      f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
        asked = time.monotonic()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), a.answer_timeout)
            status = head.split(b" ", 2)[1].decode()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, IndexError):
            status = "none"
        t.status[status] = t.status.get(status, 0) + 1
        if time.monotonic() - asked > 1:
            t.late += 1
    if status != "101":
        writer.close()
        return
    opened = time.monotonic()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                t.still_open += 1
                return
            try:
                data = await asyncio.wait_for(reader.read(65536), left)
            except asyncio.TimeoutError:
                continue
            except OSError:
                data = b""
            if not data:
                t.closed_at.append(time.monotonic() - opened)
                return
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
    p.add_argument("--path", default="/ws")
    p.add_argument("--conns", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--answer-timeout", type=float, default=20)
    p.add_argument("--max-seconds", type=float, default=60)
    a = p.parse_args()
    t = Tally()
    gate = asyncio.Semaphore(a.concurrency)
    deadline = time.monotonic() + a.max_seconds
    await asyncio.gather(*(one(a, t, gate, deadline) for _ in range(a.conns)))
    c = spread(t.closed_at)
    statuses = ",".join(f"{k}:{v}" for k, v in sorted(t.status.items())) or "-"
    print(f"idle_tunnels: {a.conns} upgrade attempts done", file=sys.stderr, flush=True)
    print(f"attempts={a.conns} statuses={statuses} s101={t.status.get('101', 0)} "
          f"s503={t.status.get('503', 0)} late={t.late} closed={len(t.closed_at)} "
          f"closed_min={c[0]} closed_median={c[1]} closed_max={c[2]} still_open={t.still_open}")


if __name__ == "__main__":
    asyncio.run(main())
