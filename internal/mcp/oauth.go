package mcp

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/toolgate/toolgate/internal/doorconf"
)

// The endpoint as an OAuth 2.0 protected resource (MCP authorization,
// RFC 9728): when Options.Resource names it, its metadata document says
// which authorization servers issue its tokens and which scopes they
// carry, and a request refused for want of credentials points there
// (WWW-Authenticate: Bearer resource_metadata="…"), so that a client can
// find an authorization server, get a token whose audience is this
// resource (RFC 8707), and come back with it. Checking the token
// (issuer, audience, signature, expiry) is Options.Authenticate's.

// RootMetadataPath is the well-known prefix of protected resource
// metadata; the metadata of a resource at /mcp is at RootMetadataPath/mcp
// (RFC 9728 §3.1), and clients try RootMetadataPath itself next.
const RootMetadataPath = "/.well-known/oauth-protected-resource"

// CheckResource tells why resource cannot be the endpoint's resource
// identifier (RFC 9728 §1.2, RFC 8707 §2: an absolute http(s) URI with
// no fragment), or nil.
func CheckResource(resource string) error { return doorconf.CheckMCPResource(resource) }

// metadataURL is where the metadata of resource is: its origin, the
// well-known prefix, then its path (RFC 9728 §3.1).
func metadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	return u.Scheme + "://" + u.Host + RootMetadataPath + path
}

// ResourceMetadata serves the endpoint's protected resource metadata, or
// is nil when Options.Resource is not set. Mount it at RootMetadataPath and
// RootMetadataPath/mcp.
func (s *Server) ResourceMetadata() http.Handler {
	if s.opts.Resource == "" {
		return nil
	}
	return auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               s.opts.Resource,
		AuthorizationServers:   s.opts.AuthorizationServers,
		ScopesSupported:        s.opts.Scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "toolgate MCP endpoint",
	})
}

// challenge is the WWW-Authenticate value of a request refused for want
// of acceptable credentials: a Bearer challenge that names the resource
// metadata when there is one, with error="invalid_token" when a
// credential was presented (RFC 6750 §3).
func (s *Server) challenge(r *http.Request) string {
	params := []string{`realm="toolgate"`}
	if s.opts.Resource != "" {
		params = append(params, "resource_metadata="+strconv.Quote(metadataURL(s.opts.Resource)))
		if len(s.opts.Scopes) > 0 {
			params = append(params, "scope="+strconv.Quote(strings.Join(s.opts.Scopes, " ")))
		}
	}
	if r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" {
		params = append(params, `error="invalid_token"`)
	}
	return "Bearer " + strings.Join(params, ", ")
}
