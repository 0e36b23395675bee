// Calls a toolgate gateway through the typescript-axios client that
// openapi-generator makes of its OpenAPI document (./axios): an invoke, a
// stream read chunk by chunk (the client's own Accept header, which lists
// application/x-ndjson and text/event-stream alike, gets NDJSON), and a
// typed error. Run by test/e2e's TestOpenAPITypeScript; TOOLGATE_HTTP_BASE
// is the gateway's base URL. Prints PASS, or exits 1.
import { isAxiosError } from "axios";
import type { Readable } from "node:stream";
import { Configuration, ToolServiceApi } from "./axios";
import type { Status, StreamToolResponse } from "./axios";

function check(ok: boolean, what: string): asserts ok {
  if (!ok) throw new Error(what);
}

async function main(): Promise<void> {
  const api = new ToolServiceApi(new Configuration({ basePath: process.env.TOOLGATE_HTTP_BASE }));

  const inv = await api.invokeTool("echo", { arguments: { msg: "hello" }, timeout: "5s" });
  check(inv.status === 200 && inv.data.output === "hello", `invoke: ${inv.status} ${JSON.stringify(inv.data)}`);
  console.log(`invoke: ${inv.data.output}`);

  const n = 5;
  const resp = await api.streamTool("echo", { arguments: { mode: "stream", n, gap_ms: 100 } }, { responseType: "stream" });
  check(String(resp.config.headers?.Accept).includes("text/event-stream"), `the client sent Accept ${resp.config.headers?.Accept}`);
  check(String(resp.headers["content-type"]).startsWith("application/x-ndjson"), `stream: Content-Type ${resp.headers["content-type"]}`);
  const chunks: StreamToolResponse[] = [];
  let rest = "";
  let reads = 0;
  for await (const buf of resp.data as unknown as Readable) {
    rest += buf.toString("utf8");
    const parts = rest.split("\n");
    rest = parts.pop() ?? "";
    if (parts.some((p) => p.trim() !== "")) reads++;
    for (const p of parts) {
      if (p.trim() === "") continue;
      const line = JSON.parse(p) as Record<string, unknown>;
      check(!("code" in line), `stream failed: ${p}`);
      chunks.push(line as unknown as StreamToolResponse);
    }
  }
  check(chunks.length === n, `stream: ${chunks.length} chunks, want ${n}`);
  chunks.forEach((c, i) => check(c.index === String(i) && c.last === (i === n - 1), `chunk ${i}: ${JSON.stringify(c)}`));
  // Chunks 100 ms apart come in reads of their own, not all at the end.
  check(reads > 1, `stream: all ${n} chunks in one read`);
  console.log(`stream: ${chunks.length} chunks in ${reads} reads`);

  try {
    await api.invokeTool("no-such-tool", {});
    throw new Error("unknown tool: no error");
  } catch (e) {
    check(isAxiosError(e) && e.response?.status === 404, `unknown tool: ${e}`);
    const st = (e as { response: { data: Status } }).response.data;
    check(st.code === 5 && JSON.stringify(st.details).includes("TOOL_NOT_FOUND"), `unknown tool: ${JSON.stringify(st)}`);
    console.log(`unknown tool: ${st.code} TOOL_NOT_FOUND`);
  }
}

main().then(
  () => console.log("PASS"),
  (e: unknown) => {
    console.error("FAIL:", e instanceof Error ? e.message : e);
    process.exit(1);
  },
);
