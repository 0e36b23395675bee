// Package doorconf holds what the gateway's configuration needs of the
// HTTP doors — the defaults of their settings and the check of the MCP
// endpoint's resource identifier — in a leaf package, so that reading the
// configuration links no door (nor the MCP SDK). The doors export these
// values under their own names (httpapi.DefaultSSEHeartbeat,
// mcp.DefaultMaxCacheTTL, mcp.CheckResource).
package doorconf

import (
	"errors"
	"net/url"
	"strings"
	"time"
)

// SSEHeartbeat is the default of how long a REST Server-Sent Events
// stream may stay quiet before a keep-alive comment is sent.
const SSEHeartbeat = 15 * time.Second

// MCPMaxCacheTTL is the gateway's default bound of the ttlMs caching hint
// of MCP list results.
const MCPMaxCacheTTL = 30 * time.Second

// CheckMCPResource tells why resource cannot be the MCP endpoint's
// resource identifier (RFC 9728 §1.2, RFC 8707 §2: an absolute http(s)
// URI with no fragment), or nil.
func CheckMCPResource(resource string) error {
	u, err := url.Parse(resource)
	switch {
	case err != nil:
		return err
	case u.Scheme != "https" && u.Scheme != "http", u.Host == "":
		return errors.New("want an absolute https:// URI such as https://gateway.example.com/mcp")
	case u.Fragment != "" || strings.Contains(resource, "#"):
		return errors.New("a resource identifier has no fragment")
	}
	return nil
}
