package auth_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc"
)

// Example_wiring shows how the composition root puts auth and limits in
// the one middleware chain every door runs, then makes two calls as an
// HTTP door hands them over.
func Example_wiring() {
	log := slog.New(slog.DiscardHandler)
	keys, err := auth.LoadAPIKeys("testdata/apikeys.yaml") // --api-keys
	if err != nil {
		panic(err)
	}
	policy, err := auth.LoadPolicy("testdata/policy.yaml") // --policy
	if err != nil {
		panic(err)
	}
	authn, err := auth.New(
		auth.WithAPIKeys(keys),
		auth.WithClientCerts(), // with --client-ca
		auth.WithPolicy(policy),
		auth.WithLogger(log),
	)
	if err != nil {
		panic(err)
	}
	// Buckets are keyed by the caller: its user and where its identity
	// comes from.
	lim, err := limits.New(10, 20, limits.WithLogger(log))
	if err != nil {
		panic(err)
	}

	// The core, standing in for toolcall.Core.Handle: the envelope's user
	// is the authenticated caller. The real one also hides from its lists
	// what the caller may not list: toolcall.Options{Visible: authn.Visible}.
	core := func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{Output: "a joke for " + c.Caller.User}, nil
	}
	// Authenticate first, so the limiter keys on the user.
	calls := toolcall.Chain(core, authn.Middleware(), lim.Middleware())

	// gRPC: the tap refuses reserved metadata before a call starts.
	grpcSrv := grpc.NewServer(grpc.InTapHandle(authn.TapHandle()))
	defer grpcSrv.Stop()
	// HTTP: a body limit in front, and Retry-After on refusals.
	_ = limits.MaxBody(limits.DefaultMaxBody, runtime.NewServeMux(runtime.WithErrorHandler(limits.ErrorHandler)))

	for _, key := range []string{"alice-test-key-not-secret", "bob-test-key-not-secret"} {
		h := http.Header{}
		h.Set("X-Api-Key", key)
		res, err := calls(context.Background(), &toolcall.Call{Op: toolcall.OpInvoke, Name: "tell-joke", Header: httpcall.Header(h)}, nil)
		fmt.Printf("output %q, error: %v\n", res.Output, err)
	}
	// Output:
	// output "a joke for alice", error: <nil>
	// output "", error: rpc error: code = PermissionDenied desc = permission denied: user "svc-bob" (api-key) may not invoke tool "tell-joke"
}
