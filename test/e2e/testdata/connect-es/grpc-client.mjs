// Calls a toolgate gateway's HTTP listener with Connect-ES's gRPC transport
// (HTTP/2 in plain text, prior knowledge: h2c), run by test/e2e's
// TestConnectESGRPC. The ToolService's descriptor comes from the
// FileDescriptorSet `buf build` writes (TOOLGATE_DESCRIPTORS), so no code
// is generated. TOOLGATE_HTTP_BASE is the gateway's base URL. It exits
// non-zero on the first thing that is not as it should be.
import { readFileSync } from "node:fs";
import { createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";

const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(process.env.TOOLGATE_DESCRIPTORS)));
const service = registry.getService("toolgate.v1.ToolService");
if (!service) throw new Error("no toolgate.v1.ToolService in the descriptors");
const transport = createGrpcTransport({ baseUrl: process.env.TOOLGATE_HTTP_BASE });
const client = createClient(service, transport);

function fail(msg) {
  console.error("FAIL: " + msg);
  process.exit(1);
}

const inv = await client.invokeTool({ name: "echo", argumentsJson: '{"msg": "hello over h2c"}' });
if (inv.output !== "hello over h2c") fail(`invoke: ${JSON.stringify(inv.output)}`);
console.log(`invoke: ${inv.output}`);

const chunks = [];
for await (const c of client.streamTool({ name: "echo", argumentsJson: '{"mode": "stream", "n": 4}' })) {
  chunks.push(c.output);
}
if (chunks.join("") !== "0,1,2,3") fail(`stream: ${JSON.stringify(chunks)}`);
console.log(`stream: ${chunks.length} chunks`);

try {
  await client.getTool({ name: "no-such-tool" });
  fail("unknown tool: no error");
} catch (e) {
  const err = ConnectError.from(e);
  const info = err.details.find((d) => d.type === "google.rpc.ErrorInfo");
  if (err.code !== Code.NotFound || !info) fail(`unknown tool: ${err.code} ${err.rawMessage} ${JSON.stringify(err.details.map((d) => d.type))}`);
  console.log(`unknown tool: ${err.code} ${info.type}`);
}
console.log("PASS");
