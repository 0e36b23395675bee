// Package idempotency makes retries of a tool call safe: a call carrying an
// idempotency key (toolcall.HeaderIdempotencyKey: the Idempotency-Key HTTP
// header, the idempotency-key metadata) that comes again — same caller,
// same key, same tool and arguments — within the window is answered with
// the first call's answer, or joins the first while it runs, instead of
// running the tool again; on any gateway that shares the Store. The same
// key with other arguments is refused (ALREADY_EXISTS,
// IDEMPOTENCY_KEY_REUSED). It is middleware over toolcall.Call, after the
// caller is authenticated and authorized; the core tells it, through a
// toolcall.Outcome, whether a failure was the tool service's own answer.
//
// What is kept: a call's answer — output, chunks, or the tool service's
// own error (but for the codes that ask for a retry: UNAVAILABLE,
// RESOURCE_EXHAUSTED, ABORTED, DEADLINE_EXCEEDED, CANCELLED). A call that
// ends otherwise (refused before it ran, the deadline, the bus, the client
// gone) releases its key, so a retry runs it. docs/idempotency.md says the
// rest.
package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Defaults of Options.
const (
	DefaultWindow         = 24 * time.Hour
	DefaultMaxAnswerBytes = 1 << 20
	// MaxKeyLength bounds a key: 1 to 255 visible ASCII characters.
	MaxKeyLength = 255
	// Lease is how long a claim outlives the gateway that holds it: it is
	// renewed every third of it while the call runs, so a call whose
	// gateway died is taken over by a retry within it.
	Lease = 15 * time.Second
)

// The ErrorInfo reasons (domain toolgate) of the refusals.
const (
	ReasonKeyInvalid       = "IDEMPOTENCY_KEY_INVALID"
	ReasonKeyReused        = "IDEMPOTENCY_KEY_REUSED"
	ReasonKeysDisabled     = "IDEMPOTENCY_KEYS_DISABLED"
	ReasonKeyNotSupported  = "IDEMPOTENCY_KEY_NOT_SUPPORTED"
	ReasonStoreUnavailable = "IDEMPOTENCY_STORE_UNAVAILABLE"
	ReasonAnswerNotKept    = "IDEMPOTENCY_ANSWER_NOT_KEPT"
)

// ErrClaimLost is what Store.Finish says when the key is no longer the
// claimant's (its lease ran out and another call took it).
var ErrClaimLost = errors.New("idempotency: the key's claim was lost")

// Store keeps the keys, shared by the gateways that must agree. Each
// method is one exchange, bounded by the store itself.
type Store interface {
	// Begin claims key for a call whose arguments' fingerprint is given,
	// for lease: claimed true. Else it returns what the key holds.
	Begin(ctx context.Context, key, fingerprint, token string, lease time.Duration) (rec Record, claimed bool, err error)
	// Renew extends a claim still held and running.
	Renew(ctx context.Context, key, token string, lease time.Duration) error
	// Finish keeps answer under a claim still held, for window
	// (ErrClaimLost when it is no longer held).
	Finish(ctx context.Context, key, token string, answer []byte, window time.Duration) error
	// Abandon drops a claim still held and running: the key is free.
	Abandon(ctx context.Context, key, token string) error
}

// Record is what a key holds.
type Record struct {
	Fingerprint string
	Done        bool   // the first call ended: Answer is its answer
	Answer      []byte // encoded answer
}

// Options tune the Keeper.
type Options struct {
	// Window is how long an answer is kept after its call ended
	// (DefaultWindow).
	Window time.Duration
	// MaxAnswerBytes bounds an answer kept (DefaultMaxAnswerBytes): a
	// larger one is not kept, and a retry is refused (ReasonAnswerNotKept)
	// rather than run twice.
	MaxAnswerBytes int
	// Logger (default: discard).
	Logger *slog.Logger
}

// Keeper is the idempotency middleware and its counters.
type Keeper struct {
	store   Store // nil: keys are refused
	opts    Options
	log     *slog.Logger
	calls   *prometheus.CounterVec
	waiting prometheus.Gauge
}

