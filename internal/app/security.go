package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/limits"
	"google.golang.org/grpc/credentials"
)

// security is everything that decides who may call what: TLS, the
// authenticator, the authorization policy and the rate limiter. Every
// door shares it: they run the same middleware.
type security struct {
	authn *auth.Authenticator
	lim   *limits.Limiter
	tls   *tls.Config // nil: plain text
	// requests bound what one request may bring, on every door.
	requests limits.Requests
	log      *slog.Logger
}

func newSecurity(cfg config.Config, log *slog.Logger) (*security, error) {
	s := &security{requests: cfg.Limits, log: log}
	if cfg.TLSCert != "" {
		pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
		if cfg.ClientCA != "" {
			pem, err := os.ReadFile(cfg.ClientCA)
			if err != nil {
				return nil, fmt.Errorf("--client-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--client-ca %s: no PEM certificates in it", cfg.ClientCA)
			}
			s.tls.ClientCAs = pool
			// Certificates are one way to authenticate among others.
			s.tls.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	var err error
	s.authn, err = auth.FromConfig(cfg.Auth, auth.WithLogger(log))
	if err != nil {
		return nil, err
	}
	if cfg.RateLimit > 0 {
		if s.lim, err = limits.New(cfg.RateLimit, cfg.RateBurst, limits.WithLogger(log)); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// creds are the gRPC server's transport credentials (nil: plain text).
func (s *security) creds() credentials.TransportCredentials {
	if s.tls == nil {
		return nil
	}
	return credentials.NewTLS(s.tls)
}

// wrapHTTP adds the body limits: size (after decompression), and time to
// arrive.
func (s *security) wrapHTTP(h http.Handler) http.Handler {
	return limits.HTTP(s.requests, s.log, h)
}
