// An edge node for tests/sparkplug_interop.rs, on Eclipse Tahu's JavaScript client
// (`sparkplug-client` on npm): an implementation of Sparkplug B that twinops did not write.
//
//   node edge.js <serverUrl> <group> <edgeNode> <device>
//
// Commands on stdin, one a line:
//   data <pressure>         a DDATA of the pressure, by alias
//   burst <n> <every_ms>    n DDATA of the flow, one every every_ms, the values 1..n
//   gap                     skip three sequence numbers, then a DDATA of the pressure 4.0
// It prints `born` after its births and `rebirth` when asked for one (then births again),
// and `sent <n>` after a burst.
const sparkplug = require("sparkplug-client");
const readline = require("readline");

const [serverUrl, groupId, edgeNode, device] = process.argv.slice(2);
const client = sparkplug.newClient({
  serverUrl,
  username: "",
  password: "",
  groupId,
  edgeNode,
  clientId: `${groupId}-${edgeNode}-${process.pid}`,
  publishDeath: true,
  version: "spBv1.0",
});

function births() {
  client.publishNodeBirth({
    timestamp: Date.now(),
    metrics: [
      { name: "Node Control/Rebirth", type: "boolean", value: false },
      { name: "Uptime", alias: 10, type: "double", value: process.uptime() },
    ],
  });
  client.publishDeviceBirth(device, {
    timestamp: Date.now(),
    metrics: [
      {
        name: "Inputs/Discharge Pressure",
        alias: 1,
        type: "double",
        value: 4.0,
        properties: {
          engUnit: { type: "string", value: "bar" },
          hi: { type: "double", value: 5.0 },
          hihi: { type: "double", value: 6.0 },
        },
      },
      { name: "Flow", alias: 2, type: "double", value: 0, properties: { engUnit: { type: "string", value: "m3/h" } } },
      { name: "Mode", alias: 3, type: "string", value: "Auto" },
    ],
  });
  console.log("born");
}

client.on("birth", births);
client.on("ncmd", (payload) => {
  for (const m of payload.metrics || []) {
    if (m.name === "Node Control/Rebirth" && m.value) {
      console.log("rebirth");
      births();
    }
  }
});

function pressure(value) {
  client.publishDeviceData(device, {
    timestamp: Date.now(),
    metrics: [{ alias: 1, type: "double", value, timestamp: Date.now() }],
  });
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  const [cmd, a, b] = line.trim().split(/\s+/);
  if (cmd === "data") {
    pressure(Number(a));
  } else if (cmd === "gap") {
    client.seq = (client.seq + 3) % 256;
    pressure(4.0);
  } else if (cmd === "burst") {
    const n = Number(a);
    const every = Number(b);
    // Stamped 5 ms apart as they are sent, in the hour before the births (so that none
    // shares its millisecond with a value born).
    const start = Date.now() - 3600 * 1000;
    let i = 0;
    const timer = setInterval(() => {
      i += 1;
      client.publishDeviceData(device, {
        timestamp: Date.now(),
        metrics: [{ alias: 2, type: "double", value: i, timestamp: start + i * every }],
      });
      if (i >= n) {
        clearInterval(timer);
        console.log(`sent ${n}`);
      }
    }, every);
  }
});
