#!/usr/bin/env python3
"""An OPC-UA client written by others (asyncua) for opex-connector's tests, driven by JSON lines.

    opcua_client.py URL [--user NAME --password PW]
                        [--policy None|Basic256Sha256|Aes128_Sha256_RsaOaep|Aes256_Sha256_RsaPss]
                        [--mode None|Sign|SignAndEncrypt] [--cert-dir DIR]

Prints "ready", then reads one JSON request a line on standard input and answers each with
one JSON line on standard output, in order. A request is {"op": ..., "id": ...}; the answer
carries the same "id". Any failure is an answer {"id": .., "error": NAME}, NAME being the
StatusCode's name when asyncua gives one (BadIdentityTokenRejected, BadSecurityChecksFailed,
BadCertificateUntrusted, ...), else the exception's type and text; the process never exits on
one. A request may say "timeout_ms" (default 8000): past it the answer is {"error": "timeout"}.

Ops:

    connect                  {"ok": true}
    browse      node?        the tree under node (default i=85, Objects), its children each
                recursive?   {"node_id","browse_name","display_name","node_class","children"}
                             ("children" is [] unless recursive; recursion does not descend
                             into namespace 0 nodes below the start, e.g. Objects/Server,
                             unless "ns0": true; at most 10 levels and 5000 nodes)
    references  node,        every reference of node, both directions, in one Browse and as
                per_answer?  many BrowseNext as its continuation points need, asking for at
                             most per_answer references an answer (default 0: the server's
                             bound): {"references": [{"type","forward","node_id",
                             "browse_name","node_class","type_definition"}], "answers": N}
                             (type: the reference type's BrowseName; type_definition: a node
                             id, or null)
    read        nodes        {"results": [{"node","value","data_type","status","source_ts"}]}
                             (data_type: the value's built-in type, e.g. Double; null for no
                             value; source_ts: RFC 3339 or null)
    read_attrs  node         {"node","browse_name","browse_name_ns","display_name","data_type",
                             "data_type_id","access_level","user_access_level","description",
                             "EngineeringUnits": {"display_name","unit_id","namespace_uri"} or
                             null, "EURange": {"low","high"} or null} (an attribute the node
                             does not have, e.g. no Description, is null; data_type is the
                             built-in type's name, else the DataType node's BrowseName)
    subscribe   nodes,       {"subscription": SID, "items": [{"node","status"}]}; each data
                interval_ms, change of it is buffered from then on (at most 100000 changes,
                deadband?,   later ones are counted in "dropped")
                sampling_ms?, queue_size?
                             deadband: {"type": "absolute"|"percent", "value": X}
    changes     since?       {"changes": [{"subscription","node","value","status",
                             "source_ts"}, ...], "next": N, "dropped": D}: the buffered
                             changes from index since (default 0) on; N is the next index
    write       node, value, {"status": NAME}: the write's own StatusCode, Good, Bad... or
                type         Uncertain... (a bad one is an answer, not an error); type is the
                             built-in type the value is sent as: Boolean, SByte, Byte, Int16,
                             UInt16, Int32, UInt32, Int64, UInt64, Float, Double, String
    disconnect               {"ok": true}
    quit                     {"ok": true}, then exits (so does the end of standard input)

With a policy other than None the client uses DIR/client-cert.der and DIR/client-key.pem,
made there when missing (self-signed, application URI urn:opex-test:client, this host's
name), and takes the server's certificate from its endpoints without checking it. A user name
and password are sent on any policy (the password encrypted as the server's token policy
says); without them the client is anonymous.
"""

import argparse
import asyncio
import base64
import datetime
import json
import math
import socket
import sys
import traceback
from pathlib import Path

from asyncua import Client, ua
from asyncua.crypto import security_policies
from asyncua.crypto.cert_gen import setup_self_signed_certificate
from cryptography.x509.oid import ExtendedKeyUsageOID

