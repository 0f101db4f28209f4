"""The subscriber of `scripts/bench.sh opcua-server`: one asyncua client that subscribes to
every variable `s=dev-<d>.p<i>` of a server (monitored items made 500 at a time) and times
each data change notification: from the value's source timestamp (the poll) to the
notification message's publish time (both the server's clock), and to its arrival here
(which includes this client's own decoding of the message).

Usage: opcua_server_client.py URL NAMESPACE_URI DEVICES POINTS PUBLISHING_MS

Prints `subscribed <items>` once every item is made; then reads its standard input: `reset`
forgets what was timed so far, `stop` prints one JSON line of figures and exits.
"""

import asyncio
import json
import sys
import time
from datetime import timezone

from asyncua import Client, ua

CHUNK = 500


def seconds(dt):
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Timing:
    def __init__(self):
        self.reset()

    def reset(self):
        self.published = []
        self.arrived = []
        self.messages = 0
        self.began = time.time()

    def take(self, result):
        now = time.time()
        message = result.NotificationMessage
        publish = seconds(message.PublishTime)
        if publish is not None and publish <= 0:
            # A server that leaves the publish time unset (the year 1601): not timed.
            publish = None
        self.messages += 1
        for data in message.NotificationData or []:
            if not isinstance(data, ua.DataChangeNotification):
                continue
            for item in data.MonitoredItems:
                source = seconds(item.Value.SourceTimestamp)
                if source is None:
                    continue
                if publish is not None:
                    self.published.append((publish - source) * 1000)
                self.arrived.append((now - source) * 1000)

    def figures(self):
        span = max(time.time() - self.began, 1e-9)
        return {
            "notifications": len(self.arrived),
            "per_second": len(self.arrived) / span,
            "messages": self.messages,
            "publish_p50_ms": percentile(self.published, 0.5),
            "publish_p99_ms": percentile(self.published, 0.99),
            "arrival_p50_ms": percentile(self.arrived, 0.5),
            "arrival_p99_ms": percentile(self.arrived, 0.99),
        }


class Quiet:
    def datachange_notification(self, node, val, data):
        pass


async def main():
    url, namespace, devices, points, publishing = sys.argv[1:6]
    client = Client(url, timeout=60)
    client.name = "opex bench subscriber"
    async with client:
        ns = await client.get_namespace_index(namespace)
        nodes = [
            client.get_node(f"ns={ns};s=dev-{d}.p{i}")
            for d in range(1, int(devices) + 1)
            for i in range(int(points))
        ]
        sub = await client.create_subscription(int(publishing), Quiet())
        made = 0
        for at in range(0, len(nodes), CHUNK):
            handles = await sub.subscribe_data_change(nodes[at : at + CHUNK], queuesize=1)
            made += sum(1 for h in handles if isinstance(h, int))
        timing = Timing()
        client.uaclient._subscription_callbacks[sub.subscription_id] = timing.take
        print(f"subscribed {made}", flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if line == "reset":
                timing.reset()
            elif line in ("stop", ""):
                print(json.dumps(timing.figures()), flush=True)
                return


asyncio.run(main())
