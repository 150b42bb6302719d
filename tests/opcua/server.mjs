// An OPC UA server twinops did not write: node-opcua, with its demo alarm address space
// (construct_demo_alarm_in_address_space: a tank level with an exclusive and a
// non-exclusive level alarm) and a pump station of our own in a namespace of its own.
//
//   node server.mjs PORT PKI_DIR [EXTRA_NAMESPACES] [animate] [< /dev/null]
//
// EXTRA_NAMESPACES registers that many namespaces before the plant's, so a restart with
// another number renumbers them as a server upgrade may. Prints `ready URL` when
// listening; then reads commands on stdin, one per line, and answers `ok ...`:
//   set NAME VALUE     a plant variable (Pressure, Flow, Running, Mode) takes a value
//   bad NAME           its status becomes BadSensorFailure (its value is kept)
//   level VALUE        the tank level (0..1; the exclusive alarm's limits 0.2/0.8/0.9)
//   ack                acknowledges the tank level condition at the server
//   acked              prints the condition's AckedState: `ok acked true|false`
//   burst N [GAP]      N values of Flow stamped 1 ms apart at the source, GAP ms apart
//                      in real time (default 0)
//   bench N            adds N Double variables Bench.V0.. (nsu=urn:twinops-test:plant;s=Bench.V<i>)
//   churn HZ SECS      sets every bench variable HZ times a second for SECS seconds, then
//                      prints `done churn <values set>`
//   quit
import readline from "node:readline";
import {
    OPCUAServer,
    OPCUACertificateManager,
    DataType,
    StatusCodes,
    standardUnits,
    SecurityPolicy,
    MessageSecurityMode,
    Variant,
    DataValue,
} from "node-opcua";
import { construct_demo_alarm_in_address_space } from "node-opcua-address-space/testHelpers.js";

const [port, pki, extra] = [Number(process.argv[2] || 48400), process.argv[3] || "./pki", Number(process.argv[4] || 0)];
// `animate` (for the demo): the tank fills and empties every 4 minutes, through its
// High and HighHigh limits, and the pump's values wander.
const animate = process.argv[5] === "animate";

const serverCertificateManager = new OPCUACertificateManager({
    automaticallyAcceptUnknownCertificate: true,
    rootFolder: pki,
});
// X.509 user identities: any user certificate is taken (the test's own).
const userCertificateManager = new OPCUACertificateManager({
    automaticallyAcceptUnknownCertificate: true,
    rootFolder: `${pki}/users`,
});
const server = new OPCUAServer({
    userCertificateManager,
    port,
    hostname: "127.0.0.1",
    serverCertificateManager,
    securityPolicies: [
        SecurityPolicy.None,
        SecurityPolicy.Basic256Sha256,
        SecurityPolicy.Aes128_Sha256_RsaOaep,
        SecurityPolicy.Aes256_Sha256_RsaPss,
    ],
    securityModes: [MessageSecurityMode.None, MessageSecurityMode.Sign, MessageSecurityMode.SignAndEncrypt],
    allowAnonymous: true,
    userManager: { isValidUser: (user, password) => user === "operator" && password === "secret-pw" },
    serverInfo: { applicationUri: "urn:twinops-test:node-opcua", productUri: "urn:twinops-test" },
    // In the certificate, so that a client checking the host name accepts 127.0.0.1.
    alternateHostname: ["localhost", "127.0.0.1"],
});
await server.initialize();
const addressSpace = server.engine.addressSpace;
for (let i = 0; i < extra; i++) {
    addressSpace.registerNamespace(`urn:twinops-test:filler:${i}`);
}
const plant = addressSpace.registerNamespace("urn:twinops-test:plant");

const demo = {};
construct_demo_alarm_in_address_space(demo, addressSpace);

