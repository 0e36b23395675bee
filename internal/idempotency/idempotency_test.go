package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/redistest"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// service is a tool service behind a fake bridge: it counts the calls it
// runs and answers by their arguments — {"say": "x"} answers x (in two
// chunks for {"chunks": true}), {"fail": "type"} fails with that error
// type, {"hold": true} waits for release first.
type service struct {
	runs    atomic.Int32
	release chan struct{}
}

func (s *service) Call(ctx context.Context, _ toolcall.Target, req wire.Request, _ time.Time, _ bool, _ toolcall.Assertion) (toolcall.Reply, error) {
	s.runs.Add(1)
	var a struct {
		Say    string `json:"say"`
		Fail   string `json:"fail"`
		Hold   bool   `json:"hold"`
		Chunks bool   `json:"chunks"`
	}
	if err := json.Unmarshal([]byte(req.Arguments), &a); err != nil {
		return nil, err
	}
	r := &reply{hold: nil}
	if a.Hold {
		r.hold = s.release
	}
	switch {
	case a.Fail != "":
		r.err = &wire.Error{Type: a.Fail, Message: "it failed"}
	case a.Chunks:
		r.chunks = []string{a.Say[:1], a.Say[1:]}
	default:
		r.chunks = []string{a.Say}
	}
	return r, nil
}

type reply struct {
	hold   chan struct{}
	chunks []string
	err    error
	next   int
}

func (r *reply) Wait(ctx context.Context) (string, error) {
	var b strings.Builder
	for {
		text, _, err := r.Recv(ctx, 0, nil)
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			return "", err
		}
		b.WriteString(text)
	}
}

func (r *reply) Recv(ctx context.Context, _ time.Duration, _ error) (string, bool, error) {
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-ctx.Done():
			return "", false, ctx.Err()
		}
	}
	if r.next < len(r.chunks) {
		r.next++
		return r.chunks[r.next-1], r.next == len(r.chunks), nil
	}
	if r.err != nil {
		return "", false, r.err
	}
	return "", false, io.EOF
}

func (r *reply) Close() {}

const testRegistry = `
tool-service:
  svc: {id: svc, topic: svc}
tool:
  say: {type: tool-service, name: say, description: d, service: svc}
  other: {type: tool-service, name: other, description: d, service: svc}
`

// setup is a chain of the Keeper over a real core and a Redis of the
// test's own.
func setup(t *testing.T, opts Options) (toolcall.Handler, *service, *Keeper, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	store, err := NewRedis(srv.URL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	h, svc, k := chain(t, store, opts)
	return h, svc, k, srv
}

func chain(t testing.TB, store Store, opts Options) (toolcall.Handler, *service, *Keeper) {
	t.Helper()
	snap, err := registry.Parse("t.yaml", []byte(testRegistry), nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{release: make(chan struct{})}
	core := toolcall.New(registry.New(snap), svc, toolcall.Options{})
	k := New(store, opts)
	return toolcall.Chain(core.Handle, k.Middleware()), svc, k
}

type header map[string][]string

func (h header) Values(k string) []string { return h[k] }

// call makes a call of user with key (none when "").
func call(op toolcall.Op, user, tool, args, key string) *toolcall.Call {
	h := header{}
	if key != "" {
		h[toolcall.HeaderIdempotencyKey] = []string{key}
	}
	return &toolcall.Call{Op: op, Name: tool, Args: []byte(args), Header: h,
		Caller: toolcall.Caller{User: user, Method: toolcall.SourceAPIKey}, Authenticated: true}
}

func invoke(t *testing.T, h toolcall.Handler, c *toolcall.Call) (string, error) {
	t.Helper()
	res, err := h(t.Context(), c, nil)
	return res.Output, err
}

func reason(err error) (codes.Code, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), ei.Reason
		}
	}
	return st.Code(), ""
}

