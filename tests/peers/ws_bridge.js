// A WebSocket server on the Node `ws` library that bridges each connection to a new stdio MCP
// server (one JSON-RPC message per text frame, one per line on the child's stdio).
//
//   node ws_bridge.js <path of the ws module> <argv of the stdio server...>
//
// Prints exactly one line `LISTENING <port>` once it accepts connections. It selects the
// subprotocol "mcp" when offered and refuses the upgrade otherwise.
"use strict";
const { spawn } = require("child_process");
const { WebSocketServer } = require(process.argv[2]);
const server = process.argv.slice(3);

const wss = new WebSocketServer({
  host: "127.0.0.1",
  port: 0,
  handleProtocols: (offered) => (offered.has("mcp") ? "mcp" : false),
});
wss.on("listening", () => process.stdout.write(`LISTENING ${wss.address().port}\n`));
wss.on("connection", (socket) => {
  const child = spawn(server[0], server.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  let pending = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk) => {
    pending += chunk;
    let end;
    while ((end = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, end).trim();
      pending = pending.slice(end + 1);
      if (line) socket.send(line);
    }
  });
  socket.on("message", (data) => child.stdin.write(data.toString("utf8") + "\n"));
  socket.on("close", () => child.kill());
  child.on("exit", () => socket.close(1000));
});
