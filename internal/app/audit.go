package app

import (
	"net/http"
	"time"

	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/ratelog"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/internal/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

// auditCloseWait bounds the audit log's close at shutdown: what is
// queued, the close line and the sync, on a disk that may have stalled.
const auditCloseWait = time.Second

// auditCalls makes the audit log of --audit, not open yet (openAudit
// opens it once the gateway is built), and returns the call chain's
// middleware that writes its lines; nil without --audit.
func (g *Gateway) auditCalls() toolcall.Middleware {
	a := g.cfg.Audit
	if a.File == "" {
		return nil
	}
	g.audit = audit.New(audit.Options{Instance: g.cfg.InstanceID, Version: version.String(),
		Arguments: a.Arguments, Queue: a.Queue,
		// A failing disk fails every write: its lines rate-limited.
		Logger: ratelog.New(g.log.With("component", "audit"), 0)})
	return g.audit.Middleware()
}

// openAudit opens the audit log, and counts it in the metrics.
func (g *Gateway) openAudit() error {
	if g.audit == nil {
		return nil
	}
	if err := g.audit.Open(g.cfg.Audit.File); err != nil {
		return err
	}
	// Its last lines and the close line are written once the calls are
	// over (closeRest), within auditCloseWait.
	g.closers.push("audit log", g.audit.Close)
	g.metrics.Registry().MustRegister(g.audit.Collectors()...)
	return nil
}

// auditHTTP is the HTTP listener's handler, audited: the requests the
// request limits or MCP's authentication refuse before they become calls
// get their lines too.
func (g *Gateway) auditHTTP(h http.Handler) http.Handler {
	return g.audit.HTTP(h, g.cfg.Limits.Header())
}

// auditGRPC is the gRPC server's tap handle next, audited: a call it
// refuses gets its line.
func (g *Gateway) auditGRPC(next tap.ServerInHandle) grpc.ServerOption {
	return grpc.InTapHandle(g.audit.Tap(next))
}

// auditServices registers the gRPC server's services with their methods
// audited: a call whose request message grpc-go refuses before the
// door's method runs (over the size bound, not in time) gets its line.
func (g *Gateway) auditServices() grpc.ServiceRegistrar {
	return g.audit.Registrar(g.grpcSrv)
}
