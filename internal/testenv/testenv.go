// Package testenv is the former name of brokertest, kept only for the
// tests under bench/ that still import it (the bench is reworked on a
// branch of its own); it forwards to brokertest, and goes once they
// import brokertest. New code imports brokertest.
package testenv

import (
	"testing"

	"github.com/toolgate/toolgate/internal/brokertest"
)

// PulsarURL is brokertest.PulsarURL.
func PulsarURL() string { return brokertest.PulsarURL() }

// AdminURL is brokertest.AdminURL.
func AdminURL() string { return brokertest.AdminURL() }

// RequirePulsar is brokertest.RequirePulsar.
func RequirePulsar(tb testing.TB) {
	tb.Helper()
	brokertest.RequirePulsar(tb)
}

// UniqueTopic is brokertest.UniqueTopic.
func UniqueTopic(prefix string) string { return brokertest.UniqueTopic(prefix) }

// Subscriptions is brokertest.Subscriptions.
func Subscriptions(topic string) int { return brokertest.Subscriptions(topic) }
