// A real MCP peer for tests: the official TypeScript SDK v2 server (npm
// @modelcontextprotocol/server 2.4.0), served by its own entries: serveStdio
// over stdio, createMcpHandler (its default HTTP setup) behind node:http.
// Both serve 2026-07-28 and 2025-era traffic from one factory.
//
//   node tests/peers/ts_server.mjs PREFIX --transport stdio|http [--port N]
//
// PREFIX is the npm prefix tests/peers/ts_peer.py installed the packages in.
// http prints exactly one line `LISTENING <port>` on stdout once it accepts
// connections (port 0 picks a free one); everything else goes to stderr.
//
// Tools: echo {text}; touch {uri} (bumps a resource's version, then tells every
// listener: resources/updated for it on legacy sessions and modern listens);
// add_tool {name} (registers a tool, then tools/list_changed).
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const [prefix, ...rest] = process.argv.slice(2);
const require = createRequire(join(prefix, 'package.json'));
const { McpServer } = require('@modelcontextprotocol/server');
const { serveStdio } = require('@modelcontextprotocol/server/stdio');
const { createMcpHandler } = require('@modelcontextprotocol/server');
const { toNodeHandler } = require('@modelcontextprotocol/node');
const { z } = require('zod');

function option(name, fallback) {
  const at = rest.indexOf(name);
  return at >= 0 ? rest[at + 1] : fallback;
}

const transport = option('--transport', 'stdio');
const versions = new Map([
  ['demo://a', 0],
  ['demo://b', 0],
]);
const extraTools = [];
// Every live server instance (stdio pins one per connection; HTTP makes one per request).
const live = new Set();
let handler;

function announce(kind, uri) {
  if (handler !== undefined) {
    if (kind === 'resource') handler.notify.resourceUpdated(uri);
    else handler.notify.toolsChanged();
  }
  for (const server of live) {
    if (!server.isConnected()) continue;
    if (kind !== 'resource') server.sendToolListChanged();
    else if (server.subscribed.has(uri) || !server.legacy) server.server.sendResourceUpdated({ uri }).catch(() => {});
  }
}

function text(value) {
  return { content: [{ type: 'text', text: String(value) }] };
}

function build(ctx) {
  const server = new McpServer(
    { name: 'ts-v2-peer', version: '2.4.0' },
    { capabilities: { resources: { subscribe: true, listChanged: true }, tools: { listChanged: true } } },
  );
  server.registerTool('echo', { description: 'Returns its text.', inputSchema: { text: z.string() } }, ({ text: t }) =>
    text(t),
  );
  server.registerTool(
    'touch',
    { description: 'Bumps a resource and says so.', inputSchema: { uri: z.string() } },
    ({ uri }) => {
      versions.set(uri, (versions.get(uri) ?? 0) + 1);
      announce('resource', uri);
      return text(`${uri} v${versions.get(uri)}`);
    },
  );
  server.registerTool(
    'add_tool',
    { description: 'Registers a tool, then tools/list_changed.', inputSchema: { name: z.string() } },
    ({ name }) => {
      if (!extraTools.includes(name)) extraTools.push(name);
      announce('tools');
      return text(`added ${name}`);
    },
  );
  for (const name of extraTools) {
    server.registerTool(name, { description: 'Added at run time.' }, () => text(name));
  }
  for (const uri of versions.keys()) {
    server.registerResource(uri, uri, { mimeType: 'text/plain' }, (url) => ({
      contents: [{ uri: url.href, mimeType: 'text/plain', text: `${url.href} v${versions.get(url.href)}` }],
    }));
  }
  // A 2025-era instance answers resources/subscribe itself (McpServer leaves it out).
  server.subscribed = new Set();
  server.legacy = ctx?.era === 'legacy';
  if (server.legacy) {
    server.server.setRequestHandler('resources/subscribe', (request) => {
      server.subscribed.add(request.params.uri);
      return {};
    });
    server.server.setRequestHandler('resources/unsubscribe', (request) => {
      server.subscribed.delete(request.params.uri);
      return {};
    });
  }
  live.add(server);
  return server;
}

if (transport === 'stdio') {
  serveStdio(build, { onerror: (error) => console.error('ts peer:', error.message) });
} else {
  handler = createMcpHandler(build, { onerror: (error) => console.error('ts peer:', error.message) });
  const serve = toNodeHandler(handler);
  const http = createServer((req, res) => {
    res.on('close', () => {
      for (const server of live) if (!server.isConnected()) live.delete(server);
    });
    serve(req, res);
  });
  http.listen(Number(option('--port', '0')), '127.0.0.1', () => {
    process.stdout.write(`LISTENING ${http.address().port}\n`);
  });
  const stop = () => {
    handler.close().finally(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
