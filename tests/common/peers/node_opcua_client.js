#!/usr/bin/env node
// A one-shot OPC-UA client written by others (node-opcua-client, pinned in scripts/test.sh)
// for opex-connector's tests:
//
//     node node_opcua_client.js URL --read NODEID [--policy P] [--mode M]
//                               [--user U --password PW] [--pki DIR] [--timeout-ms MS]
//
// P: None (default), Basic256Sha256, Aes128_Sha256_RsaOaep, Aes256_Sha256_RsaPss;
// M: None (default with None), Sign, SignAndEncrypt (default otherwise). Connects to URL (one
// try), opens a session (user name and password, or anonymous), reads the Value of NODEID
// and prints one JSON line:
//
//     {"ok":true,"value":..,"status":"Good","data_type":"Double"}
//     {"ok":false,"error":"<StatusCode name, or the message>","message":"<the whole message>"}
//
// and exits 0 either way; only a usage error exits non-zero (2). After --timeout-ms (default
// 20000) it gives up with {"ok":false,"error":"timeout"}.
//
// DIR (default ./pki) is the client's PKI as node-opcua lays it out: its own certificate
// (made there on first use: DIR/own/certs/client_certificate.pem, application URI
// urn:opex-test:node-client) and key, and the server certificates it trusts; it accepts any
// server certificate (it is a test client). node-opcua-client is found through NODE_PATH
// (the test wrapper sets it to the npm folder scripts/test.sh installs into).
"use strict";

const path = require("path");

const USAGE =
    "usage: node node_opcua_client.js URL --read NODEID [--policy P] [--mode M] " +
    "[--user U --password PW] [--pki DIR] [--timeout-ms MS]";

function usage(problem) {
    process.stderr.write(`${problem}\n${USAGE}\n`);
    process.exit(2);
}

function parseArgs(argv) {
    const opts = { policy: "None", mode: null, pki: "pki", timeoutMs: 20000 };
    const names = {
        "--read": "read",
        "--policy": "policy",
        "--mode": "mode",
        "--user": "user",
        "--password": "password",
        "--pki": "pki",
        "--timeout-ms": "timeoutMs",
    };
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        if (names[arg]) {
            if (i + 1 >= argv.length) usage(`${arg} needs a value`);
            opts[names[arg]] = argv[++i];
        } else if (arg.startsWith("-")) {
            usage(`unknown option ${arg}`);
        } else if (!opts.url) {
            opts.url = arg;
        } else {
            usage(`one URL only, not also ${arg}`);
        }
    }
    if (!opts.url) usage("the endpoint URL is missing");
    if (!opts.read) usage("--read NODEID is missing");
    if (opts.mode === null) opts.mode = opts.policy === "None" ? "None" : "SignAndEncrypt";
    if ((opts.policy === "None") !== (opts.mode === "None")) {
        usage("--policy None goes with --mode None, and only with it");
    }
    if ((opts.user === undefined) !== (opts.password === undefined)) {
        usage("--user and --password go together");
    }
    opts.timeoutMs = Number(opts.timeoutMs);
    if (!Number.isFinite(opts.timeoutMs) || opts.timeoutMs <= 0) usage("--timeout-ms is a number");
    return opts;
}

let answered = false;
/** Prints the one answer line (the first answer only). */
function answer(obj) {
    if (answered) return;
    answered = true;
    process.stdout.write(`${JSON.stringify(obj)}\n`);
}

/** Exits 0 once the answer is written out. */
function finish() {
    process.stdout.write("", () => process.exit(0));
}

/** A StatusCode's name in an error, else the message. */
function errorName(err) {
    if (err && err.statusCode && typeof err.statusCode.name === "string") {
        return err.statusCode.name;
    }
    const message = String((err && err.message) || err).trim();
    const found = message.match(/\b(Bad|Uncertain)[A-Z][A-Za-z]*/);
    return found ? found[0] : message;
}

/** A value as JSON holds it. */
function plain(value) {
    if (value === null || value === undefined) return null;
    if (typeof value === "bigint") return value.toString();
    if (typeof value === "number" && !Number.isFinite(value)) return String(value);
    if (value instanceof Date) return value.toISOString();
    if (Buffer.isBuffer(value)) return value.toString("base64");
    if (Array.isArray(value) || ArrayBuffer.isView(value)) return Array.from(value, plain);
    // 64-bit integers come as [high, low] arrays above; other objects by their text.
    if (typeof value === "object") return value.toString();
    return value;
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    const {
        OPCUAClient,
        MessageSecurityMode,
        SecurityPolicy,
        UserTokenType,
        AttributeIds,
        DataType,
    } = require("node-opcua-client");
    const { OPCUACertificateManager } = require("node-opcua-certificate-manager");
    if (!(opts.policy in SecurityPolicy) || !(opts.mode in MessageSecurityMode)) {
        usage(`unknown policy ${opts.policy} or mode ${opts.mode}`);
    }

    setTimeout(() => {
        answer({ ok: false, error: "timeout" });
        finish();
    }, opts.timeoutMs).unref();

    const certificateManager = new OPCUACertificateManager({
        rootFolder: path.resolve(opts.pki),
        automaticallyAcceptUnknownCertificate: true,
    });
    const client = OPCUAClient.create({
        applicationName: "opex test node client",
        applicationUri: "urn:opex-test:node-client",
        securityMode: MessageSecurityMode[opts.mode],
        securityPolicy: SecurityPolicy[opts.policy],
        endpointMustExist: false,
        clientCertificateManager: certificateManager,
        // One try: a refusal is the answer, not something to retry.
        connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
        keepSessionAlive: false,
    });
    let session = null;
    try {
        await client.connect(opts.url);
        const identity =
            opts.user === undefined
                ? { type: UserTokenType.Anonymous }
                : { type: UserTokenType.UserName, userName: opts.user, password: opts.password };
        session = await client.createSession(identity);
        const dv = await session.read({ nodeId: opts.read, attributeId: AttributeIds.Value });
        const variant = dv.value && dv.value.dataType !== DataType.Null ? dv.value : null;
        answer({
            ok: true,
            value: plain(variant ? variant.value : null),
            status: dv.statusCode.name,
            data_type: variant ? DataType[variant.dataType] : null,
        });
    } catch (err) {
        answer({ ok: false, error: errorName(err), message: String((err && err.message) || err).trim() });
    }
    // Best effort, and at most 3 s: the answer is out already.
    setTimeout(finish, 3000).unref();
    try {
        if (session) await session.close();
        await client.disconnect();
    } catch (_) {
        // nothing to tell
    }
}

main()
    .catch((err) => answer({ ok: false, error: errorName(err), message: String(err) }))
    .finally(finish);
