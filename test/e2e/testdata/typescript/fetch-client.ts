// Calls a toolgate gateway through openapi-fetch, typed by the paths that
// openapi-typescript makes of its OpenAPI document (./schema.ts): an
// invoke, a typed error, a page of tools, and a stream of several chunks
// read line by line as it arrives. Run by test/e2e's TestOpenAPITypeScript;
// TOOLGATE_HTTP_BASE is the gateway's base URL. Prints PASS, or exits 1.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema";

type Status = components["schemas"]["Status"];
type StreamLine = components["schemas"]["StreamLine"];

function check(ok: boolean, what: string): asserts ok {
  if (!ok) throw new Error(what);
}

async function main(): Promise<void> {
  const client = createClient<paths>({ baseUrl: process.env.TOOLGATE_HTTP_BASE });

  const inv = await client.POST("/v1/tools/{name}:invoke", {
    params: { path: { name: "echo" } },
    body: { arguments: { msg: "hello" }, timeout: "5s" },
  });
  check(inv.response.status === 200 && inv.data?.output === "hello", `invoke: ${inv.response.status} ${JSON.stringify(inv.data ?? inv.error)}`);
  console.log(`invoke: ${inv.data?.output}`);

  const missing = await client.POST("/v1/tools/{name}:invoke", { params: { path: { name: "no-such-tool" } }, body: {} });
  const status: Status | undefined = missing.error;
  const reason = status?.details?.find((d) => "reason" in d && d["@type"] === "type.googleapis.com/google.rpc.ErrorInfo");
  check(missing.response.status === 404 && status?.code === 5 && reason !== undefined && "reason" in reason && reason.reason === "TOOL_NOT_FOUND",
    `unknown tool: ${missing.response.status} ${JSON.stringify(missing.error)}`);
  console.log(`unknown tool: ${status?.code} TOOL_NOT_FOUND`);

  const page = await client.GET("/v1/tools", { params: { query: { page_size: 1 } } });
  check(page.data?.tools?.length === 1 && !!page.data.next_page_token, `page: ${JSON.stringify(page.data ?? page.error)}`);
  const next = await client.GET("/v1/tools", { params: { query: { page_size: 1, page_token: page.data.next_page_token } } });
  check(next.data?.tools?.[0]?.name !== page.data.tools[0].name, `next page: ${JSON.stringify(next.data ?? next.error)}`);
  console.log(`pages: ${page.data.tools[0].name}, ${next.data?.tools?.[0]?.name}`);

  const n = 5;
  const stream = await client.POST("/v1/tools/{name}:stream", {
    params: { path: { name: "echo" } },
    body: { arguments: { mode: "stream", n, gap_ms: 100 } },
    parseAs: "stream",
  });
  check(stream.response.status === 200 && (stream.response.headers.get("content-type") ?? "").startsWith("application/x-ndjson"),
    `stream: ${stream.response.status} ${stream.response.headers.get("content-type")}`);
  const reader = (stream.data as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  const lines: StreamLine[] = [];
  let rest = "";
  let reads = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    rest += decoder.decode(value, { stream: true });
    const parts = rest.split("\n");
    rest = parts.pop() ?? "";
    if (parts.some((p) => p.trim() !== "")) reads++;
    for (const p of parts) if (p.trim() !== "") lines.push(JSON.parse(p) as StreamLine);
  }
  check(lines.length === n, `stream: ${lines.length} lines, want ${n}`);
  lines.forEach((line, i) => {
    check(!("code" in line) && "index" in line && line.index === String(i) && line.last === (i === n - 1), `stream line ${i}: ${JSON.stringify(line)}`);
  });
  // Chunks 100 ms apart come in reads of their own, not all at the end.
  check(reads > 1, `stream: all ${n} chunks in one read`);
  console.log(`stream: ${lines.length} chunks in ${reads} reads`);
}

main().then(
  () => console.log("PASS"),
  (e: unknown) => {
    console.error("FAIL:", e instanceof Error ? e.message : e);
    process.exit(1);
  },
);
