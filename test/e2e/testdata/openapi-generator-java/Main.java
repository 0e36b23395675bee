// Calls a toolgate gateway through the Java client (okhttp-gson) that
// openapi-generator makes of its OpenAPI document, built beside this file
// by test/e2e's TestOpenAPIGeneratorJava: an invoke, a stream read line by
// line into the generated StreamLine (each line a chunk, not an empty
// Status), a stream that fails after its first chunks (its last line a
// Status), and a typed 404. TOOLGATE_HTTP_BASE is the gateway's base URL.
// Prints PASS, or exits 1.
package org.toolgate.check;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.toolgate.client.ApiClient;
import org.toolgate.client.ApiException;
import org.toolgate.client.api.ToolServiceApi;
import org.toolgate.client.model.ErrorInfo;
import org.toolgate.client.model.InvokeToolBody;
import org.toolgate.client.model.InvokeToolResponse;
import org.toolgate.client.model.Status;
import org.toolgate.client.model.StatusDetail;
import org.toolgate.client.model.StreamLine;
import org.toolgate.client.model.StreamToolBody;
import org.toolgate.client.model.StreamToolResponse;

public final class Main {
  private static void check(boolean ok, String what) {
    if (!ok) {
      throw new IllegalStateException(what);
    }
  }

  /** The lines of a stream answer, each read as the generated StreamLine. */
  private static List<StreamLine> stream(ToolServiceApi api, StreamToolBody body) throws Exception {
    okhttp3.Call call = api.streamToolCall("echo", body, null);
    List<StreamLine> lines = new ArrayList<>();
    try (okhttp3.Response resp = call.execute()) {
      check(resp.code() == 200, "stream: HTTP " + resp.code());
      String ct = resp.header("Content-Type", "");
      check(ct.startsWith("application/x-ndjson"), "stream: Content-Type " + ct + " for Accept " + resp.request().header("Accept"));
      BufferedReader r = new BufferedReader(new InputStreamReader(resp.body().byteStream(), StandardCharsets.UTF_8));
      for (String line; (line = r.readLine()) != null; ) {
        if (!line.isBlank()) {
          lines.add(StreamLine.fromJson(line));
        }
      }
    }
    return lines;
  }

  public static void main(String[] args) throws Exception {
    try {
      run(System.getenv("TOOLGATE_HTTP_BASE"));
    } catch (Exception e) {
      System.out.println("FAIL: " + e);
      System.exit(1);
    }
    System.out.println("PASS");
  }

  private static void run(String base) throws Exception {
    ToolServiceApi api = new ToolServiceApi(new ApiClient().setBasePath(base));

    InvokeToolResponse out = api.invokeTool("echo", new InvokeToolBody().arguments(Map.of("msg", "hello")).timeout("5s"));
    check("hello".equals(out.getOutput()), "invoke: " + out);
    System.out.println("invoke: " + out.getOutput());

    int n = 5;
    List<StreamLine> lines = stream(api, new StreamToolBody().arguments(Map.of("mode", "stream", "n", n)));
    check(lines.size() == n, "stream: " + lines.size() + " lines");
    for (int i = 0; i < n; i++) {
      Object line = lines.get(i).getActualInstance();
      check(line instanceof StreamToolResponse, "stream line " + i + " is " + line);
      StreamToolResponse c = (StreamToolResponse) line;
      check(c.getIndex().equals(String.valueOf(i)) && c.getLast() == (i == n - 1), "stream chunk " + i + ": " + c);
    }
    System.out.println("stream: " + n + " chunks");

    lines = stream(api, new StreamToolBody().arguments(Map.of("mode", "stream", "n", 50, "gap_ms", 50)).timeout("500ms"));
    check(lines.size() >= 2, "failing stream: " + lines.size() + " lines");
    for (int i = 0; i < lines.size() - 1; i++) {
      check(lines.get(i).getActualInstance() instanceof StreamToolResponse, "failing stream, line " + i + ": " + lines.get(i));
    }
    Object last = lines.get(lines.size() - 1).getActualInstance();
    check(last instanceof Status && ((Status) last).getCode() != 0, "failing stream, last line: " + last);
    System.out.println("failing stream: " + (lines.size() - 1) + " chunks, then code " + ((Status) last).getCode());

    try {
      api.invokeTool("no-such-tool", new InvokeToolBody());
      throw new IllegalStateException("unknown tool: no error");
    } catch (ApiException e) {
      check(e.getCode() == 404, "unknown tool: HTTP " + e.getCode());
      Status st = Status.fromJson(e.getResponseBody());
      String reason = "";
      for (StatusDetail d : st.getDetails()) {
        if (d.getActualInstance() instanceof ErrorInfo) {
          reason = ((ErrorInfo) d.getActualInstance()).getReason();
        }
      }
      check(st.getCode() == 5 && reason.equals("TOOL_NOT_FOUND"), "unknown tool: " + st);
      System.out.println("unknown tool: " + st.getCode() + " " + reason);
    }
  }
}
