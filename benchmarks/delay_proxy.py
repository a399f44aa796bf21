"""A TCP proxy on loopback that delays every chunk by a fixed time each way, order kept.

It stands in for a database on another host when the benchmarks run on one machine:
``bench_serve.py --postgres`` pointed at the proxy's port sees the round trips a remote
PostgreSQL would cost. The delay is an ``asyncio`` timer, whose resolution is the event
loop's (about a millisecond), so measure the round trip it gives rather than trusting
the argument: ``--delay-ms 0.5`` gave about 2.6 ms per ``SELECT 1`` on the development
machine, against 0.14 ms through the proxy without a delay.

Usage::

    python benchmarks/delay_proxy.py --listen 55432 --upstream 5432 --delay-ms 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import time


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk written ``delay`` seconds after it came."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                writer.close()
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    while True:
        data = await reader.read(65536)
        queue.put_nowait((time.monotonic() + delay, data))
        if not data:
            break
    await sender


async def serve(listen: int, upstream: int, delay: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(
            pump(client_r, up_w, delay), pump(up_r, client_w, delay), return_exceptions=True
        )

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--listen", type=int, required=True, help="port to listen on")
    parser.add_argument("--upstream", type=int, required=True, help="port to forward to")
    parser.add_argument("--delay-ms", type=float, default=0.5, help="delay each way")
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.upstream, args.delay_ms / 1000))


if __name__ == "__main__":
    main()
