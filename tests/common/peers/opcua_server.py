#!/usr/bin/env python3
"""An OPC-UA server written by others (asyncua) for opex-connector's tests.

    opcua_server.py --port PORT [--secure DIR --user NAME --password PW]

Serves opc.tcp://127.0.0.1:PORT/opex-test/ with namespace urn:opex-test (index 2) and these
variables, by string node id:

    ns=2;s=Temperature  Double   20.0 + a sine, changes every 100 ms
    ns=2;s=Counter      Int32    +1 every 100 ms
    ns=2;s=PumpOn       Boolean  toggles every second
    ns=2;s=Setpoint     Double   42.5, writable by clients (nothing else changes it)

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


async def main():
    args = argparse.ArgumentParser()
    args.add_argument("--port", type=int, required=True)
    args.add_argument("--secure", help="folder of the server certificate")
    args.add_argument("--user")
    args.add_argument("--password")
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
    setpoint = await plant.add_variable(ua.NodeId("Setpoint", idx), "Setpoint", 42.5)
    await setpoint.set_writable()

    async def on_write(event, _dispatcher):
        if event.is_external:
            nodes = [str(w.NodeId) for w in event.request_params.NodesToWrite]
            print("client write: " + " ".join(nodes), flush=True)

    server.subscribe_server_callback(CallbackType.PreWrite, on_write)

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
