package e2e

import (
	"log/slog"
	"testing"

	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/app/apptest"
)

// runGateway starts a gateway of the test's own (apptest.Start: free
// loopback ports, the test broker, then args) and stops it when the test
// ends, failing the test if it did not stop cleanly. log nil discards its
// log.
func runGateway(t *testing.T, log *slog.Logger, args ...string) *app.Gateway {
	t.Helper()
	return apptest.Start(t, log, args...).Gateway
}
