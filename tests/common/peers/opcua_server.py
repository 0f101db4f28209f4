#!/usr/bin/env python3
"""An OPC-UA server written by others (asyncua) for opex-connector's tests.

    opcua_server.py --port PORT [--secure DIR --user NAME --password PW] [--writes FILE]
                    [--slow-ms MS] [--hold-subscribe-ms MS]

Serves opc.tcp://127.0.0.1:PORT/opex-test/ with namespace urn:opex-test (index 2) and these
variables, by string node id:

    ns=2;s=Temperature  Double   20.0 + a sine, changes every 100 ms
    ns=2;s=Counter      Int32    +1 every 100 ms
    ns=2;s=PumpOn       Boolean  toggles every second
    ns=2;s=Setpoint     Double   42.5, never changes; read only (no CurrentWrite)

and writable ones (CurrentWrite in AccessLevel and UserAccessLevel):

    ns=2;s=W.<Type>     one per type: Boolean, SByte, Byte, Int16, UInt16, Int32, UInt32,
                        Int64, UInt64, Float, Double, String; each starts at 0, false or ""
    ns=2;s=W.Slow       Double; a Write request that holds it is answered after --slow-ms
                        (default 3000), the value taken
    ns=2;s=W.Clamped    Double; keeps at most 100 (a larger value written becomes 100)

With --writes FILE, every Write request from a client appends one JSON line to FILE:
{"write":[{"node":"W.Double","sent_type":"Double","sent":72.5,"status":"Good",
"stored":72.5,"stored_type":"Double"},...]} (the node's value and type after the write,
read from the address space), every Read request from a client for DataType
attributes {"data_types":["W.Double",...]}, and every CreateMonitoredItems request
{"monitored_items":["Temperature",...]}.

With --hold-subscribe-ms MS, the answer to a CreateMonitoredItems request is held MS
milliseconds after it was logged (and, as asyncua serves one connection's requests in
order, the requests the client sends behind it on that connection too).

Every Write request from a client is also printed as `client write: <node ids>` (the
server's log), so a test can tell that a client wrote nothing.

Without --secure: security None, anonymous. With --secure DIR: the server certificate is
DIR/server-cert.der (DER) with its key DIR/server-key.pem (PEM); when they are not there a
self-signed pair for 127.0.0.1 and localhost is made (once; kept across restarts). A pair
put there beforehand (e.g. made with openssl, its subject alternative names in any order)
is used as it is. The endpoints are Basic256Sha256 Sign and SignAndEncrypt, and only
NAME/PW may log in. Prints "ready" once serving, and "client write: NODE..." for every
Write request a client sends (the server's own value updates are not logged).
"""

import argparse
import asyncio
import datetime
import ipaddress
import json
import math
import os
import time
from pathlib import Path

from asyncua import Server, ua
from asyncua.common.callback import CallbackType
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.server.user_managers import UserManager
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

URI = "urn:opex-test"
SERVER_URI = "urn:opex-test:server"


def make_certificate(cert_path, key_path):
    """A self-signed application instance certificate for 127.0.0.1, unless one is there."""
    if cert_path.exists() and key_path.exists():
        return
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "opex test server"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "opex test"),
        ]
    )
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.UniformResourceIdentifier(SERVER_URI),
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=True,
                key_encipherment=True,
                data_encipherment=True,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.DER))


class OneUser(UserManager):
    def __init__(self, name, password):
        self.name = name
        self.password = password

    def get_user(self, iserver, username=None, password=None, certificate=None):
        if username == self.name and password == self.password:
            return User(role=UserRole.User)
        return None


WRITABLE = [
    ("Boolean", False),
    ("SByte", 0),
    ("Byte", 0),
    ("Int16", 0),
    ("UInt16", 0),
    ("Int32", 0),
    ("UInt32", 0),
    ("Int64", 0),
    ("UInt64", 0),
    ("Float", 0.0),
    ("Double", 0.0),
    ("String", ""),
]