APPLICATION_URI = "urn:opex-test:client"
POLICIES = {
    "Basic256Sha256": security_policies.SecurityPolicyBasic256Sha256,
    "Aes128_Sha256_RsaOaep": security_policies.SecurityPolicyAes128Sha256RsaOaep,
    "Aes256_Sha256_RsaPss": security_policies.SecurityPolicyAes256Sha256RsaPss,
}
MODES = {
    "Sign": ua.MessageSecurityMode.Sign,
    "SignAndEncrypt": ua.MessageSecurityMode.SignAndEncrypt,
}
WRITE_TYPES = {"Boolean", "Float", "Double", "String"}
# The integer types a write may send, with their ranges (a value outside is refused here: it
# cannot be encoded).
INTEGER_RANGES = {
    "SByte": (-(2**7), 2**7 - 1),
    "Byte": (0, 2**8 - 1),
    "Int16": (-(2**15), 2**15 - 1),
    "UInt16": (0, 2**16 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "UInt32": (0, 2**32 - 1),
    "Int64": (-(2**63), 2**63 - 1),
    "UInt64": (0, 2**64 - 1),
}
# Bounds of what one request may make this process hold.
MAX_CHANGES = 100_000
MAX_BROWSE_DEPTH = 10
MAX_BROWSE_NODES = 5000
DEFAULT_TIMEOUT_MS = 8000
# The session's own request timeout (each service call), below the default request limit.
SERVICE_TIMEOUT_S = 6


class Refused(Exception):
    """A request this client will not send (bad arguments): answered as its text."""


def status_name(code):
    """The name of a StatusCode (a ua.StatusCode or its integer); with info bits set, the
    name of its code part."""
    value = code.value if isinstance(code, ua.StatusCode) else int(code)
    name = ua.StatusCode(value).name
    if "Unknown StatusCode" in ua.StatusCode(value).doc:
        name = ua.StatusCode(value & 0xFFFF0000).name
    return name


def error_name(exc):
    """What an exception is called in an answer: the StatusCode's name when it has one."""
    if isinstance(exc, ua.UaStatusCodeError) and getattr(exc, "code", None) is not None:
        return status_name(exc.code)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    if isinstance(exc, Refused):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def timestamp(value):
    """A datetime as RFC 3339 in UTC, or None."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def plain(value):
    """A value as JSON holds it (a float that is not finite as its text, a date as RFC 3339)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, datetime.datetime):
        return timestamp(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, ua.LocalizedText):
        return value.Text
    if isinstance(value, ua.QualifiedName):
        return value.to_string()
    if isinstance(value, ua.NodeId):
        return value.to_string()
    if isinstance(value, ua.StatusCode):
        return status_name(value)
    return str(value)


def data_value(node, dv):
    """One node's DataValue as an answer: value, built-in type, status and source time."""
    variant = dv.Value
    has_value = variant is not None and variant.VariantType != ua.VariantType.Null
    return {
        "node": node,
        "value": plain(variant.Value) if has_value else None,
        "data_type": variant.VariantType.name if has_value else None,
        "status": status_name(dv.StatusCode),
        "source_ts": timestamp(dv.SourceTimestamp),
    }


class Changes:
    """The data changes of every subscription, oldest first, at most MAX_CHANGES."""

    def __init__(self):
        self.items = []
        self.dropped = 0

    def handler(self, sid_cell):
        changes = self

        class Handler:
            def datachange_notification(self, node, val, data):
                dv = data.monitored_item.Value
                entry = data_value(node.nodeid.to_string(), dv)
                del entry["data_type"]
                entry["subscription"] = sid_cell[0]
                changes.add(entry)

            def status_change_notification(self, status):
                pass

            def event_notification(self, event):
                pass

        return Handler()

    def add(self, entry):
        if len(self.items) < MAX_CHANGES:
            self.items.append(entry)
        else:
            self.dropped += 1


