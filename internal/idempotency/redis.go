package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/toolgate/toolgate/internal/redisclient"
)

// DefaultRedisTimeout bounds each exchange with Redis: a call with a key
// waits no longer to learn whether it runs, joins or is answered before
// the store counts as unreachable.
const DefaultRedisTimeout = 250 * time.Millisecond

// Redis is a Store in Redis, shared by every replica pointing at it. A key
// is one hash — fingerprint, the claimant's token while it runs, the answer
// once done — and every step is one script run on the server, so replicas
// never race each other.
type Redis struct {
	client  *redis.Client
	timeout time.Duration
}

// NewRedis connects to the Redis at url (redis://[user:password@]host:port[/db],
// rediss:// for TLS, unix:///path) lazily. Each exchange is bounded by
// timeout (DefaultRedisTimeout when 0) as a whole — waiting for a
// connection, dialing, writing, reading — and is never retried.
func NewRedis(url string, timeout time.Duration) (*Redis, error) {
	if timeout <= 0 {
		timeout = DefaultRedisTimeout
	}
	client, err := redisclient.New(url, timeout)
	if err != nil {
		return nil, fmt.Errorf("idempotency: Redis URL: %w", err)
	}
	return &Redis{client: client, timeout: timeout}, nil
}

// Close closes the connections.
func (r *Redis) Close() error { return r.client.Close() }

func (r *Redis) err(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("idempotency: Redis %s: no answer within %v: %w", what, r.timeout, err)
	}
	return fmt.Errorf("idempotency: Redis %s: %w", what, err)
}

// beginScript: KEYS[1] the key; ARGV fingerprint, token, lease in ms.
// Answers {1} when claimed, else {0, fingerprint, done, answer}.
var beginScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'fp', 'done', 'answer')
if v[1] then
  return {0, v[1], v[2] or '', v[3] or ''}
end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'token', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1}
`)

// renewScript: KEYS[1]; ARGV token, lease in ms. Extends a claim still
// held and running.
var renewScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] and not redis.call('HGET', KEYS[1], 'done') then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// finishScript: KEYS[1]; ARGV token, answer, window in ms. Keeps the
// answer of a claim still held.
var finishScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'done') then
  return 0
end
redis.call('HSET', KEYS[1], 'done', '1', 'answer', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// abandonScript: KEYS[1]; ARGV token. Removes a claim still held and
// running.
var abandonScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] and not redis.call('HGET', KEYS[1], 'done') then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Begin implements Store.
func (r *Redis) Begin(ctx context.Context, key, fingerprint, token string, lease time.Duration) (Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	res, err := beginScript.Run(ctx, r.client, []string{key}, fingerprint, token, max(lease.Milliseconds(), 1)).Slice()
	if err != nil {
		return Record{}, false, r.err(ctx, "begin", err)
	}
	if len(res) == 1 {
		return Record{}, true, nil
	}
	if len(res) != 4 {
		return Record{}, false, fmt.Errorf("idempotency: Redis answered %d values to a begin", len(res))
	}
	text := func(v any) string { s, _ := v.(string); return s }
	return Record{Fingerprint: text(res[1]), Done: text(res[2]) == "1", Answer: []byte(text(res[3]))}, false, nil
}

// Renew implements Store.
func (r *Redis) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.err(ctx, "renew", renewScript.Run(ctx, r.client, []string{key}, token, max(lease.Milliseconds(), 1)).Err())
}

// Finish implements Store.
func (r *Redis) Finish(ctx context.Context, key, token string, answer []byte, window time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	n, err := finishScript.Run(ctx, r.client, []string{key}, token, answer, max(window.Milliseconds(), 1)).Int()
	if err != nil {
		return r.err(ctx, "finish", err)
	}
	if n == 0 {
		return ErrClaimLost
	}
	return nil
}

// Abandon implements Store.
func (r *Redis) Abandon(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.err(ctx, "abandon", abandonScript.Run(ctx, r.client, []string{key}, token).Err())
}
