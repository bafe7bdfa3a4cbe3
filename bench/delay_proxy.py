#!/usr/bin/env python3
"""bench/delay_proxy.py — a TCP proxy that delays every byte, each way, by
DELAY_MS: the network between a primary and its standby in another zone,
for bench/failover.sh. It listens on 127.0.0.1:PORT and forwards each
connection to a PostgreSQL unix socket (SOCKET_DIR/.s.PGSQL.PG_PORT),
keeping the order of the bytes; it runs until killed.

SIGUSR1 cuts the link: what is still on its way is dropped, every
connection closed and new ones refused, as when the primary's zone is lost
with the network to it.

Usage: bench/delay_proxy.py PORT SOCKET_DIR PG_PORT DELAY_MS
"""
import asyncio
import signal
import sys

CUT = asyncio.Event()


async def pipe(reader, writer, delay):
    """Moves what reader gets to writer, each chunk delay seconds later."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            if data is None or CUT.is_set():
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if CUT.is_set():
                break
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while not CUT.is_set():
            read = asyncio.create_task(reader.read(65536))
            cut = asyncio.create_task(CUT.wait())
            await asyncio.wait({read, cut}, return_when=asyncio.FIRST_COMPLETED)
            cut.cancel()
            if not read.done():
                read.cancel()
                break
            data = read.result()
            if not data:
                break
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0, None))
    try:
        await sender
    except ConnectionError:
        pass


async def main():
    port, sock_dir, pg_port, delay_ms = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    delay = float(delay_ms) / 1000

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, CUT.set)

    async def handle(client_r, client_w):
        if CUT.is_set():
            client_w.close()
            return
        try:
            up_r, up_w = await asyncio.open_unix_connection(f"{sock_dir}/.s.PGSQL.{pg_port}")
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, up_w, delay), pipe(up_r, client_w, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", int(port))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
