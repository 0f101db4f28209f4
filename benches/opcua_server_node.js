// The reference of `scripts/bench.sh opcua-server`: node-opcua's own server (the one
// Node-RED's OPC-UA server node runs) serving DEVICES folders of POINTS Double variables
// `ns=1;s=dev-<d>.p<i>`, every value changed every INTERVAL_MS with a source timestamp, as a
// poll would. Security None, anonymous. Prints `ready <namespace uri>` once it listens.
//
// Usage: node opcua_server_node.js PORT DEVICES POINTS INTERVAL_MS PKI_DIR
// (NODE_PATH names the node_modules folder where scripts/test.sh installed node-opcua-server.)

"use strict";

const { OPCUAServer } = require("node-opcua-server");
const { OPCUACertificateManager } = require("node-opcua-certificate-manager");
const { MessageSecurityMode, SecurityPolicy } = require("node-opcua-secure-channel");
const { DataType } = require("node-opcua-variant");
const { StatusCodes } = require("node-opcua-status-code");

async function main() {
    const [port, devices, points, interval, pki] = process.argv.slice(2);
    const certificates = new OPCUACertificateManager({
        rootFolder: pki,
        automaticallyAcceptUnknownCertificate: true,
    });
    const server = new OPCUAServer({
        port: Number(port),
        hostname: "127.0.0.1",
        alternateHostname: ["127.0.0.1"],
        resourcePath: "/",
        securityPolicies: [SecurityPolicy.None],
        securityModes: [MessageSecurityMode.None],
        allowAnonymous: true,
        serverCertificateManager: certificates,
        maxConnectionsPerEndpoint: 10,
        serverCapabilities: {
            maxArrayLength: 100000,
            operationLimits: { maxMonitoredItemsPerCall: 100000 },
        },
    });
    await server.initialize();
    const space = server.engine.addressSpace;
    const ns = space.getOwnNamespace();
    const variables = [];
    for (let d = 1; d <= Number(devices); d++) {
        const folder = ns.addFolder(space.rootFolder.objects, {
            browseName: `dev-${d}`,
            nodeId: `s=dev-${d}`,
        });
        for (let i = 0; i < Number(points); i++) {
            variables.push(
                ns.addVariable({
                    componentOf: folder,
                    browseName: `p${i}`,
                    nodeId: `s=dev-${d}.p${i}`,
                    dataType: "Double",
                    value: { dataType: DataType.Double, value: 0 },
                }),
            );
        }
    }
    const started = Date.now();
    setInterval(() => {
        const now = new Date();
        const t = (now.getTime() - started) / 1000;
        variables.forEach((v, i) => {
            v.setValueFromSource(
                { dataType: DataType.Double, value: Math.sin(t / 60 + i) * 5 + 180 },
                StatusCodes.Good,
                now,
            );
        });
    }, Number(interval));
    await server.start();
    console.log(`ready ${ns.namespaceUri}`);
    process.on("SIGTERM", async () => {
        await server.shutdown(0);
        process.exit(0);
    });
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