const station = plant.addObject({ browseName: "PS1", nodeId: "s=PS1", organizedBy: addressSpace.rootFolder.objects });
const pump = plant.addObject({ browseName: "P-101", nodeId: "s=PS1.P-101", componentOf: station, description: "Raw water pump 1" });
// How the station's equipment acts on the pump, as an address space models it: Part 23's
// Controls (the PLC controls it) and a reference type of the site's own (the wet well
// Feeds it).
const wetWell = plant.addObject({ browseName: "WW-1", nodeId: "s=PS1.WW-1", componentOf: station });
const plc = plant.addObject({ browseName: "PLC-1", nodeId: "s=PS1.PLC-1", componentOf: station });
const feeds = plant.addReferenceType({ browseName: "Feeds", inverseName: "FedBy", subtypeOf: "NonHierarchicalReferences" });
wetWell.addReference({ referenceType: feeds.nodeId, nodeId: pump.nodeId, isForward: true });
plc.addReference({ referenceType: "Controls", nodeId: pump.nodeId, isForward: true });
const variables = {
    Pressure: plant.addAnalogDataItem({
        browseName: "DischargePressure",
        nodeId: "s=PS1.P-101.DischargePressure",
        componentOf: pump,
        description: "Discharge pressure",
        dataType: "Double",
        engineeringUnitsRange: { low: 0, high: 16 },
        engineeringUnits: standardUnits.bar,
        value: { dataType: DataType.Double, value: 4.2 },
    }),
    Flow: plant.addAnalogDataItem({
        browseName: "Flow",
        nodeId: "s=PS1.P-101.Flow",
        componentOf: pump,
        description: "Discharge flow",
        dataType: "Double",
        engineeringUnitsRange: { low: 0, high: 500 },
        engineeringUnits: standardUnits.cubic_metre_per_hour,
        value: { dataType: DataType.Double, value: 120 },
    }),
    Running: plant.addVariable({
        browseName: "Running",
        nodeId: "s=PS1.P-101.Running",
        componentOf: pump,
        dataType: "Boolean",
        value: { dataType: DataType.Boolean, value: true },
    }),
    Mode: plant.addVariable({
        browseName: "Mode",
        nodeId: "s=PS1.P-101.Mode",
        componentOf: pump,
        dataType: "String",
        value: { dataType: DataType.String, value: "AUTO" },
    }),
};
const bench = [];
let benchObject;
const types = { Pressure: DataType.Double, Flow: DataType.Double, Running: DataType.Boolean, Mode: DataType.String };

function set(name, value, status = StatusCodes.Good, at = new Date()) {
    variables[name].setValueFromSource(new Variant({ dataType: types[name], value }), status, at);
}
function typed(name, text) {
    if (types[name] === DataType.Boolean) return text === "true" || text === "1";
    if (types[name] === DataType.String) return text;
    return Number(text);
}

await server.start();
console.log(`ready opc.tcp://127.0.0.1:${port}`);
if (animate) {
    const started = Date.now();
    setInterval(() => {
        const t = (Date.now() - started) / 1000;
        demo.tankLevel.setValueFromSource({ dataType: DataType.Double, value: 0.55 + 0.4 * Math.sin((2 * Math.PI * t) / 240) });
        set("Pressure", 4.2 + 0.3 * Math.sin(t / 7) + 0.05 * Math.random());
        set("Flow", 120 + 8 * Math.sin(t / 11) + Math.random());
    }, 1000);
}

// Without commands (stdin at its end, `< /dev/null`), it serves until killed.
let quit = false;
const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
    const [command, a, b] = line.trim().split(/\s+/);
    try {
        if (command === "set") {
            set(a, typed(a, b));
        } else if (command === "bad") {
            const last = variables[a].readValue().value;
            variables[a].setValueFromSource(last, StatusCodes.BadSensorFailure, new Date());
        } else if (command === "level") {
            demo.tankLevel.setValueFromSource({ dataType: DataType.Double, value: Number(a) });
        } else if (command === "ack") {
            const c = demo.tankLevelCondition;
            c.acknowledgeAndAutoConfirmBranch(c.currentBranch(), "acknowledged at the SCADA");
        } else if (command === "acked") {
            const c = demo.tankLevelCondition;
            console.log(`ok acked ${c.currentBranch().getAckedState()}`);
            continue;
        } else if (command === "burst") {
            const start = Date.now();
            for (let i = 0; i < Number(a); i++) {
                set("Flow", 100 + (i % 1000) / 10, StatusCodes.Good, new Date(start + i));
                if (Number(b || 0) > 0) await new Promise((r) => setTimeout(r, Number(b)));
            }
        } else if (command === "bench") {
            benchObject ??= plant.addObject({ browseName: "Bench", nodeId: "s=Bench", organizedBy: addressSpace.rootFolder.objects });
            for (let i = bench.length; i < Number(a); i++) {
                bench.push(plant.addVariable({ browseName: `V${i}`, nodeId: `s=Bench.V${i}`, componentOf: benchObject, dataType: "Double", value: { dataType: DataType.Double, value: 0 } }));
            }
        } else if (command === "churn") {
            const [hz, secs] = [Number(a), Number(b)];
            let set = 0;
            let tick = 0;
            const timer = setInterval(() => {
                tick++;
                const at = new Date();
                for (const v of bench) {
                    v.setValueFromSource(new Variant({ dataType: DataType.Double, value: tick + Math.random() }), StatusCodes.Good, at);
                    set++;
                }
            }, 1000 / hz);
            setTimeout(() => {
                clearInterval(timer);
                console.log(`done churn ${set}`);
            }, secs * 1000);
        } else if (command === "quit") {
            quit = true;
            break;
        } else {
            console.log(`unknown ${command}`);
            continue;
        }
        console.log(`ok ${line.trim()}`);
    } catch (e) {
        console.log(`error ${e.message}`);
    }
}
if (!quit) {
    await new Promise(() => {});
}
await server.shutdown(0);
process.exit(0);