// The same key twice: the service runs once, and both get its answer;
// the same arguments written otherwise are the same call; another caller's
// key of the same text is its own.
func TestSameKeyRunsOnce(t *testing.T) {
	h, svc, _, _ := setup(t, Options{})
	for i, args := range []string{`{"say": "hi"}`, `{"say":"hi"}`, "{ \"say\" :\n\"hi\" }"} {
		out, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", args, "k-1"))
		if err != nil || out != "hi" {
			t.Fatalf("call %d: %q, %v; want hi", i+1, out, err)
		}
	}
	if n := svc.runs.Load(); n != 1 {
		t.Fatalf("the service ran %d times, want 1", n)
	}
	if out, err := invoke(t, h, call(toolcall.OpInvoke, "bob", "say", `{"say": "hi"}`, "k-1")); err != nil || out != "hi" {
		t.Fatalf("bob: %q, %v", out, err)
	}
	if out, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "hi"}`, "")); err != nil || out != "hi" {
		t.Fatalf("without a key: %q, %v", out, err)
	}
	if n := svc.runs.Load(); n != 3 {
		t.Fatalf("the service ran %d times, want 3 (bob's key is his own; no key, no keeping)", n)
	}
}

// Arguments are the same whatever the order of their members or white
// space; a number written otherwise is another argument, as the tool
// service sees it.
func TestSameArguments(t *testing.T) {
	same := [][]string{
		{`{"say": "hi", "chunks": false}`, `{"chunks":false,"say":"hi"}`, "{ \"chunks\" : false ,\n \"say\": \"hi\" }"},
		{`{"a": {"y": 1, "x": [2, {"q": 1, "p": 2}]}}`, `{"a":{"x":[2,{"p":2,"q":1}],"y":1}}`},
		{``, `{}`},
	}
	for _, set := range same {
		for _, a := range set[1:] {
			if string(canonical([]byte(a))) != string(canonical([]byte(set[0]))) {
				t.Errorf("%s and %s: %s and %s, want one", set[0], a, canonical([]byte(set[0])), canonical([]byte(a)))
			}
		}
	}
	for _, pair := range [][2]string{{`{"n": 1}`, `{"n": 1.0}`}, {`{"n": 1}`, `{"n": "1"}`}, {`{"a": [1, 2]}`, `{"a": [2, 1]}`}} {
		if string(canonical([]byte(pair[0]))) == string(canonical([]byte(pair[1]))) {
			t.Errorf("%s and %s are one, want two", pair[0], pair[1])
		}
	}
	h, svc, _, _ := setup(t, Options{})
	for _, args := range same[0] {
		if out, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", args, "k-same")); err != nil || out != "hi" {
			t.Fatalf("%s: %q, %v", args, out, err)
		}
	}
	if n := svc.runs.Load(); n != 1 {
		t.Fatalf("the service ran %d times, want 1", n)
	}
}

// The same key with other arguments, or for another tool, is refused
// without running anything.
func TestKeyReusedIsRefused(t *testing.T) {
	h, svc, _, _ := setup(t, Options{})
	if _, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "hi"}`, "k-2")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*toolcall.Call{
		call(toolcall.OpInvoke, "alice", "say", `{"say": "ho"}`, "k-2"),
		call(toolcall.OpInvoke, "alice", "other", `{"say": "hi"}`, "k-2"),
		call(toolcall.OpStream, "alice", "say", `{"say": "hi", "x": 1}`, "k-2"),
	} {
		_, err := h(t.Context(), c, func(toolcall.Chunk) error { return nil })
		if code, r := reason(err); code != codes.AlreadyExists || r != ReasonKeyReused {
			t.Errorf("%s %s: %v, want ALREADY_EXISTS %s", c.Name, c.Args, err, ReasonKeyReused)
		}
	}
	if n := svc.runs.Load(); n != 1 {
		t.Fatalf("the service ran %d times, want 1", n)
	}
}

// watched is a Store that notes the calls (their tokens) that found
// another running.
type watched struct {
	Store
	waiting sync.Map
}

func (w *watched) Begin(ctx context.Context, key, fp, token string, lease time.Duration) (Record, bool, error) {
	rec, claimed, err := w.Store.Begin(ctx, key, fp, token, lease)
	if err == nil && !claimed && !rec.Done {
		w.waiting.Store(token, true)
	}
	return rec, claimed, err
}

