package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func refuseAll(context.Context, *toolcall.Call) error {
	return status.Error(codes.Unauthenticated, "missing credentials")
}

// TestResourceMetadata: with a resource, the endpoint serves its RFC 9728
// metadata and its 401 challenge points there (with the scopes to ask
// for, and error="invalid_token" when a credential was refused); without
// one it serves none and the challenge is a plain Bearer.
func TestResourceMetadata(t *testing.T) {
	const resource = "https://gw.example.com/mcp"
	f := newFixture(t, mcp.Options{Authenticate: refuseAll, Resource: resource,
		AuthorizationServers: []string{"https://auth.example.com"}, Scopes: []string{"tools", "tools:call"}})
	challenge := func(f *fixture, authz string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
	}
	code, got := challenge(f, "")
	want := `Bearer realm="toolgate", resource_metadata="https://gw.example.com/.well-known/oauth-protected-resource/mcp", scope="tools tools:call"`
	if code != http.StatusUnauthorized || got != want {
		t.Errorf("without credentials: %d %s\nwant 401 %s", code, got, want)
	}
	if _, got = challenge(f, "Bearer nope"); got != want+`, error="invalid_token"` {
		t.Errorf("with a refused token: %s", got)
	}
	// The header as the SDKs' clients read it.
	challenges, err := oauthex.ParseWWWAuthenticate([]string{want})
	if err != nil || len(challenges) != 1 || challenges[0].Params["resource_metadata"] != "https://gw.example.com/.well-known/oauth-protected-resource/mcp" {
		t.Errorf("parsed challenge: %+v, %v", challenges, err)
	}

	rec := httptest.NewRecorder()
	f.srv.ResourceMetadata().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/.well-known/oauth-protected-resource/mcp", nil))
	var md oauthex.ProtectedResourceMetadata
	if err := json.Unmarshal(rec.Body.Bytes(), &md); err != nil {
		t.Fatalf("metadata %s: %v", rec.Body, err)
	}
	if md.Resource != resource || !slices.Equal(md.AuthorizationServers, []string{"https://auth.example.com"}) ||
		!slices.Equal(md.ScopesSupported, []string{"tools", "tools:call"}) {
		t.Errorf("metadata: %+v", md)
	}

	plain := newFixture(t, mcp.Options{Authenticate: refuseAll})
	if plain.srv.ResourceMetadata() != nil {
		t.Error("metadata served without a resource")
	}
	if _, got := challenge(plain, ""); got != `Bearer realm="toolgate"` {
		t.Errorf("challenge without a resource: %s", got)
	}
}

func TestCheckResource(t *testing.T) {
	for r, ok := range map[string]bool{
		"https://gw.example.com/mcp": true, "http://127.0.0.1:8081/mcp": true,
		"gw.example.com/mcp": false, "https:///mcp": false, "https://gw.example.com/mcp#x": false, "ftp://gw/mcp": false,
	} {
		if err := mcp.CheckResource(r); (err == nil) != ok {
			t.Errorf("CheckResource(%q) = %v", r, err)
		}
	}
}
