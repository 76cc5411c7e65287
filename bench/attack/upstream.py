#!/usr/bin/env python3
"""Upstream for bench/attack-check.sh (round two), HTTP/1.1 with keep-alive:

  GET /big   200 with --big-mib MiB of zeros, written 16 KiB at a time (so a client that
             stops reading holds this process at a few tens of KiB per connection)
  GET /ws    with `Connection: Upgrade`: 101 `Upgrade: websocket`, then silence until the
             other side closes
  otherwise  200 "ok"

Listens on 127.0.0.1 with a deep accept backlog. Runs until killed.
"""

import argparse
import asyncio
import base64
import hashlib

CHUNK = 16 * 1024
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def handle(reader, writer, big):
    writer.transport.set_write_buffer_limits(high=2 * CHUNK)
    zeros = memoryview(bytes(CHUNK))
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ")
            if len(parts) != 3:
                return
            path = parts[1]
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(b":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get(b"content-length", b"0") or 0)
            if length:
                await reader.readexactly(length)
            upgrade = b"upgrade" in headers.get(b"connection", b"").lower()
            if path.startswith(b"/ws") and upgrade:
                key = headers.get(b"sec-websocket-key", b"")
                accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
                writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
                await writer.drain()
                while await reader.read(65536):
                    pass  # silent: discard whatever comes, until the gateway closes
                return
            if path.startswith(b"/big"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\n\r\n" % big)
                left = big
                while left:
                    n = min(left, CHUNK)
                    writer.write(zeros[:n])
                    await writer.drain()
                    left -= n
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
                await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--big-mib", type=int, default=8)
    a = p.parse_args()
    big = a.big_mib << 20
    server = await asyncio.start_server(lambda r, w: handle(r, w, big), "127.0.0.1", a.port,
                                        backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