// A second call while the first runs joins it: it waits and gets the
// first's answer; the service runs once.
func TestConcurrentCallJoins(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := NewRedis(srv.URL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	store := &watched{Store: rs}
	h, svc, k := chain(t, store, Options{})
	type got struct {
		out string
		err error
	}
	first := make(chan got, 1)
	go func() {
		res, err := h(context.Background(), call(toolcall.OpInvoke, "alice", "say", `{"say": "hi", "hold": true}`, "k-3"), nil)
		first <- got{res.Output, err}
	}()
	eventually.True(t, 10*time.Second, "the first call runs", func() bool { return svc.runs.Load() == 1 })
	const joiners = 5
	second := make(chan got, joiners)
	for range joiners {
		go func() {
			res, err := h(context.Background(), call(toolcall.OpInvoke, "alice", "say", `{"say": "hi", "hold": true}`, "k-3"), nil)
			second <- got{res.Output, err}
		}()
	}
	// Each finds the first running, and waits: none answers while it holds.
	eventually.True(t, 10*time.Second, "every joiner found the first call running", func() bool {
		n := 0
		store.waiting.Range(func(any, any) bool { n++; return true })
		return n == joiners
	})
	select {
	case g := <-second:
		t.Fatalf("a joiner answered before the first call did: %+v", g)
	default:
	}
	if n := testutil.ToFloat64(k.waiting); n != joiners {
		t.Fatalf("toolgate_idempotency_waiting %v, want %d", n, joiners)
	}
	close(svc.release)
	for _, ch := range []chan got{first, second, second, second, second, second} {
		if g := <-ch; g.err != nil || g.out != "hi" {
			t.Fatalf("%+v, want hi", g)
		}
	}
	if n := svc.runs.Load(); n != 1 {
		t.Fatalf("the service ran %d times, want 1", n)
	}
	if n := counter(t, k, "joined"); n != joiners {
		t.Fatalf("joined %v, want %d", n, joiners)
	}
	if n := testutil.ToFloat64(k.waiting); n != 0 {
		t.Fatalf("toolgate_idempotency_waiting %v after the answers, want 0", n)
	}
}

// A joiner whose own deadline passes first ends with DEADLINE_EXCEEDED;
// the first call goes on.
func TestJoinerDeadline(t *testing.T) {
	h, svc, _, _ := setup(t, Options{})
	done := make(chan error, 1)
	go func() {
		_, err := h(context.Background(), call(toolcall.OpInvoke, "alice", "say", `{"say": "hi", "hold": true}`, "k-4"), nil)
		done <- err
	}()
	eventually.True(t, 10*time.Second, "the first call runs", func() bool { return svc.runs.Load() == 1 })
	c := call(toolcall.OpInvoke, "alice", "say", `{"say": "hi", "hold": true}`, "k-4")
	c.Timeout, c.TimeoutSet = 100*time.Millisecond, true
	_, err := invoke(t, h, c)
	if code, _ := reason(err); code != codes.DeadlineExceeded {
		t.Fatalf("joiner: %v, want DEADLINE_EXCEEDED", err)
	}
	close(svc.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Streams and invokes of one call answer each other: the chunks kept,
// replayed as chunks, joined as one output.
func TestStreamAndInvokeShareAnswer(t *testing.T) {
	h, svc, _, _ := setup(t, Options{})
	var chunks []toolcall.Chunk
	collect := func(ch toolcall.Chunk) error { chunks = append(chunks, ch); return nil }
	c := call(toolcall.OpStream, "alice", "say", `{"say": "hey", "chunks": true}`, "k-5")
	if _, err := h(t.Context(), c, collect); err != nil || len(chunks) != 2 {
		t.Fatalf("stream: %v, %v", chunks, err)
	}
	first := chunks
	chunks = nil
	if _, err := h(t.Context(), call(toolcall.OpStream, "alice", "say", `{"say": "hey", "chunks": true}`, "k-5"), collect); err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 2 || chunks[0] != first[0] || chunks[1] != first[1] {
		t.Fatalf("replayed %v, want %v", chunks, first)
	}
	if out, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "hey", "chunks": true}`, "k-5")); err != nil || out != "hey" {
		t.Fatalf("invoke after stream: %q, %v", out, err)
	}
	// An invoke's answer, replayed to a stream: one last chunk.
	if _, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "one"}`, "k-6")); err != nil {
		t.Fatal(err)
	}
	chunks = nil
	if _, err := h(t.Context(), call(toolcall.OpStream, "alice", "say", `{"say": "one"}`, "k-6"), collect); err != nil ||
		len(chunks) != 1 || chunks[0] != (toolcall.Chunk{Text: "one", Last: true}) {
		t.Fatalf("stream after invoke: %v, %v", chunks, err)
	}
	if n := svc.runs.Load(); n != 2 {
		t.Fatalf("the service ran %d times, want 2", n)
	}
}

