"""A fleet's controller for tests/fleet.rs: nats-py's key-value API against a test's
nats-server (or cluster). One command a run:

    fleet_controller.py URLS create BUCKET [REPLICAS] a bucket (5 values of history a key)
    fleet_controller.py URLS put BUCKET KEY FILE      the file's bytes as the key's value
    fleet_controller.py URLS get BUCKET KEY           prints the key's value (nothing if none)

URLS is one server URL or several, comma-separated.
"""

import asyncio
import sys

import nats
from nats.js.errors import KeyNotFoundError


async def main() -> None:
    urls, command, bucket = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
    nc = await nats.connect(servers=urls, connect_timeout=5)
    try:
        js = nc.jetstream()
        if command == "create":
            replicas = int(sys.argv[4]) if len(sys.argv) > 4 else 1
            await js.create_key_value(bucket=bucket, history=5, replicas=replicas)
        elif command == "put":
            kv = await js.key_value(bucket)
            with open(sys.argv[5], "rb") as f:
                await kv.put(sys.argv[4], f.read())
        elif command == "get":
            kv = await js.key_value(bucket)
            try:
                entry = await kv.get(sys.argv[4])
            except KeyNotFoundError:
                return
            sys.stdout.write(entry.value.decode())
        else:
            raise SystemExit(f"unknown command {command}")
    finally:
        await nc.close()


asyncio.run(main())
