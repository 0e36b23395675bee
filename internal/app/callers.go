package app

import (
	"fmt"
	"net/http"

	"github.com/toolgate/toolgate/internal/callerassert"
	"github.com/toolgate/toolgate/internal/rootmux"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
)

// readCallerKey reads the key the caller assertions are signed with
// (--caller-key-file, --caller-previous-key-file); without one, calls
// carry none.
func (g *Gateway) readCallerKey() error {
	c := g.cfg.Callers
	if c.KeyFile == "" {
		return nil
	}
	s, err := callerassert.Load(c.Issuer, c.KeyFile, c.PreviousKeyFile)
	if err != nil {
		return fmt.Errorf("--caller-key-file: %w", err)
	}
	g.callers = s
	g.log.Info("calls carry caller assertions", "issuer", s.Issuer(), "kid", s.KeyID(), "jwks", wire.CallerJWKSPath)
	return nil
}

// callerSigner is the core's signer of caller assertions: nil without a
// key.
func (g *Gateway) callerSigner() toolcall.CallerSigner {
	if g.callers == nil {
		return nil
	}
	return g.callers
}

// callerJWKSRoutes serve the caller assertions' public keys on the public
// listener, with --caller-jwks-public.
func (g *Gateway) callerJWKSRoutes() []rootmux.Route {
	if g.callers == nil || !g.cfg.Callers.JWKSPublic {
		return nil
	}
	return []rootmux.Route{{Method: http.MethodGet, Pattern: wire.CallerJWKSPath, Handler: g.callers.Handler()}}
}