// New returns a Keeper over store; a nil store refuses every key
// (ReasonKeysDisabled), so that no caller believes a retry safe that is not.
func New(store Store, opts Options) *Keeper {
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.MaxAnswerBytes <= 0 {
		opts.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Keeper{store: store, opts: opts, log: opts.Logger,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_idempotency_calls_total",
			Help: "Calls with an idempotency key, by outcome: ran (first with its key), replayed (answered with the kept answer), joined (waited for the first, then answered with its answer), refused (a bad key, a key reused with other arguments, keys disabled, an answer not kept), store_error (the store did not answer).",
		}, []string{"outcome"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "toolgate_idempotency_waiting",
			Help: "Calls waiting for the first call with their idempotency key (on any gateway) to finish.",
		})}
}

// Collectors are the Keeper's metrics.
func (k *Keeper) Collectors() []prometheus.Collector {
	return []prometheus.Collector{k.calls, k.waiting}
}

// Middleware is the Keeper as toolcall middleware. Calls without a key
// pass through; so do keys on ops other than invoke, stream and start
// (reads, and operations' own ops, are safe to repeat).
func (k *Keeper) Middleware() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if (c.Op != toolcall.OpInvoke && c.Op != toolcall.OpStream && c.Op != toolcall.OpStartTool) || c.Header == nil {
				return next(ctx, c, emit)
			}
			vals := c.Header.Values(toolcall.HeaderIdempotencyKey)
			if len(vals) == 0 {
				return next(ctx, c, emit)
			}
			key, err := parseKey(vals)
			if err == nil {
				switch {
				case c.Op == toolcall.OpStartTool:
					err = toolcall.GatewayError(codes.InvalidArgument, ReasonKeyNotSupported,
						"an idempotency key is not taken on StartTool (:start): an operation is started once per request; retry GetOperation with its name instead", nil)
				case k.store == nil:
					err = toolcall.GatewayError(codes.FailedPrecondition, ReasonKeysDisabled,
						"this gateway keeps no idempotency keys (--idempotency-redis-url is not set): the call was not run; send it without the key to run it unprotected", nil)
				}
			}
			if err != nil {
				k.calls.WithLabelValues("refused").Inc()
				return toolcall.Result{}, err
			}
			return k.serve(ctx, c, emit, key, next)
		}
	}
}

// parseKey checks a key: one value, 1 to MaxKeyLength visible ASCII
// characters; a value in double quotes (a structured-field string, as the
// IETF draft writes it) is read without them.
func parseKey(vals []string) (string, error) {
	bad := func(msg string) (string, error) {
		return "", toolcall.GatewayError(codes.InvalidArgument, ReasonKeyInvalid, msg, nil)
	}
	if len(vals) != 1 {
		return bad(fmt.Sprintf("one idempotency key per call, not %d", len(vals)))
	}
	key := vals[0]
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	if key == "" || len(key) > MaxKeyLength {
		return bad(fmt.Sprintf("an idempotency key has 1 to %d characters, not %d", MaxKeyLength, len(key)))
	}
	for i := range len(key) {
		if key[i] < 0x21 || key[i] > 0x7e || key[i] == '"' {
			return bad("an idempotency key is visible ASCII characters (a UUID, say), without spaces or quotes")
		}
	}
	return key, nil
}

// storeKey names a caller's key in the store: its digest, so that neither
// the caller nor the key is readable there and the length is bounded.
func storeKey(c *toolcall.Call, key string) string {
	who := toolcall.SourceAnonymous + ":"
	if p := c.Caller.Principal(); c.Authenticated && p.Name != "" {
		who = p.String()
	}
	h := sha256.New()
	h.Write([]byte(who))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "toolgate:idempotency:" + hex.EncodeToString(h.Sum(nil))
}

// fingerprint is the digest of what the call asks: its tool (the
// registry's name) and its arguments (canonical). Invoke and stream of the
// same tool and arguments are the same call: each is answered from the
// other's answer.
func fingerprint(c *toolcall.Call) string {
	h := sha256.New()
	h.Write([]byte(c.Name))
	h.Write([]byte{0})
	h.Write(canonical(c.Args))
	return hex.EncodeToString(h.Sum(nil))
}