def plain(value):
    """A value as JSON holds it."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


class WriteLog:
    """Logs the clients' writes, DataType reads and monitored items, and holds the answers
    the options ask for (see the module doc)."""

    def __init__(self, server, path, slow_ms, hold_subscribe_ms, clamped):
        self.server = server
        self.path = path
        self.slow = slow_ms / 1000.0
        self.hold_subscribe = hold_subscribe_ms / 1000.0
        self.clamped = clamped

    def append(self, entry):
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    async def pre_write(self, event, dispatcher):
        if not event.is_external:
            return
        nodes = [str(w.NodeId) for w in event.request_params.NodesToWrite]
        print("client write: " + " ".join(nodes), flush=True)
        if any(w.NodeId.Identifier == "W.Slow" for w in event.request_params.NodesToWrite):
            await asyncio.sleep(self.slow)

    async def post_write(self, event, dispatcher):
        if not event.is_external:
            return
        aspace = self.server.iserver.aspace
        nodes = []
        for w, status in zip(event.request_params.NodesToWrite, event.response_params):
            sent = w.Value.Value
            if w.NodeId.Identifier == "W.Clamped" and status.is_good() and sent.Value > 100:
                await self.clamped.write_value(100.0)
            stored = aspace.read_attribute_value(w.NodeId, ua.AttributeIds.Value).Value
            nodes.append(
                {
                    "node": w.NodeId.Identifier,
                    "sent_type": sent.VariantType.name,
                    "sent": plain(sent.Value),
                    "status": status.name,
                    "stored": plain(stored.Value if stored else None),
                    "stored_type": stored.VariantType.name if stored else None,
                }
            )
        self.append({"write": nodes})

    async def monitored_items_created(self, event, dispatcher):
        if not event.is_external:
            return
        items = event.request_params.ItemsToCreate
        self.append({"monitored_items": [i.ItemToMonitor.NodeId.Identifier for i in items]})
        if self.hold_subscribe:
            await asyncio.sleep(self.hold_subscribe)

    async def post_read(self, event, dispatcher):
        if not event.is_external:
            return
        asked = [
            r.NodeId.Identifier
            for r in event.request_params.NodesToRead
            if r.AttributeId == ua.AttributeIds.DataType
        ]
        if asked:
            self.append({"data_types": asked})


async def main():
    args = argparse.ArgumentParser()
    args.add_argument("--port", type=int, required=True)
    args.add_argument("--secure", help="folder of the server certificate")
    args.add_argument("--user")
    args.add_argument("--password")
    args.add_argument("--writes", help="JSON lines log of the clients' writes")
    args.add_argument("--slow-ms", type=int, default=3000)
    args.add_argument("--hold-subscribe-ms", type=int, default=0)
    a = args.parse_args()

    users = OneUser(a.user, a.password) if a.user else None
    server = Server(user_manager=users) if users else Server()
    await server.init()
    server.set_endpoint(f"opc.tcp://127.0.0.1:{a.port}/opex-test/")
    server.set_server_name("opex test server")
    await server.set_application_uri(SERVER_URI)
    if a.secure:
        d = Path(a.secure)
        d.mkdir(parents=True, exist_ok=True)
        cert, key = d / "server-cert.der", d / "server-key.pem"
        make_certificate(cert, key)
        await server.load_certificate(str(cert))
        await server.load_private_key(str(key))
        server.set_security_policy(
            [
                ua.SecurityPolicyType.Basic256Sha256_Sign,
                ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
            ]
        )
        server.set_identity_tokens([ua.UserNameIdentityToken])
    else:
        server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        server.set_identity_tokens([ua.AnonymousIdentityToken])

    idx = await server.register_namespace(URI)
    plant = await server.nodes.objects.add_object(ua.NodeId("Plant", idx), "Plant")
    temp = await plant.add_variable(ua.NodeId("Temperature", idx), "Temperature", 20.0)
    counter = await plant.add_variable(
        ua.NodeId("Counter", idx), "Counter", 0, varianttype=ua.VariantType.Int32
    )
    pump = await plant.add_variable(ua.NodeId("PumpOn", idx), "PumpOn", False)
    await plant.add_variable(ua.NodeId("Setpoint", idx), "Setpoint", 42.5)
    for name, start in WRITABLE:
        node = await plant.add_variable(
            ua.NodeId(f"W.{name}", idx), f"W.{name}", start, varianttype=getattr(ua.VariantType, name)
        )
        await node.set_writable()
    for name in ("W.Slow", "W.Clamped"):
        node = await plant.add_variable(ua.NodeId(name, idx), name, 0.0)
        await node.set_writable()
    clamped = server.get_node(ua.NodeId("W.Clamped", idx))
    log = WriteLog(server, a.writes, a.slow_ms, a.hold_subscribe_ms, clamped)
    server.subscribe_server_callback(CallbackType.PreWrite, log.pre_write)
    server.subscribe_server_callback(CallbackType.PostWrite, log.post_write)
    server.subscribe_server_callback(CallbackType.PostRead, log.post_read)
    server.subscribe_server_callback(CallbackType.ItemSubscriptionCreated, log.monitored_items_created)

    async with server:
        print("ready", flush=True)
        n = 0
        while True:
            await asyncio.sleep(0.1)
            n += 1
            await temp.write_value(20.0 + 5.0 * math.sin(time.time() / 3.0))
            await counter.write_value(ua.Variant(n, ua.VariantType.Int32))
            if n % 10 == 0:
                await pump.write_value((n // 10) % 2 == 1)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        os._exit(0)
