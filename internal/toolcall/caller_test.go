package toolcall

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/callerassert"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recordingSigner "signs" a claim set as its id, and keeps the claims.
type recordingSigner struct {
	mu     sync.Mutex
	claims []wire.CallerClaims
	err    error
}

func (r *recordingSigner) Sign(c wire.CallerClaims) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claims = append(r.claims, c)
	return "assertion-of-" + c.ID, r.err
}

// TestCallerAssertion: with a signer, every call's request carries the
// caller assertion signed for its id, whose claims name the caller as
// the gateway knows them, the service, the tool, the set and the
// deadline; without one, none.
func TestCallerAssertion(t *testing.T) {
	reply := wire.EncodeResponse(wire.Response{Response: "ok", EndOfStream: true})
	var (
		mu    sync.Mutex
		props []map[string]string
	)
	br := answering(reply)
	answer := br.OnPublish
	br.OnPublish = func(topic string, m transport.Message) error {
		mu.Lock()
		props = append(props, wire.ExpandCall(m.Properties))
		mu.Unlock()
		return answer(topic, m)
	}
	signer := &recordingSigner{}
	core := newCore(t, br, Options{Callers: signer})
	alice := Caller{User: "alice", Roles: []string{"dev", "ops"}, Method: SourceAPIKey}
	start := time.Now()
	for _, c := range []*Call{
		{Op: OpInvoke, Name: "plain", Header: NoHeader, Caller: alice, Authenticated: true, Timeout: 5 * time.Second, TimeoutSet: true},
		{Op: OpStream, Name: "slow", Header: NoHeader, Set: "team"},
	} {
		emit := func(Chunk) error { return nil }
		if _, err := core.Handle(t.Context(), c, emit); err != nil {
			t.Fatal(err)
		}
	}
	if len(signer.claims) != 2 || len(props) != 2 {
		t.Fatalf("%d assertions signed for %d requests, want 2 and 2", len(signer.claims), len(props))
	}
	for i, cl := range signer.claims {
		if cl.ID == "" || props[i][wire.PropID] != cl.ID || props[i][wire.PropCaller] != "assertion-of-"+cl.ID {
			t.Errorf("request %d: id %q, assertion %q; signed for %q", i, props[i][wire.PropID], props[i][wire.PropCaller], cl.ID)
		}
	}
	a, anon := signer.claims[0], signer.claims[1]
	if a.Subject != "api-key:alice" || a.Source != SourceAPIKey || !slices.Equal(a.Roles, []string{"dev", "ops"}) ||
		a.Audience != "plain" || a.Tool != "plain" || a.ToolSet != "" {
		t.Errorf("alice's claims: %+v", a)
	}
	if exp := time.Unix(a.Expires, 0); exp.Before(start.Add(5*time.Second)) || exp.After(start.Add(7*time.Second)) {
		t.Errorf("exp %v, want the call's deadline (5 s after %v), rounded up to the second", exp, start)
	}
	if anon.Subject != "anonymous:"+DefaultUser || anon.Source != SourceAnonymous || anon.Roles != nil ||
		anon.Audience != "slow" || anon.Tool != "slow" || anon.ToolSet != "team" {
		t.Errorf("an anonymous call's claims: %+v", anon)
	}
	if anon.ID == a.ID {
		t.Errorf("two calls, one id %q", a.ID)
	}

	// A signer that fails fails the call, unsent.
	signer.err = errors.New("no key")
	if _, err := core.Handle(t.Context(), &Call{Op: OpInvoke, Name: "plain", Header: NoHeader}, nil); status.Code(err) != codes.Internal {
		t.Errorf("signer failing: %v, want INTERNAL", err)
	}
	if len(props) != 2 {
		t.Errorf("a request published without its assertion")
	}

	// Without a signer: no assertion.
	props = nil
	if _, err := newCore(t, br, Options{}).Handle(t.Context(), &Call{Op: OpInvoke, Name: "plain", Header: NoHeader}, nil); err != nil {
		t.Fatal(err)
	}
	if v, ok := props[0][wire.PropCaller]; ok {
		t.Errorf("without a signer the request carries an assertion %q", v)
	}
}

// BenchmarkInvokeCallerAssertion is the core's whole path for one unary
// call (as BenchmarkInvoke, one call at a time) without a caller
// assertion and with one of each kind of key: the difference is what the
// assertion adds to a call.
func BenchmarkInvokeCallerAssertion(b *testing.B) {
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	reply := wire.EncodeResponse(wire.Response{Response: "abcdefghijklmnopqrstuvwxyz012345", EndOfStream: true})
	args := []byte(`{"s":"abcdefghijklmnopqrstuvwxyz012345"}`)
	caller := Caller{User: "alice", Roles: []string{"dev", "ops"}, Method: SourceAPIKey}
	for _, bc := range []struct {
		name string
		key  crypto.Signer
	}{{"none", nil}, {"EdDSA", edKey}, {"ES256", ecKey}} {
		var opts Options
		if bc.key != nil {
			s, err := callerassert.New("", bc.key)
			if err != nil {
				b.Fatal(err)
			}
			opts.Callers = s
		}
		core := newCore(b, answering(reply), opts)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := core.Handle(context.Background(), &Call{Op: OpInvoke, Name: "typed", Args: args, Header: NoHeader,
					Caller: caller, Authenticated: true}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