// canonical is arguments' JSON text with the members of every object in
// the order of their names and no white space, numbers as written: the
// same arguments whatever door wrote them (gRPC's Struct orders members its
// own way). Text that is not a JSON object is taken as it is; the core
// refuses it.
func canonical(args []byte) []byte {
	if len(args) == 0 {
		return []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return args
	}
	if out, err := json.Marshal(v); err == nil { // maps marshal in key order
		return out
	}
	return args
}

// serve runs, joins or answers a call with a valid key.
func (k *Keeper) serve(ctx context.Context, c *toolcall.Call, emit toolcall.Emit, key string, next toolcall.Handler) (toolcall.Result, error) {
	skey, fp, token := storeKey(c, key), fingerprint(c), newToken()
	wait := ctx
	if c.TimeoutSet && c.Timeout > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	joined := false
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		rec, claimed, err := k.store.Begin(ctx, skey, fp, token, Lease)
		switch {
		case err != nil && ctx.Err() != nil:
			return toolcall.Result{}, toolcall.WithErrorInfo(ctx.Err()) // the caller's, not the store's
		case err != nil:
			return toolcall.Result{}, k.storeFailed(ctx, err)
		case claimed:
			return k.run(ctx, c, emit, skey, token, next)
		case rec.Fingerprint != fp:
			k.calls.WithLabelValues("refused").Inc()
			return toolcall.Result{}, toolcall.GatewayError(codes.AlreadyExists, ReasonKeyReused,
				"this idempotency key was used for a call of another tool or with other arguments: use a new key for a new call", nil)
		case rec.Done:
			outcome := "replayed"
			if joined {
				outcome = "joined"
			}
			res, err := replay(c, emit, rec.Answer)
			if errors.Is(err, errNotKept) {
				outcome = "refused"
				err = toolcall.GatewayError(codes.FailedPrecondition, ReasonAnswerNotKept,
					"the call with this idempotency key ran, but its answer was larger than this gateway keeps (--idempotency-max-answer-bytes): it is not run again", nil)
			}
			k.calls.WithLabelValues(outcome).Inc()
			return res, err
		}
		// The first call runs (here or on another gateway): wait for it.
		if !joined {
			joined = true
			k.waiting.Inc()
			defer k.waiting.Dec()
		}
		t := time.NewTimer(pause)
		select {
		case <-wait.Done():
			t.Stop()
			code, reason := codes.DeadlineExceeded, "DEADLINE_EXCEEDED" // the core's reasons
			if errors.Is(wait.Err(), context.Canceled) {
				code, reason = codes.Canceled, "CANCELLED"
			}
			return toolcall.Result{}, toolcall.GatewayError(code, reason,
				"the call ended while waiting for the first call with its idempotency key to finish", nil)
		case <-t.C:
		}
	}
}

// storeFailed is the answer while the store does not answer: UNAVAILABLE
// with a retry delay — a call with a key is never run unprotected.
func (k *Keeper) storeFailed(ctx context.Context, err error) error {
	k.calls.WithLabelValues("store_error").Inc()
	k.log.WarnContext(ctx, "idempotency store failed", "err", err)
	st := status.New(codes.Unavailable, "the idempotency keys' store does not answer: the call was not run; retry it with the same key")
	if ds, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonStoreUnavailable, Domain: toolcall.ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}); derr == nil {
		st = ds
	}
	return st.Err()
}

// run serves the call that holds the key, renewing its claim while it
// runs, and keeps its answer or drops the claim.
func (k *Keeper) run(ctx context.Context, c *toolcall.Call, emit toolcall.Emit, skey, token string, next toolcall.Handler) (toolcall.Result, error) {
	k.calls.WithLabelValues("ran").Inc()
	stop := k.renew(ctx, skey, token)
	var a answer
	over := 0 // the chunks' size once over MaxAnswerBytes: they are no longer kept
	if emit != nil {
		inner, size := emit, 0
		emit = func(ch toolcall.Chunk) error {
			if size += len(ch.Text); size > k.opts.MaxAnswerBytes {
				a.Chunks, over = nil, size
			} else {
				a.Chunks = append(a.Chunks, chunk{Text: ch.Text, Last: ch.Last})
			}
			return inner(ch)
		}
	}
	octx, outcome := toolcall.WithOutcome(ctx)
	res, err := next(octx, c, emit)
	stop()
	// The store is told even when the caller has gone: the call ran.
	sctx := context.WithoutCancel(ctx)
	if !kept(err, outcome) {
		if aerr := k.store.Abandon(sctx, skey, token); aerr != nil {
			k.log.WarnContext(ctx, "idempotency key not released: a retry waits for its claim to run out", "lease", Lease, "err", aerr)
		}
		return res, err
	}
	a.Stream = c.Op == toolcall.OpStream
	a.Output = res.Output
	if err != nil {
		a.Status, _ = proto.Marshal(status.Convert(err).Proto())
	}
	if n := max(a.size(), over); n > k.opts.MaxAnswerBytes {
		a = answer{TooLarge: n}
	}
	enc, merr := json.Marshal(a)
	if merr == nil {
		merr = k.store.Finish(sctx, skey, token, enc, k.opts.Window)
	}
	if merr != nil {
		k.log.WarnContext(ctx, "idempotency key's answer not kept: a retry runs the call again once its claim runs out", "lease", Lease, "err", merr)
	}
	return res, err
}

