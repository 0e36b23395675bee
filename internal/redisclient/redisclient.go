// Package redisclient opens the Redis clients of the gateway's shared
// stores (quotas, idempotency keys) one way: every exchange bounded as a
// whole by one timeout, nothing retried, so that a store that does not
// answer is known at once instead of holding the calls that wait on it.
package redisclient

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// New is a client of the Redis at url (redis://[user:password@]host:port[/db],
// rediss:// for TLS, unix:///path), which dials lazily: the first
// exchange dials. Each exchange — waiting for a connection, dialing it
// (TLS handshake included), writing and reading — is bounded by timeout,
// and neither the exchange nor its dial is retried. timeout must be
// positive.
func New(url string, timeout time.Duration) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = timeout, timeout, timeout, timeout
	opts.MaxRetries = -1   // an unreachable store is reported at once
	opts.DialerRetries = 1 // go-redis dials 5 times, 100 ms apart, by default
	opts.ContextTimeoutEnabled = true
	// Dials within the exchange's context, TLS handshake included
	// (go-redis's own TLS dial ignores the context).
	d := &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
	opts.Dialer = d.DialContext
	if opts.TLSConfig != nil {
		td := &tls.Dialer{NetDialer: d, Config: opts.TLSConfig}
		opts.Dialer = td.DialContext
	}
	return redis.NewClient(opts), nil
}