class Peer:
    def __init__(self, args):
        self.args = args
        self.client = None
        self.changes = Changes()

    def node(self, node_id):
        if self.client is None:
            raise Refused("not connected")
        return self.client.get_node(node_id)

    async def connect(self, req):
        a = self.args
        await self.disconnect(req)
        client = Client(a.url, timeout=SERVICE_TIMEOUT_S)
        client.application_uri = APPLICATION_URI
        client.name = "opex test client"
        if a.user is not None:
            client.set_user(a.user)
            client.set_password(a.password or "")
        if a.policy != "None":
            cert_dir = Path(a.cert_dir)
            cert_dir.mkdir(parents=True, exist_ok=True)
            cert, key = cert_dir / "client-cert.der", cert_dir / "client-key.pem"
            await setup_self_signed_certificate(
                key,
                cert,
                APPLICATION_URI,
                socket.gethostname(),
                [ExtendedKeyUsageOID.CLIENT_AUTH],
                {"commonName": "opex test client", "organizationName": "opex test"},
            )
            await client.set_security(POLICIES[a.policy], str(cert), str(key), mode=MODES[a.mode])
        await client.connect()
        self.client = client
        return {"ok": True}

    async def browse(self, req):
        start = self.node(req.get("node", "i=85"))
        recursive = bool(req.get("recursive", False))
        ns0 = bool(req.get("ns0", False))
        budget = [MAX_BROWSE_NODES]
        seen = {start.nodeid}

        async def children(node, depth):
            out = []
            for ref in await node.get_children_descriptions():
                if budget[0] <= 0:
                    break
                budget[0] -= 1
                node_id = ref.NodeId
                entry = {
                    "node_id": node_id.to_string(),
                    "browse_name": ref.BrowseName.Name,
                    "display_name": ref.DisplayName.Text,
                    "node_class": ref.NodeClass.name,
                    "children": [],
                }
                descend = (
                    recursive
                    and depth < MAX_BROWSE_DEPTH
                    and node_id not in seen
                    and (ns0 or node_id.NamespaceIndex != 0)
                )
                seen.add(node_id)
                if descend:
                    entry["children"] = await children(self.client.get_node(node_id), depth + 1)
                out.append(entry)
            return out

        return {"nodes": await children(start, 1)}

    async def references(self, req):
        desc = ua.BrowseDescription()
        desc.NodeId = self.node(req["node"]).nodeid
        desc.BrowseDirection = ua.BrowseDirection.Both
        desc.ReferenceTypeId = ua.NodeId(ua.ObjectIds.References)
        desc.IncludeSubtypes = True
        desc.NodeClassMask = 0
        desc.ResultMask = ua.BrowseResultMask.All
        params = ua.BrowseParameters()
        params.View.Timestamp = ua.get_win_epoch()
        params.NodesToBrowse.append(desc)
        params.RequestedMaxReferencesPerNode = int(req.get("per_answer", 0))
        results = await self.client.uaclient.browse(params)
        refs = list(results[0].References or [])
        answers = 1
        while results and results[0].ContinuationPoint:
            more = ua.BrowseNextParameters()
            more.ContinuationPoints = [results[0].ContinuationPoint]
            more.ReleaseContinuationPoints = False
            results = await self.client.uaclient.browse_next(more)
            answers += 1
            if results:
                refs.extend(results[0].References or [])
        out = []
        for r in refs:
            out.append({
                "type": await self.name_of(r.ReferenceTypeId),
                "forward": bool(r.IsForward),
                "node_id": r.NodeId.to_string(),
                "browse_name": r.BrowseName.Name,
                "node_class": r.NodeClass.name,
                "type_definition": (
                    None if r.TypeDefinition.is_null() else r.TypeDefinition.to_string()
                ),
            })
        return {"references": out, "answers": answers}

    async def read(self, req):
        nodes = req.get("nodes") or []
        if self.client is None:
            raise Refused("not connected")
        params = ua.ReadParameters()
        params.TimestampsToReturn = ua.TimestampsToReturn.Both
        for n in nodes:
            rv = ua.ReadValueId()
            rv.NodeId = ua.NodeId.from_string(n)
            rv.AttributeId = ua.AttributeIds.Value
            params.NodesToRead.append(rv)
        results = await self.client.uaclient.read(params)
        return {"results": [data_value(n, dv) for n, dv in zip(nodes, results)]}

    async def name_of(self, node_id):
        """A node's BrowseName, else its id (a node the server does not expose)."""
        try:
            return (await self.client.get_node(node_id).read_browse_name()).Name
        except Exception:
            return node_id.to_string()

    async def type_name(self, type_id):
        """A DataType NodeId as a name: the built-in type's, else the type node's BrowseName."""
        if type_id.NamespaceIndex == 0 and isinstance(type_id.Identifier, int):
            try:
                return ua.VariantType(type_id.Identifier).name
            except ValueError:
                pass
        return await self.name_of(type_id)

    async def read_attrs(self, req):
        node = self.node(req["node"])
        ids = [
            ua.AttributeIds.BrowseName,
            ua.AttributeIds.DisplayName,
            ua.AttributeIds.DataType,
            ua.AttributeIds.AccessLevel,
            ua.AttributeIds.UserAccessLevel,
            ua.AttributeIds.Description,
        ]
        values = await node.read_attributes(ids)
        # An unknown node is an error; an attribute the node lacks (Description is optional)
        # is null.
        if not values[0].StatusCode.is_good():
            raise Refused(status_name(values[0].StatusCode))
        browse, display, dtype, access, user_access, description = (
            dv.Value.Value if dv.StatusCode.is_good() else None for dv in values
        )
        out = {
            "node": req["node"],
            "browse_name": browse.Name,
            "browse_name_ns": browse.NamespaceIndex,
            "display_name": display.Text if display else None,
            "data_type": await self.type_name(dtype) if dtype else None,
            "data_type_id": dtype.to_string() if dtype else None,
            "access_level": int(access) if access is not None else None,
            "user_access_level": int(user_access) if user_access is not None else None,
            "description": description.Text if description else None,
            "EngineeringUnits": None,
            "EURange": None,
        }
        for prop in await node.get_properties():
            name = (await prop.read_browse_name()).Name
            if name == "EngineeringUnits":
                eu = await prop.read_value()
                out[name] = {
                    "display_name": eu.DisplayName.Text if eu.DisplayName else None,
                    "unit_id": eu.UnitId,
                    "namespace_uri": eu.NamespaceUri,
                }
            elif name == "EURange":
                r = await prop.read_value()
                out[name] = {"low": plain(r.Low), "high": plain(r.High)}
        return out

    async def subscribe(self, req):
        nodes = req.get("nodes") or []
        if self.client is None:
            raise Refused("not connected")
        sid_cell = [None]
        sub = await self.client.create_subscription(
            float(req.get("interval_ms", 500)), self.changes.handler(sid_cell)
        )
        sid_cell[0] = sub.subscription_id
        mfilter = None
        deadband = req.get("deadband")
        if deadband:
            kinds = {"absolute": ua.DeadbandType.Absolute, "percent": ua.DeadbandType.Percent}
            if deadband.get("type") not in kinds:
                raise Refused(f"deadband type {deadband.get('type')!r}: absolute or percent")
            mfilter = ua.DataChangeFilter()
            mfilter.Trigger = ua.DataChangeTrigger.StatusValue
            mfilter.DeadbandType = kinds[deadband["type"]]
            mfilter.DeadbandValue = float(deadband["value"])
        requests = []
        for handle, n in enumerate(nodes, start=1):
            rv = ua.ReadValueId()
            rv.NodeId = ua.NodeId.from_string(n)
            rv.AttributeId = ua.AttributeIds.Value
            mp = ua.MonitoringParameters()
            mp.ClientHandle = handle
            mp.SamplingInterval = float(req.get("sampling_ms", 0))
            mp.QueueSize = int(req.get("queue_size", 0))
            mp.DiscardOldest = True
            if mfilter is not None:
                mp.Filter = mfilter
            mir = ua.MonitoredItemCreateRequest()
            mir.ItemToMonitor = rv
            mir.MonitoringMode = ua.MonitoringMode.Reporting
            mir.RequestedParameters = mp
            requests.append(mir)
        results = await sub.create_monitored_items(requests)
        items = [
            {"node": n, "status": status_name(r) if isinstance(r, ua.StatusCode) else "Good"}
            for n, r in zip(nodes, results)
        ]
        return {"subscription": sub.subscription_id, "items": items}

    async def changes_since(self, req):
        since = max(0, int(req.get("since", 0)))
        items = self.changes.items
        return {"changes": items[since:], "next": len(items), "dropped": self.changes.dropped}

    async def write(self, req):
        node = self.node(req["node"])
        kind, value = req.get("type"), req.get("value")
        if kind not in WRITE_TYPES and kind not in INTEGER_RANGES:
            names = ", ".join(sorted(WRITE_TYPES | set(INTEGER_RANGES)))
            raise Refused(f"type {kind!r}: one of {names}")
        if kind == "Boolean":
            if not isinstance(value, bool):
                raise Refused(f"{value!r} is not a Boolean")
        elif kind in ("Float", "Double"):
            value = float(value)
        elif kind == "String":
            value = str(value)
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                raise Refused(f"{value!r} is not an integer")
            value = int(value)
            low, high = INTEGER_RANGES[kind]
            if not low <= value <= high:
                raise Refused(f"{value} is outside {kind} ({low}..={high})")
        wv = ua.WriteValue()
        wv.NodeId = node.nodeid
        wv.AttributeId = ua.AttributeIds.Value
        # No timestamps: servers may refuse a write that sets them.
        wv.Value = ua.DataValue(ua.Variant(value, getattr(ua.VariantType, kind)))
        params = ua.WriteParameters()
        params.NodesToWrite = [wv]
        results = await self.client.uaclient.write(params)
        return {"status": status_name(results[0])}

    async def disconnect(self, req):
        client, self.client = self.client, None
        if client is not None:
            await client.disconnect()
        return {"ok": True}


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--policy", default="None", choices=["None", *POLICIES])
    p.add_argument("--mode", choices=["None", *MODES])
    p.add_argument("--cert-dir")
    a = p.parse_args()
    if a.mode is None:
        a.mode = "None" if a.policy == "None" else "SignAndEncrypt"
    if (a.policy == "None") != (a.mode == "None"):
        p.error("--policy None goes with --mode None, and only with it")
    if a.policy != "None" and not a.cert_dir:
        p.error(f"--policy {a.policy} needs --cert-dir")

    peer = Peer(a)
    ops = {
        "connect": peer.connect,
        "browse": peer.browse,
        "references": peer.references,
        "read": peer.read,
        "read_attrs": peer.read_attrs,
        "subscribe": peer.subscribe,
        "changes": peer.changes_since,
        "write": peer.write,
        "disconnect": peer.disconnect,
        "quit": peer.disconnect,
    }

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("ready", flush=True)
    while True:
        line = await reader.readline()
        if not line:
            break
        if not line.strip():
            continue
        req_id, op = None, None
        try:
            req = json.loads(line)
            req_id, op = req.get("id"), req.get("op")
            if op not in ops:
                raise Refused(f"unknown op {op!r}")
            limit = float(req.get("timeout_ms", DEFAULT_TIMEOUT_MS)) / 1000.0
            answer = await asyncio.wait_for(ops[op](req), timeout=limit)
        except Exception as exc:  # every failure is an answer
            if not isinstance(exc, (Refused, ua.UaStatusCodeError)):
                traceback.print_exc(file=sys.stderr)
            answer = {"error": error_name(exc)}
        answer["id"] = req_id
        print(json.dumps(answer), flush=True)
        if op == "quit":
            return
    try:
        await peer.disconnect({})
    except Exception:  # the server may be gone already
        pass


if __name__ == "__main__":
    asyncio.run(main())
