"""A Sparkplug B host application for tests/sparkplug.rs, on pysparkplug (pinned in
scripts/test.sh): pysparkplug connects, decodes every payload and resolves the aliases of
data messages with the birth it saw; this script only prints what it got and sends what it
is told.

Usage:
  host.py PORT GROUP HOST_ID    connects to 127.0.0.1:PORT as primary host HOST_ID: its Will
                                is STATE offline (retained), it publishes STATE online
                                (retained) once subscribed to spBv1.0/GROUP/#

Prints one JSON object per line on stdout:
  {"type": "ready"}                                      subscribed, STATE online published
  {"type": "NBIRTH", "node": .., "device": null, "seq": .., "ts": ..,
   "metrics": [{"name", "alias", "datatype", "value", "ts", "historical", "null"}]}
  (and the same for DBIRTH, NDATA, DDATA, DDEATH, NDEATH)
  {"type": "error", "error": ..}                         a message it could not decode

Reads commands on stdin, one per line:
  rebirth NODE                                   NCMD Node Control/Rebirth = true
  dcmd NODE DEVICE METRIC DATATYPE VALUE_JSON    DCMD of one metric by name
  dcmd-retained NODE DEVICE METRIC DATATYPE VALUE_JSON
                                                 the same, published retained at QoS 1 (the
                                                 broker keeps it and hands it to every new
                                                 subscriber, as a misconfigured host would)
"""

import json
import sys
import threading

import pysparkplug as psp

PRINT = threading.Lock()


def emit(obj):
    with PRINT:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def metric_json(m):
    value = m.value
    if isinstance(value, bytes):
        value = value.hex()
    return {
        "name": m.name,
        "alias": m.alias,
        "datatype": m.datatype.name if m.datatype is not None else None,
        "value": value,
        "ts": m.timestamp,
        "historical": bool(m.is_historical),
        "null": bool(m.is_null),
    }


def on_message(_client, message):
    try:
        topic = message.topic
        payload = message.payload
        kind = topic.message_type
        out = {
            "type": str(kind),
            "node": topic.edge_node_id,
            "device": topic.device_id,
            "seq": getattr(payload, "seq", None),
            "ts": getattr(payload, "timestamp", None),
        }
        if isinstance(payload, psp.NDeath):
            out["metrics"] = [metric_json(payload.bd_seq_metric)]
        elif isinstance(payload, psp.State):
            out["online"] = payload.online
            out["metrics"] = []
        else:
            out["metrics"] = [metric_json(m) for m in getattr(payload, "metrics", ())]
        emit(out)
    except Exception as e:  # a message the library cannot decode: say so, keep going
        emit({"type": "error", "error": repr(e)})


def main():
    port, group, host_id = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    started = psp.get_current_timestamp()
    state_topic = psp.Topic(message_type=psp.MessageType.STATE, sparkplug_host_id=host_id)
    client = psp.Client(client_id=f"host-{host_id}")
    client.set_will(
        psp.Message(
            topic=state_topic,
            payload=psp.State(timestamp=started, online=False),
            qos=psp.QoS.AT_LEAST_ONCE,
            retain=True,
        )
    )
    ready = threading.Event()

    def connected(c):
        c.subscribe(state_topic, psp.QoS.AT_LEAST_ONCE, lambda *_: None)
        c.subscribe(
            psp.Topic(group_id=group, message_type=psp.MULTI_LEVEL_WILDCARD),
            psp.QoS.AT_LEAST_ONCE,
            on_message,
        )
        c.publish(
            psp.Message(
                topic=state_topic,
                payload=psp.State(timestamp=started, online=True),
                qos=psp.QoS.AT_LEAST_ONCE,
                retain=True,
            )
        )
        if not ready.is_set():
            ready.set()
            emit({"type": "ready"})

    client.connect("127.0.0.1", port=port, blocking=False, callback=connected)
    for line in sys.stdin:
        words = line.split(maxsplit=5)
        if not words:
            continue
        now = psp.get_current_timestamp()
        if words[0] == "rebirth":
            topic = psp.Topic(group_id=group, message_type=psp.MessageType.NCMD, edge_node_id=words[1])
            metric = psp.Metric(timestamp=now, name="Node Control/Rebirth", datatype=psp.DataType.BOOLEAN, value=True)
            payload = psp.NCmd(timestamp=now, metrics=(metric,))
        elif words[0] in ("dcmd", "dcmd-retained"):
            _, node, device, name, datatype, value = words
            topic = psp.Topic(group_id=group, message_type=psp.MessageType.DCMD, edge_node_id=node, device_id=device)
            metric = psp.Metric(timestamp=now, name=name, datatype=psp.DataType[datatype], value=json.loads(value))
            payload = psp.DCmd(timestamp=now, metrics=(metric,))
        else:
            emit({"type": "error", "error": f"unknown command {line.strip()!r}"})
            continue
        retained = words[0] == "dcmd-retained"
        qos = psp.QoS.AT_LEAST_ONCE if retained else psp.QoS.AT_MOST_ONCE
        client.publish(
            psp.Message(topic=topic, payload=payload, qos=qos, retain=retained),
            include_dtypes=True,
        )
        emit({"type": "sent", "command": words[0]})


if __name__ == "__main__":
    main()
