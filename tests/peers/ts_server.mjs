// A real MCP peer for tests: the official TypeScript SDK v2 server (npm
// @modelcontextprotocol/server 2.4.0), served by its own entries: serveStdio
// over stdio, createMcpHandler (its default HTTP setup) behind node:http.
// Both serve 2026-07-28 and 2025-era traffic from one factory.
//
//   node tests/peers/ts_server.mjs PREFIX --transport stdio|http [--port N]
//                                 [--legacy stateless|stateful|reject]
//
// --legacy picks how HTTP serves 2025-era traffic: `stateless` (createMcpHandler's
// default: no session, GET answers 405), `stateful` (the SDK's documented hand-wired
// composition: isLegacyRequest in front of a `legacy: 'reject'` handler, routing 2025
// traffic to a NodeStreamableHTTPServerTransport with sessions and a GET stream), or
// `reject` (modern only).
//
// PREFIX is the npm prefix tests/peers/ts_peer.py installed the packages in.
// http prints exactly one line `LISTENING <port>` on stdout once it accepts
// connections (port 0 picks a free one); everything else goes to stderr.
//
// Tools: echo {text}; touch {uri} (bumps a resource's version, then tells every
// listener: resources/updated for it on legacy sessions and modern listens);
// add_tool {name} (registers a tool, then tools/list_changed); route {region, shard?}
// (both marked x-mcp-header: over HTTP on 2026-07-28 they ride in Mcp-Param-* headers,
// which the SDK checks against the body, answering -32020 when they disagree);
// client_extensions (the extensions the client declared, as JSON); hang {key, seconds}
// (waits; records under key whether its request was aborted, by notifications/cancelled or
// the close of its stream) and was_aborted {key} (that record). The server declares the
// extension com.example/ts-peer.
// catdiff_reshape {name, properties, output?, readOnly?, title?}: (re)registers a tool `name`
// whose inputSchema has those string properties (and an outputSchema with the `output` ones, a
// readOnlyHint annotation, a title, when given), on every live instance too, then
// tools/list_changed.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const [prefix, ...rest] = process.argv.slice(2);
const require = createRequire(join(prefix, 'package.json'));
const { McpServer } = require('@modelcontextprotocol/server');
const { serveStdio } = require('@modelcontextprotocol/server/stdio');
const { createMcpHandler } = require('@modelcontextprotocol/server');
const { isLegacyRequest, isInitializeRequest } = require('@modelcontextprotocol/server');
const { toNodeHandler, toWebRequest, NodeStreamableHTTPServerTransport } = require('@modelcontextprotocol/node');
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
// catdiff_reshape: tool name -> its string properties.
const catdiffShapes = new Map();
// hang: key -> 'running' | 'aborted' | 'finished'.
const hangs = new Map();
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

// --catfresh-ttl-ms MS: that ttlMs (public) on every 2026-07-28 list result; --catfresh-quiet:
// tools and resources advertised without listChanged, and catfresh_add {name} adds a tool
// that later requests list, telling no one.
const catfreshTtl = option('--catfresh-ttl-ms', undefined);
const catfreshQuiet = rest.includes('--catfresh-quiet');
const catfreshHints =
  catfreshTtl === undefined
    ? undefined
    : Object.fromEntries(
        ['tools/list', 'prompts/list', 'resources/list'].map((m) => [m, { ttlMs: Number(catfreshTtl), cacheScope: 'public' }]),
      );

