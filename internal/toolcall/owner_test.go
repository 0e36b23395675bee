package toolcall

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ownedOps is an operations table in memory that keeps each operation's
// owner and answers only to it, as the operations keeper does.
type ownedOps struct {
	mu     sync.Mutex
	owners map[string]string
	users  map[string]string // the envelope's user of each operation
}

func (o *ownedOps) Start(_ context.Context, s OperationStart) (OperationRecord, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := "op-" + s.Owner
	o.owners[id] = s.Owner
	o.users[id] = s.Request.User
	return OperationRecord{ID: id, Tool: s.Tool, State: OperationRunning}, nil
}

func (o *ownedOps) Get(owner, id string) (OperationRecord, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.owners[id] != owner || owner == "" {
		return OperationRecord{}, Fail(errors.New("operation not found"), FailOperationNotFound)
	}
	return OperationRecord{ID: id, State: OperationRunning}, nil
}

func (o *ownedOps) List(owner string, _ *bool) []OperationRecord {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []OperationRecord
	for id, own := range o.owners {
		if own == owner {
			out = append(out, OperationRecord{ID: id, State: OperationRunning})
		}
	}
	return out
}

func (o *ownedOps) Cancel(_ context.Context, owner, id string) (OperationRecord, error) {
	return o.Get(owner, id)
}

func (o *ownedOps) Delete(_ context.Context, owner, id string) error {
	_, err := o.Get(owner, id)
	return err
}

func (o *ownedOps) Wait(_ context.Context, owner, id string, _ time.Duration) (OperationRecord, error) {
	return o.Get(owner, id)
}

func (o *ownedOps) Stream(_ context.Context, owner, id string, _ int, _ func(int, string, bool) error) (OperationRecord, error) {
	return o.Get(owner, id)
}

// TestOperationOwnerIsTheCallersSubject: an operation is owned by its
// caller's subject — the source of the identity with the name — so a
// JWT or certificate naming the API-key user alice reaches none of her
// operations by any method, and sees none in its list.
func TestOperationOwnerIsTheCallersSubject(t *testing.T) {
	t.Parallel()
	ops := &ownedOps{owners: map[string]string{}, users: map[string]string{}}
	core := newCore(t, answering(), Options{Operations: ops})
	ctx := t.Context()
	alice := Caller{User: "alice", Method: SourceAPIKey}
	res, err := core.Handle(ctx, &Call{Op: OpStartTool, Name: "plain", Caller: alice, Authenticated: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Operation.ID
	if _, err := core.Handle(ctx, &Call{Op: OpGetOperation, Name: id, Caller: alice, Authenticated: true}, nil); err != nil {
		t.Fatalf("alice's own get: %v", err)
	}
	for _, other := range []Caller{
		{User: "alice", Method: SourceJWT, Issuer: "https://idp.example"},
		{User: "alice", Method: SourceJWT},
		{User: "alice", Method: SourceMTLS},
		{User: "alice", Method: SourceAnonymous},
	} {
		for _, op := range []Op{OpGetOperation, OpCancelOperation, OpDeleteOperation, OpWaitOperation, OpStreamOperation} {
			_, err := core.Handle(ctx, &Call{Op: op, Name: id, Caller: other, Authenticated: true}, func(Chunk) error { return nil })
			if status.Code(err) != codes.NotFound {
				t.Errorf("%s by alice of %s: %v, want NotFound", op.Method(), other.Subject().Origin(), err)
			}
		}
		list, err := core.Handle(ctx, &Call{Op: OpListOperations, Caller: other, Authenticated: true}, nil)
		if err != nil || len(list.Operations) != 0 {
			t.Errorf("list of alice of %s: %v, %v; want none", other.Subject().Origin(), list.Operations, err)
		}
	}
	// Joined on purpose: the JWT's alice acts as the API key's.
	joined := Caller{User: "alice", Method: SourceJWT, Issuer: "https://idp.example", As: Subject{Source: SourceAPIKey, Name: "alice"}}
	if _, err := core.Handle(ctx, &Call{Op: OpGetOperation, Name: id, Caller: joined, Authenticated: true}, nil); err != nil {
		t.Errorf("the joined alice's get: %v", err)
	}
	if got := ops.owners[id]; got != "api-key:alice" {
		t.Errorf("owner %q, want api-key:alice", got)
	}
	// The service sees the name its subject gives: the joined subject's.
	joined.As.Name = "alice-of-the-keys"
	res, err = core.Handle(ctx, &Call{Op: OpStartTool, Name: "plain", Caller: joined, Authenticated: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if owner, user := ops.owners[res.Operation.ID], ops.users[res.Operation.ID]; owner != "api-key:alice-of-the-keys" || user != "alice-of-the-keys" {
		t.Errorf("the joined caller's operation: owner %q, envelope user %q", owner, user)
	}
}