// The tool service's own error is the answer, kept; one asking for a retry
// (unavailable) is not, and neither is the gateway's refusal of the call.
func TestWhichFailuresAreKept(t *testing.T) {
	h, svc, _, _ := setup(t, Options{})
	for range 2 {
		_, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"fail": "not-found"}`, "k-7"))
		if code, r := reason(err); code != codes.NotFound || r != "not-found" {
			t.Fatalf("%v, want the service's NOT_FOUND", err)
		}
	}
	if n := svc.runs.Load(); n != 1 {
		t.Fatalf("the service ran %d times, want 1 (its error kept)", n)
	}
	for range 2 {
		_, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"fail": "unavailable"}`, "k-8"))
		if code, _ := reason(err); code != codes.Unavailable {
			t.Fatalf("%v, want UNAVAILABLE", err)
		}
	}
	if n := svc.runs.Load(); n != 3 {
		t.Fatalf("the service ran %d times, want 3 (unavailable is retried)", n)
	}
	// An unknown tool: refused by the core, the key released — the same
	// key then serves a call that runs.
	if _, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "nope", `{"say": "x"}`, "k-9")); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown tool: %v", err)
	}
	if out, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, "k-9")); err != nil || out != "x" {
		t.Fatalf("after a refusal: %q, %v", out, err)
	}
	// A first caller who goes away releases the key: the retry runs.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h(ctx, call(toolcall.OpInvoke, "alice", "say", `{"say": "y", "hold": true}`, "k-10"), nil)
		done <- err
	}()
	eventually.True(t, 10*time.Second, "the call runs", func() bool { return svc.runs.Load() == 5 })
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled call: %v", err)
	}
	close(svc.release)
	if out, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "y", "hold": true}`, "k-10")); err != nil || out != "y" {
		t.Fatalf("retry after a cancel: %q, %v", out, err)
	}
	if n := svc.runs.Load(); n != 6 {
		t.Fatalf("the service ran %d times, want 6", n)
	}
}

// An answer over the bound is not kept: the retry is refused, not run.
func TestAnswerTooLarge(t *testing.T) {
	h, svc, _, _ := setup(t, Options{MaxAnswerBytes: 4})
	if out, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "too long"}`, "k-11")); err != nil || out != "too long" {
		t.Fatalf("first: %q, %v", out, err)
	}
	_, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "too long"}`, "k-11"))
	if code, r := reason(err); code != codes.FailedPrecondition || r != ReasonAnswerNotKept {
		t.Fatalf("retry: %v, want FAILED_PRECONDITION %s", err, ReasonAnswerNotKept)
	}
	if n := svc.runs.Load(); n != 1 {
		t.Fatalf("the service ran %d times, want 1", n)
	}
	// A stream's chunks, over the bound: all given to the first caller,
	// none kept.
	var chunks []toolcall.Chunk
	collect := func(ch toolcall.Chunk) error { chunks = append(chunks, ch); return nil }
	if _, err := h(t.Context(), call(toolcall.OpStream, "alice", "say", `{"say": "abcdefgh", "chunks": true}`, "k-12"), collect); err != nil || len(chunks) != 2 {
		t.Fatalf("first stream: %v, %v", chunks, err)
	}
	_, err = h(t.Context(), call(toolcall.OpStream, "alice", "say", `{"say": "abcdefgh", "chunks": true}`, "k-12"), collect)
	if code, r := reason(err); code != codes.FailedPrecondition || r != ReasonAnswerNotKept || len(chunks) != 2 {
		t.Fatalf("stream retry: %v (%d chunks), want FAILED_PRECONDITION %s and no chunk", err, len(chunks), ReasonAnswerNotKept)
	}
	if n := svc.runs.Load(); n != 2 {
		t.Fatalf("the service ran %d times, want 2", n)
	}
}

// Bad keys, keys where they are not taken, and keys without a store are
// refused before anything runs; a gRPC metadata key is read as a header.
func TestRefusals(t *testing.T) {
	h, svc, k, _ := setup(t, Options{})
	long := strings.Repeat("k", MaxKeyLength+1)
	for _, key := range []string{long, "a b", "é", `""`, "a\"b"} {
		_, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, key))
		if code, r := reason(err); code != codes.InvalidArgument || r != ReasonKeyInvalid {
			t.Errorf("key %q: %v, want INVALID_ARGUMENT %s", key, err, ReasonKeyInvalid)
		}
	}
	two := call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, "a")
	two.Header.(header)[toolcall.HeaderIdempotencyKey] = []string{"a", "b"}
	if _, r := reason(func() error { _, err := invoke(t, h, two); return err }()); r != ReasonKeyInvalid {
		t.Errorf("two keys: want %s", ReasonKeyInvalid)
	}
	_, err := h(t.Context(), call(toolcall.OpStartTool, "alice", "say", `{"say": "x"}`, "k"), nil)
	if code, r := reason(err); code != codes.InvalidArgument || r != ReasonKeyNotSupported {
		t.Errorf("start: %v, want %s", err, ReasonKeyNotSupported)
	}
	if n := svc.runs.Load(); n != 0 {
		t.Fatalf("the service ran %d times, want 0", n)
	}
	// A quoted key is the key: "k-q" and k-q are one.
	for _, key := range []string{`"k-q"`, "k-q", strings.Repeat("q", MaxKeyLength)} {
		if _, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, key)); err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
	}
	if n := svc.runs.Load(); n != 2 {
		t.Fatalf("the service ran %d times, want 2", n)
	}
	// Without a store: refused, and calls without a key run.
	off, offSvc, _ := chain(t, nil, Options{})
	_, err = invoke(t, off, call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, "k"))
	if code, r := reason(err); code != codes.FailedPrecondition || r != ReasonKeysDisabled {
		t.Errorf("no store: %v, want FAILED_PRECONDITION %s", err, ReasonKeysDisabled)
	}
	if out, err := invoke(t, off, call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, "")); err != nil || out != "x" || offSvc.runs.Load() != 1 {
		t.Errorf("no store, no key: %q, %v", out, err)
	}
	// A caller gone before the store answered is that, not a store failure.
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h(gone, call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, "k-gone"), nil); status.Code(err) != codes.Canceled {
		t.Errorf("caller gone: %v, want CANCELLED", err)
	}
	if n := counter(t, k, "store_error"); n != 0 {
		t.Errorf("store errors %v, want none", n)
	}
	// gRPC metadata is a Header too.
	md := metadata.Pairs(toolcall.HeaderIdempotencyKey, "k-md")
	c := call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, "")
	c.Header = mdHeader(md)
	for range 2 {
		if _, err := invoke(t, h, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := svc.runs.Load(); n != 3 {
		t.Fatalf("the service ran %d times, want 3", n)
	}
}

type mdHeader metadata.MD

func (m mdHeader) Values(k string) []string { return metadata.MD(m).Get(k) }

// A store that does not answer: UNAVAILABLE with a retry delay within its
// timeout, the call not run; once it answers again, calls run.
func TestStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	store, err := NewRedis(srv.URL, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	h, svc, k := chain(t, store, Options{})
	srv.Pause(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, "k-down"))
		if code, r := reason(err); code != codes.Unavailable || r != ReasonStoreUnavailable {
			t.Errorf("store paused: %v, want UNAVAILABLE %s", err, ReasonStoreUnavailable)
		}
	})
	wg.Wait()
	srv.Resume(t)
	if n := svc.runs.Load(); n != 0 {
		t.Fatalf("the service ran %d times while the store was down", n)
	}
	if counter(t, k, "store_error") != 1 {
		t.Fatal("store errors not counted")
	}
	srv.Stop()
	_, err = invoke(t, h, call(toolcall.OpInvoke, "alice", "say", `{"say": "x"}`, "k-down"))
	if code, _ := reason(err); code != codes.Unavailable {
		t.Fatalf("store stopped: %v, want UNAVAILABLE", err)
	}
}

// A gateway that died holding a key: the key's claim runs out and a retry
// runs the call.
func TestAbandonedClaimRunsOut(t *testing.T) {
	srv := redistest.Start(t)
	store, err := NewRedis(srv.URL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c := call(toolcall.OpInvoke, "alice", "say", `{"say": "z"}`, "k-dead")
	if _, claimed, err := store.Begin(t.Context(), storeKey(c, "k-dead"), fingerprint(c), "dead-gateway", 300*time.Millisecond); err != nil || !claimed {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	h, svc, _ := chain(t, store, Options{})
	if out, err := invoke(t, h, c); err != nil || out != "z" {
		t.Fatalf("%q, %v", out, err)
	}
	if n := svc.runs.Load(); n != 1 {
		t.Fatalf("runs %d", n)
	}
}

func counter(t *testing.T, k *Keeper, outcome string) float64 {
	t.Helper()
	c, err := k.calls.GetMetricWithLabelValues(outcome)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.ToFloat64(c)
}