function build(ctx) {
  const server = new McpServer(
    { name: 'ts-v2-peer', version: '2.4.0' },
    {
      capabilities: {
        resources: { subscribe: true, listChanged: true },
        tools: { listChanged: true },
        extensions: { 'com.example/ts-peer': { flavour: 'v2' } },
      },
      cacheHints: catfreshHints,
    },
  );
  if (catfreshQuiet) {
    server.server.registerCapabilities({ tools: { listChanged: false }, resources: { listChanged: false } });
    server.registerTool('catfresh_add', { description: 'Adds a tool silently.', inputSchema: { name: z.string() } }, ({ name }) => {
      if (!extraTools.includes(name)) extraTools.push(name);
      return text(`added ${name}`);
    });
  }
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
  server.registerTool(
    'route',
    {
      description: 'Names its region; region rides in Mcp-Param-Region over HTTP.',
      inputSchema: { region: z.string().meta({ 'x-mcp-header': 'Region' }), shard: z.number().int().optional().meta({ 'x-mcp-header': 'Shard' }) },
    },
    ({ region, shard }) => text(`region ${region} shard ${shard}`),
  );
  // What the client declared: 2026-07-28 carries it in the request's _meta envelope, a 2025
  // session in its initialize.
  server.registerTool('client_extensions', { description: "Returns the client's declared extensions." }, (ctx) => {
    const envelope = ctx?.mcpReq?.envelope?.['io.modelcontextprotocol/clientCapabilities'];
    const capabilities = envelope ?? server.server.getClientCapabilities() ?? {};
    return text(JSON.stringify(capabilities.extensions ?? null));
  });
  server.registerTool(
    'hang',
    { description: 'Waits; records whether it was aborted.', inputSchema: { key: z.string(), seconds: z.number() } },
    ({ key, seconds }, ctx) =>
      new Promise((resolve) => {
        hangs.set(key, 'running');
        const signal = ctx.mcpReq.signal;
        const timer = setTimeout(() => {
          hangs.set(key, 'finished');
          resolve(text('finished'));
        }, seconds * 1000);
        signal.addEventListener('abort', () => {
          clearTimeout(timer);
          hangs.set(key, 'aborted');
          resolve(text('aborted'));
        });
      }),
  );
  server.registerTool(
    'was_aborted',
    { description: "A hang call's record.", inputSchema: { key: z.string() } },
    ({ key }) => text(JSON.stringify({ state: hangs.get(key) ?? null })),
  );
  server.registerTool(
    'catdiff_reshape',
    {
      description: 'Registers or reshapes a tool, then tools/list_changed.',
      inputSchema: {
        name: z.string(),
        properties: z.array(z.string()),
        output: z.array(z.string()).optional(),
        readOnly: z.boolean().optional(),
        title: z.string().optional(),
      },
    },
    ({ name, properties, output, readOnly, title }) => {
      catdiffShapes.set(name, { properties, output, readOnly, title });
      for (const other of live) catdiffRegister(other, name);
      announce('tools');
      return text(`reshaped ${name}`);
    },
  );
  server.catdiffTools = new Map();
  for (const name of catdiffShapes.keys()) catdiffRegister(server, name);
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

function catdiffRegister(server, name) {
  server.catdiffTools.get(name)?.remove();
  const { properties, output, readOnly, title } = catdiffShapes.get(name);
  const strings = (names) => Object.fromEntries(names.map((property) => [property, z.string()]));
  const config = { description: 'Reshaped at run time.', inputSchema: strings(properties) };
  if (output !== undefined) config.outputSchema = strings(output);
  if (readOnly !== undefined) config.annotations = { readOnlyHint: readOnly };
  if (title !== undefined) config.title = title;
  server.catdiffTools.set(name, server.registerTool(name, config, () => text(name)));
}

if (transport === 'stdio') {
  serveStdio(build, { onerror: (error) => console.error('ts peer:', error.message) });
} else {
  const legacy = option('--legacy', 'stateless');
  const onerror = (error) => console.error('ts peer:', error.message);
  handler = createMcpHandler(build, { onerror, legacy: legacy === 'stateless' ? 'stateless' : 'reject' });
  const serve = toNodeHandler(handler);
  const sessions = new Map();
  // 2025 traffic with sessions, as the SDK documents hand-wiring it beside the modern entry.
  async function serveSession(req, res, body) {
    const sid = req.headers['mcp-session-id'];
    let transport = sid === undefined ? undefined : sessions.get(sid);
    if (transport === undefined) {
      if (sid !== undefined || req.method !== 'POST' || !isInitializeRequest(body)) {
        res.writeHead(sid === undefined ? 400 : 404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'no such session' } }));
        return;
      }
      transport = new NodeStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => sessions.set(id, transport),
      });
      transport.onclose = () => sessions.delete(transport.sessionId);
      await build({ era: 'legacy' }).connect(transport);
    }
    await transport.handleRequest(req, res, body);
  }
  async function route(req, res) {
    let body;
    if (req.method === 'POST') {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        body = undefined;
      }
    }
    if (legacy === 'stateful' && (await isLegacyRequest(await toWebRequest(req, body), body))) {
      await serveSession(req, res, body);
    } else {
      await serve(req, res, body);
    }
  }
  const http = createServer((req, res) => {
    res.on('close', () => {
      for (const server of live) if (!server.isConnected()) live.delete(server);
    });
    route(req, res).catch((error) => {
      onerror(error);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  http.listen(Number(option('--port', '0')), '127.0.0.1', () => {
    process.stdout.write(`LISTENING ${http.address().port}\n`);
  });
  const stop = () => {
    const closing = [...sessions.values()].map((transport) => transport.close().catch(() => {}));
    Promise.all([handler.close(), ...closing]).finally(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
