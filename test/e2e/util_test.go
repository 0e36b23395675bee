package e2e

import (
	"context"
	"net"
	"testing"
	"time"
)

func contextWithTimeout(t *testing.T, ms int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), time.Duration(ms)*time.Millisecond)
}

// freeAddr returns a 127.0.0.1 address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
