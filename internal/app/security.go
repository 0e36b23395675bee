package app

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/idempotency"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/quota"
	"github.com/toolgate/toolgate/internal/ratelog"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/credentials"
)

// security is everything that decides who may call what: TLS, the
// authenticator, the authorization policy and the rate limiter. Every
// door shares it: they run the same middleware.
type security struct {
	authn *auth.Authenticator
	lim   *limits.Limiter
	// quota is nil without --quota-rules.
	quota *quota.Enforcer
	// keys keeps calls' idempotency keys (it refuses them without
	// --idempotency-redis-url).
	keys *idempotency.Keeper
	tls  *tls.Config // nil: plain text
	// requests bound what one request may bring, on every door.
	requests limits.Requests
	log      *slog.Logger
	// limitsLog is log rate-limited, for what clients can make happen
	// over and over (refused requests, closed connections).
	limitsLog *slog.Logger
	// The HTTP/2 frame meters of the gRPC and HTTP listeners.
	grpcMeter, httpMeter *limits.Meter
}

// newSecurity reads what security needs; the closing of the stores it
// opens goes on cl.
func newSecurity(cfg config.Config, log *slog.Logger, cl *closers) (*security, error) {
	s := &security{requests: cfg.Limits, log: log, limitsLog: ratelog.New(log, 0)}
	s.grpcMeter = limits.NewMeter(cfg.Limits.HTTP2, s.limitsLog.With("listener", "grpc"), true)
	s.httpMeter = limits.NewMeter(cfg.Limits.HTTP2, s.limitsLog.With("listener", "http"), false)
	if cfg.TLS.Cert != "" {
		pair, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
		if cfg.TLS.ClientCA != "" {
			pem, err := os.ReadFile(cfg.TLS.ClientCA)
			if err != nil {
				return nil, fmt.Errorf("--client-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--client-ca %s: no PEM certificates in it", cfg.TLS.ClientCA)
			}
			s.tls.ClientCAs = pool
			// Certificates are one way to authenticate among others.
			s.tls.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	var err error
	// Refusals are what an attacker can make happen at will: logged
	// rate-limited.
	s.authn, err = auth.FromConfig(cfg.Auth, auth.WithLogger(s.limitsLog))
	if err != nil {
		return nil, err
	}
	if cfg.Rate.Limit > 0 {
		if s.lim, err = limits.New(cfg.Rate.Limit, cfg.Rate.Burst, limits.WithLogger(s.limitsLog)); err != nil {
			return nil, err
		}
	}
	if err := s.newQuota(cfg, log, cl); err != nil {
		return nil, err
	}
	if err := s.newKeys(cfg, log, cl); err != nil {
		return nil, err
	}
	return s, nil
}

// newKeys opens the idempotency keys' store, Redis, when
// --idempotency-redis-url names one; without it keys are refused.
func (s *security) newKeys(cfg config.Config, log *slog.Logger, cl *closers) error {
	var store idempotency.Store
	if cfg.Idempotency.RedisURL != "" {
		r, err := idempotency.NewRedis(cfg.Idempotency.RedisURL, cfg.Idempotency.RedisTimeout)
		if err != nil {
			return err
		}
		cl.push("idempotency keys' store", closeFunc(r.Close))
		store = r
		log.Info("idempotency keys", "store", "redis", "window", cfg.Idempotency.Window)
	}
	s.keys = idempotency.New(store, idempotency.Options{Window: cfg.Idempotency.Window,
		MaxAnswerBytes: cfg.Idempotency.MaxAnswerBytes, Logger: s.limitsLog})
	return nil
}

// newQuota reads the quota rules and opens their store: Redis when
// --quota-redis-url names one, else this gateway's memory.
func (s *security) newQuota(cfg config.Config, log *slog.Logger, cl *closers) error {
	if cfg.Quota.Rules == "" {
		return nil
	}
	rules, err := quota.Load(cfg.Quota.Rules)
	if err != nil {
		return err
	}
	var store quota.Store = quota.NewMemory()
	if cfg.Quota.RedisURL != "" {
		r, err := openQuotaRedis(cfg.Quota.RedisURL, cfg.Quota.RedisTimeout)
		if err != nil {
			return err
		}
		cl.push("quotas' store", closeFunc(r.Close))
		store = r
	}
	maxTimeout := cmp.Or(cfg.Core.MaxTimeout, toolcall.DefaultMaxTimeout)
	s.quota = quota.NewEnforcer(rules, store, quota.WithFailClosed(cfg.Quota.FailClosed),
		quota.WithLease(maxTimeout+30*time.Second), quota.WithLogger(s.limitsLog))
	log.Info("quotas", "rules", rules.Len(), "store", storeName(cfg.Quota.RedisURL), "fail_closed", cfg.Quota.FailClosed)
	return nil
}

// openQuotaRedis opens the quotas' Redis store: a variable, so that a
// test sees the store a New that failed has closed.
var openQuotaRedis = quota.NewRedis

func storeName(redisURL string) string {
	if redisURL == "" {
		return "memory"
	}
	return "redis"
}

// creds are the gRPC server's transport credentials (nil: plain text).
func (s *security) creds() credentials.TransportCredentials {
	if s.tls == nil {
		return nil
	}
	return s.grpcMeter.Credentials(credentials.NewTLS(s.tls))
}

// grpcListener is the gRPC server's listener: each connection under the
// HTTP/2 frame meter (with TLS the credentials meter it, above TLS).
func (s *security) grpcListener(l net.Listener) net.Listener {
	if s.tls != nil {
		return l
	}
	return s.grpcMeter.Listener(l)
}

// httpListener is the HTTP server's listener: TLS, when set, is served
// here, so that the HTTP/2 frame meter reads each connection above it.
func (s *security) httpListener(l net.Listener) net.Listener {
	if s.tls != nil {
		return s.httpMeter.TLSListener(l, s.tls)
	}
	return s.httpMeter.Listener(l)
}

// wrapHTTP adds the body limits: size (after decompression), and time to
// arrive.
func (s *security) wrapHTTP(h http.Handler) http.Handler {
	h = limits.HTTP(s.requests, s.limitsLog, h)
	if s.tls != nil {
		h = limits.TLSState(h)
	}
	return h
}
