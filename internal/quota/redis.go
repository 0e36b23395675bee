package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/toolgate/toolgate/internal/redisclient"
)

// DefaultRedisTimeout bounds each exchange with Redis: a call waits no
// longer to learn whether it is within its quotas before the store counts
// as unreachable.
const DefaultRedisTimeout = 250 * time.Millisecond

// Redis is a Store in Redis, shared by every replica that points at it.
// One call is one script run on the server: every count and slot of the
// call is checked, and then taken, at once, by the server's clock, so
// that replicas neither race each other nor need their clocks to agree.
type Redis struct {
	client  *redis.Client
	timeout time.Duration
}

// NewRedis connects to the Redis at url (redis://[user:password@]host:port[/db],
// rediss:// for TLS, unix:///path) lazily: the first call dials. Each
// exchange — waiting for a connection, dialing it, writing and reading —
// is bounded by timeout (DefaultRedisTimeout when 0) as a whole, and
// neither the exchange nor its dial is retried.
func NewRedis(url string, timeout time.Duration) (*Redis, error) {
	if timeout <= 0 {
		timeout = DefaultRedisTimeout
	}
	client, err := redisclient.New(url, timeout)
	if err != nil {
		return nil, fmt.Errorf("quota: Redis URL: %w", err)
	}
	return &Redis{client: client, timeout: timeout}, nil
}

// Close closes the connections.
func (r *Redis) Close() error { return r.client.Close() }

// Ping checks that the store answers.
func (r *Redis) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.err(ctx, "ping", r.client.Ping(ctx).Err())
}

// err names what failed: the exchange, and when Redis did not answer in
// time, the timeout.
func (r *Redis) err(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("quota: Redis %s: no answer within %v: %w", what, r.timeout, err)
	}
	return fmt.Errorf("quota: Redis %s: %w", what, err)
}

// takeScript checks, then takes. KEYS are the counters, then the slot
// sets; ARGV[1] is the number of counters, ARGV[2] the lease, ARGV[3]
// its duration in ms, then a counter's limit and window in ms each, then
// a slot set's limit each. It answers {0, 0} when admitted, else {i, ms}:
// the 1-based index of the bound that refused and the time until its
// window ends (-1 for slots). A slot set lives as long as its longest
// lease: a take never shortens it.
var takeScript = redis.NewScript(`
local n = tonumber(ARGV[1])
local lease = ARGV[2]
local leaseMs = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, n do
  local limit = tonumber(ARGV[2 + 2 * i])
  local c = tonumber(redis.call('GET', KEYS[i]) or '0')
  if c >= limit then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 then
      redis.call('PEXPIRE', KEYS[i], ARGV[3 + 2 * i])
      ttl = tonumber(ARGV[3 + 2 * i])
    end
    return {i, ttl}
  end
end
for i = n + 1, #KEYS do
  local limit = tonumber(ARGV[3 + n + i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  if redis.call('ZCARD', KEYS[i]) >= limit then
    return {i, -1}
  end
end
for i = 1, n do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[3 + 2 * i])
  end
end
for i = n + 1, #KEYS do
  redis.call('ZADD', KEYS[i], now + leaseMs, lease)
  if redis.call('PTTL', KEYS[i]) < leaseMs then
    redis.call('PEXPIRE', KEYS[i], leaseMs)
  end
end
return {0, 0}
`)

// renewScript extends leases still held. KEYS are slot sets; ARGV[1] is
// the duration in ms, ARGV[1 + i] the lease held in KEYS[i]. A lease not
// in its set is left out (ZADD XX).
var renewScript = redis.NewScript(`
local leaseMs = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + leaseMs, ARGV[1 + i])
  if redis.call('PTTL', KEYS[i]) < leaseMs then
    redis.call('PEXPIRE', KEYS[i], leaseMs)
  end
end
return 0
`)

// Take implements Store.
func (r *Redis) Take(ctx context.Context, t Take) (Decision, error) {
	keys := make([]string, 0, len(t.Counters)+len(t.Slots))
	args := make([]any, 0, 3+2*len(t.Counters)+len(t.Slots))
	args = append(args, len(t.Counters), t.Lease, max(t.LeaseFor.Milliseconds(), 1))
	for _, c := range t.Counters {
		keys = append(keys, c.Key)
		args = append(args, c.Limit, max(c.Window.Milliseconds(), 1))
	}
	for _, s := range t.Slots {
		keys = append(keys, s.Key)
		args = append(args, s.Limit)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	res, err := takeScript.Run(ctx, r.client, keys, args...).Int64Slice()
	if err != nil {
		return Decision{}, r.err(ctx, "take", err)
	}
	if len(res) != 2 {
		return Decision{}, fmt.Errorf("quota: Redis answered %v to a take", res)
	}
	if res[0] == 0 {
		return Decision{OK: true}, nil
	}
	d := Decision{Refused: int(res[0]) - 1}
	if res[1] > 0 {
		d.RetryAfter = time.Duration(res[1]) * time.Millisecond
	}
	return d, nil
}

// Renew implements Store: one exchange for all the leases.
func (r *Redis) Renew(ctx context.Context, leases []Held, d time.Duration) error {
	var keys []string
	args := []any{max(d.Milliseconds(), 1)}
	for _, h := range leases {
		for _, k := range h.Keys {
			keys = append(keys, k)
			args = append(args, h.Lease)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.err(ctx, "renew", renewScript.Run(ctx, r.client, keys, args...).Err())
}

// Release implements Store: one exchange for all the leases.
func (r *Redis) Release(ctx context.Context, leases []Held) error {
	n := 0
	for _, h := range leases {
		n += len(h.Keys)
	}
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, h := range leases {
			for _, k := range h.Keys {
				p.ZRem(ctx, k, h.Lease)
			}
		}
		return nil
	})
	return r.err(ctx, "release", err)
}
