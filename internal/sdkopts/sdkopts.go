// Package sdkopts holds the settings that toolservice's options change. It
// lives apart from toolservice so that this module's own tests can run a
// tool service on the in-memory broker (WithBroker) while the SDK's public
// API names no type of an internal package: toolservice.Option is a
// func(*Options), so the func WithBroker returns is one.
package sdkopts

import (
	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/transport"
)

// Options are a Service's connection settings.
type Options struct {
	// Authentication of the client the service creates.
	Authentication pulsar.Authentication
	// TLSTrustCertsFile is the CA file trusted for pulsar+ssl:// URLs.
	TLSTrustCertsFile string
	// Client is the caller's Pulsar client, used instead of creating one.
	Client pulsar.Client
	// Broker is a transport to use as is (the in-memory broker in tests).
	Broker transport.Broker
	// Set names the options given, in order, to report conflicts.
	Set []string
	// Errs are problems an option found with its own argument.
	Errs []error
}

// WithBroker makes the service use b instead of connecting to Pulsar; the
// service does not close b.
func WithBroker(b transport.Broker) func(*Options) {
	return func(o *Options) { o.Broker = b; o.Set = append(o.Set, "WithBroker") }
}
