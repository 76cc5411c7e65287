#!/usr/bin/env python3
"""Slow readers for bench/attack-check.sh: CONNS HTTP/1.1 connections each send
`GET PATH` and then never read, until STOP_FILE exists (or --max-hold seconds). Then each
socket is read to its end (all at once, --drain seconds at most) to see what the gateway
had sent before it gave up, and whether it closed.

Prints one line of key=value results on stdout; progress on stderr.
"""

import argparse
import asyncio
import os
import socket
import statistics
import sys
import time


async def open_one(loop, host, port, request):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        await asyncio.wait_for(loop.sock_connect(s, (host, port)), 10)
        await asyncio.wait_for(loop.sock_sendall(s, request), 10)
    except (OSError, asyncio.TimeoutError):
        s.close()
        return None
    return s


async def drain(loop, s, deadline):
    """(bytes, how) where how is eof, reset or open (still open at the deadline)."""
    total, first = 0, b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return total, first, "open"
            data = await asyncio.wait_for(loop.sock_recv(s, 1 << 16), left)
            if not data:
                return total, first, "eof"
            if not first:
                first = data[:64]
            total += len(data)
    except asyncio.TimeoutError:
        return total, first, "open"
    except OSError:
        return total, first, "reset"
    finally:
        s.close()


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/big")
    p.add_argument("--conns", type=int, default=200)
    p.add_argument("--stop-file", required=True)
    p.add_argument("--max-hold", type=float, default=60)
    p.add_argument("--drain", type=float, default=20)
    a = p.parse_args()
    loop = asyncio.get_running_loop()
    request = f"GET {a.path} HTTP/1.1\r\nHost: {a.host}:{a.port}\r\n\r\n".encode()
    socks = await asyncio.gather(*(open_one(loop, a.host, a.port, request) for _ in range(a.conns)))
    socks = [s for s in socks if s is not None]
    print(f"slow_readers: {len(socks)} connections sent GET {a.path} and stopped reading",
          file=sys.stderr, flush=True)
    end = time.monotonic() + a.max_hold
    while time.monotonic() < end and not os.path.exists(a.stop_file):
        await asyncio.sleep(0.2)
    deadline = time.monotonic() + a.drain
    got = await asyncio.gather(*(drain(loop, s, deadline) for s in socks))
    sizes = [n for n, _, _ in got]
    how = [h for _, _, h in got]
    ok = sum(1 for _, first, _ in got if first.startswith(b"HTTP/1.1 200"))
    kib = [n // 1024 for n in sizes] or [0]
    print(f"opened={len(socks)} status200={ok} eof={how.count('eof')} reset={how.count('reset')} "
          f"open={how.count('open')} kib_min={min(kib)} kib_median={int(statistics.median(kib))} "
          f"kib_max={max(kib)}")


if __name__ == "__main__":
    asyncio.run(main())
