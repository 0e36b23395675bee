// The TypeScript MCP SDKs as clients of the gateway's /mcp endpoint, run
// by test/e2e/mcp_clients_test.go (TestMCPTypeScriptClients) with node:
//
//   node clients.mjs v2-auto     @modelcontextprotocol/client 2.x, versionNegotiation auto (2026-07-28)
//   node clients.mjs v2-legacy   the same, legacy negotiation (2025-11-25)
//   node clients.mjs v1          @modelcontextprotocol/sdk 1.x (2025-11-25)
//
// Environment: TOOLGATE_MCP_URL (the shared gateway, anonymous callers
// allowed), TOOLGATE_MCP_SECURED_URL (a gateway that wants credentials),
// TOOLGATE_ADMIN_BASE (the shared gateway's admin listener, for /metrics).
//
// Each check prints "ok <name>"; the first failure exits 1. The last line is
// "PASS <client>".
import assert from 'node:assert/strict';

const which = process.argv[2];
const env = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`${name} is not set: run with go test ./test/e2e -run MCPTypeScriptClients`);
    process.exit(2);
  }
  return v;
};
const url = new URL(env('TOOLGATE_MCP_URL'));
const securedURL = new URL(env('TOOLGATE_MCP_SECURED_URL'));
const adminBase = env('TOOLGATE_ADMIN_BASE');

let connect; // (url) => a connected client
let callTool; // (client, params, options) => result
let era;
if (which === 'v2-auto' || which === 'v2-legacy') {
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const mode = which === 'v2-auto' ? 'auto' : 'legacy';
  connect = async (u) => {
    const client = new Client({ name: 'toolgate-test', version: '1.0.0' }, { versionNegotiation: { mode } });
    await client.connect(new StreamableHTTPClientTransport(u));
    return client;
  };
  callTool = (client, params, options) => client.callTool(params, options);
  era = (client) => client.getNegotiatedProtocolVersion?.() ?? client.getProtocolVersion?.();
} else if (which === 'v1') {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
  connect = async (u) => {
    const client = new Client({ name: 'toolgate-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(u));
    return client;
  };
  callTool = (client, params, options) => client.callTool(params, undefined, options);
  era = (client) => client.transport?.protocolVersion;
} else {
  console.error('usage: node clients.mjs v2-auto|v2-legacy|v1');
  process.exit(2);
}

const ok = (name) => console.log(`ok ${name}`);
const textOf = (result) => {
  assert.equal(result.content.length, 1, JSON.stringify(result.content));
  assert.equal(result.content[0].type, 'text');
  return result.content[0].text;
};

async function canceledCalls() {
  const metrics = await (await fetch(`${adminBase}/metrics`)).text();
  const m = metrics.match(/^toolgate_calls_total\{code="Canceled",method="mcp\/InvokeTool",tool="echo"\} (\d+)/m);
  return m ? Number(m[1]) : 0;
}

const client = await connect(url);
const protocol = era(client);
console.log(`protocol ${protocol}`);
// auto must reach the newest revision, the others the handshake era
assert.equal(protocol, which === 'v2-auto' ? '2026-07-28' : '2025-11-25');

// tools/list with schemas
const tools = new Map();
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : undefined);
  for (const t of page.tools) tools.set(t.name, t);
  cursor = page.nextCursor;
} while (cursor);
assert.ok(tools.has('echo') && tools.has('tell-joke'), [...tools.keys()].join(','));
assert.equal(tools.get('tell-joke').description, 'Tell a joke on a given topic');
assert.equal(tools.get('tell-joke').inputSchema.properties.topic.type, 'string');
ok('list with schemas');

// tools/call
const joke = await callTool(client, { name: 'tell-joke', arguments: { topic: 'programming' } });
assert.ok(!joke.isError && textOf(joke).length > 10, JSON.stringify(joke));
ok('call');

// a stream as ordered progress
const seen = [];
const streamed = await callTool(client, { name: 'echo', arguments: { mode: 'stream', n: 6, gap_ms: 20 } }, {
  onprogress: (p) => seen.push([p.progress, p.message]),
});
assert.equal(textOf(streamed), '0,1,2,3,4,5');
assert.deepEqual(seen, [[1, '0,'], [2, '1,'], [3, '2,'], [4, '3,'], [5, '4,'], [6, '5']]);
ok('stream with ordered progress');

// the tool service's error is a tool result with isError
const failed = await callTool(client, { name: 'echo', arguments: { mode: 'fail', type: 'not-found', message: 'no such joke' } });
assert.ok(failed.isError);
assert.equal(textOf(failed), 'not-found: no such joke');
assert.equal(failed.structuredContent.error.type, 'not-found');
ok('error result');

// cancellation: the client gives up; the gateway ends the call at once
const before = await canceledCalls();
const abort = new AbortController();
const started = Date.now();
setTimeout(() => abort.abort('test gives up'), 1000);
await assert.rejects(callTool(client, { name: 'echo', arguments: { mode: 'sleep', ms: 8000, msg: 'late' } }, { signal: abort.signal }));
while ((await canceledCalls()) === before) {
  assert.ok(Date.now() - started < 5000, 'the gateway did not end the cancelled call');
  await new Promise((r) => setTimeout(r, 100));
}
ok('cancellation');
await client.close();

// no credentials: refused
await assert.rejects(async () => {
  const c = await connect(securedURL);
  await c.listTools();
}, (err) => /401|nauthori[sz]ed|missing credentials/i.test(String(err?.message ?? err)) || (console.error(err), false));
ok('unauthenticated refused');

console.log(`PASS ${which}`);
process.exit(0);
