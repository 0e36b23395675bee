package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
)

// TestServedSpecRoutes: the /openapi.json a gateway serves describes that
// gateway. Every operation it lists is a route the gateway serves — no 404
// ROUTE_NOT_FOUND, 405 or 501 UNIMPLEMENTED — with durable operations on
// and off; without them StartTool and /v1/operations are not listed.
func TestServedSpecRoutes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		operations bool
	}{{"operations off", false}, {"operations on", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := schemathesisGateway(t, tc.operations)
			var doc struct {
				Paths map[string]map[string]struct {
					OperationID string `json:"operationId"`
				} `json:"paths"`
			}
			getJSON(t, base+"/openapi.json", &doc)
			var v2 struct {
				Paths map[string]any `json:"paths"`
			}
			getJSON(t, base+"/openapi.v2.json", &v2)
			for _, p := range []string{"/v1/tools/{name}:start", "/v1/operations", "/v1/operations/{id}", "/v1/operations/{id}:wait"} {
				if _, listed := doc.Paths[p]; listed != tc.operations {
					t.Errorf("/openapi.json lists %s: %v, want %v", p, listed, tc.operations)
				}
			}
			if _, listed := v2.Paths["/v1/tools/{name}:start"]; listed != tc.operations {
				t.Errorf("/openapi.v2.json lists StartTool: %v, want %v", listed, tc.operations)
			}
			paths := make([]string, 0, len(doc.Paths))
			for p := range doc.Paths {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			for _, p := range paths {
				for method, op := range doc.Paths[p] {
					url := base + strings.NewReplacer("{name}", "echo", "{id}", "echo-service").Replace(p)
					if strings.HasPrefix(p, "/v1/operations/") {
						url = base + strings.ReplaceAll(p, "{id}", "no-such-operation")
					}
					var body io.Reader
					if method == "post" {
						body = strings.NewReader("{}")
					}
					req, err := http.NewRequestWithContext(t.Context(), strings.ToUpper(method), url, body)
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					var st struct {
						Details []struct {
							Reason string `json:"reason"`
						} `json:"details"`
					}
					_ = json.Unmarshal(b, &st)
					routeMissing := resp.StatusCode == http.StatusNotFound && len(st.Details) > 0 && st.Details[0].Reason == "ROUTE_NOT_FOUND"
					if routeMissing || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented {
						t.Errorf("%s (%s %s) is in /openapi.json, and the gateway answers %s %s",
							op.OperationID, strings.ToUpper(method), p, resp.Status, b)
					}
				}
			}
		})
	}
}

// getJSON decodes the JSON answer of GET url into v; any other answer than
// 200 fails the test.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
