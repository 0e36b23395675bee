package e2e

import (
	"context"
	"testing"
	"time"
)

func contextWithTimeout(t *testing.T, ms int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), time.Duration(ms)*time.Millisecond)
}
