// The TypeScript MCP SDKs as clients of two tool sets' MCP endpoints, run
// by test/e2e/toolset_test.go (TestToolSetsMCPClients) with node:
//
//   node sets.mjs v2-auto | v2-legacy | v1
//
// Environment: TOOLGATE_SETS_BASE, the gateway's HTTP base, whose registry
// has the sets alpha ("Alpha desk": echo, tell-joke shown as alpha-joke)
// and beta ("Beta desk": echo shown as repeat). Each set's /mcp/<set> must
// be a server of its own: its name and instructions, its tools alone, any
// other tool unknown. Each check prints "ok <name>"; the first failure
// exits 1. The last line is "PASS <client>".
import assert from 'node:assert/strict';

const which = process.argv[2];
const base = process.env.TOOLGATE_SETS_BASE;
if (!base) {
  console.error('TOOLGATE_SETS_BASE is not set: run with go test ./test/e2e -run ToolSetsMCPClients');
  process.exit(2);
}

let connect;
let callTool;
if (which === 'v2-auto' || which === 'v2-legacy') {
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const mode = which === 'v2-auto' ? 'auto' : 'legacy';
  connect = async (u) => {
    const client = new Client({ name: 'toolgate-test', version: '1.0.0' }, { versionNegotiation: { mode } });
    await client.connect(new StreamableHTTPClientTransport(u));
    return client;
  };
  callTool = (client, params) => client.callTool(params);
} else if (which === 'v1') {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
  connect = async (u) => {
    const client = new Client({ name: 'toolgate-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(u));
    return client;
  };
  callTool = (client, params) => client.callTool(params);
} else {
  console.error('usage: node sets.mjs v2-auto|v2-legacy|v1');
  process.exit(2);
}

const sets = {
  alpha: { title: 'Alpha desk', instructions: 'Alpha: echo and jokes.', tools: ['alpha-joke', 'echo'], inside: 'echo', outside: ['repeat'] },
  beta: { title: 'Beta desk', instructions: 'Beta: repeat only.', tools: ['repeat'], inside: 'repeat', outside: ['echo', 'tell-joke'] },
};

for (const [name, want] of Object.entries(sets)) {
  const client = await connect(new URL(`${base}/mcp/${name}`));
  assert.equal(client.getServerVersion()?.name, want.title);
  assert.equal(client.getInstructions(), want.instructions);
  console.log(`ok ${name} server name and instructions`);
  const listed = (await client.listTools()).tools.map((t) => t.name).sort();
  assert.deepEqual(listed, want.tools);
  console.log(`ok ${name} lists its tools alone`);
  const res = await callTool(client, { name: want.inside, arguments: { mode: 'user' } });
  assert.ok(!res.isError, JSON.stringify(res));
  assert.equal(res.content[0].text, 'anonymous');
  console.log(`ok ${name} calls ${want.inside}`);
  for (const tool of want.outside) {
    await assert.rejects(callTool(client, { name: tool, arguments: { mode: 'user' } }), (e) => {
      assert.equal(e.code, -32602, String(e));
      assert.match(e.message, /not found/);
      return true;
    });
    console.log(`ok ${name} refuses ${tool} as unknown`);
  }
  await client.close();
}
console.log(`PASS ${which}`);