// renew renews the claim every third of Lease until stop is called.
func (k *Keeper) renew(ctx context.Context, skey, token string) (stop func()) {
	done, renewed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := k.store.Renew(context.WithoutCancel(ctx), skey, token, Lease); err != nil {
					k.log.WarnContext(ctx, "idempotency key's claim not renewed", "err", err)
				}
			}
		}
	}()
	return func() { close(done); <-renewed }
}

// kept reports whether a call's ending is an answer to keep: a success, or
// the tool service's own error unless its code asks for a retry.
func kept(err error, o *toolcall.Outcome) bool {
	if err == nil {
		return true
	}
	if !o.ServiceError() {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded, codes.Canceled, codes.Internal:
		return false
	}
	return true
}

// answer is a kept answer, as the store holds it (JSON).
type answer struct {
	Output string  `json:"o,omitempty"`
	Chunks []chunk `json:"c,omitempty"`
	Stream bool    `json:"s,omitempty"` // the first call was a stream: Chunks is its output
	// Status is the google.rpc.Status of the error the call ended with.
	Status []byte `json:"e,omitempty"`
	// TooLarge is the size of an answer over MaxAnswerBytes, not kept.
	TooLarge int `json:"big,omitempty"`
}

type chunk struct {
	Text string `json:"t"`
	Last bool   `json:"l,omitempty"`
}

func (a *answer) size() int {
	n := len(a.Output) + len(a.Status)
	for _, c := range a.Chunks {
		n += len(c.Text)
	}
	return n
}

var errNotKept = errors.New("the answer was not kept")

// replay answers c from a kept answer: an invoke with the output (a
// stream's chunks joined), a stream with the chunks (an invoke's output as
// one last chunk), then the error the first call ended with, if any.
func replay(c *toolcall.Call, emit toolcall.Emit, enc []byte) (toolcall.Result, error) {
	var a answer
	if err := json.Unmarshal(enc, &a); err != nil {
		return toolcall.Result{}, status.Error(codes.Internal, "the kept answer of this idempotency key cannot be read")
	}
	if a.TooLarge > 0 {
		return toolcall.Result{}, errNotKept
	}
	var failed error
	if len(a.Status) > 0 {
		var p spb.Status
		if err := proto.Unmarshal(a.Status, &p); err != nil {
			return toolcall.Result{}, status.Error(codes.Internal, "the kept answer of this idempotency key cannot be read")
		}
		failed = status.FromProto(&p).Err()
	}
	if c.Op == toolcall.OpStream {
		chunks := a.Chunks
		if !a.Stream && failed == nil {
			chunks = []chunk{{Text: a.Output, Last: true}}
		}
		for i, ch := range chunks {
			if err := emit(toolcall.Chunk{Text: ch.Text, Index: int64(i), Last: ch.Last}); err != nil {
				return toolcall.Result{}, err
			}
		}
		return toolcall.Result{}, failed
	}
	if failed != nil {
		return toolcall.Result{}, failed
	}
	if !a.Stream {
		return toolcall.Result{Output: a.Output}, nil
	}
	var b strings.Builder
	for _, ch := range a.Chunks {
		b.WriteString(ch.Text)
	}
	return toolcall.Result{Output: b.String()}, nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
