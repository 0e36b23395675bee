package auth_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Example_wiring shows how the composition root puts auth and limits
// around the gRPC server and the REST side, then authenticates one call.
func Example_wiring() {
	log := slog.Default()
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
	// The envelope's user is the authenticated caller.
	_ = server.Options{User: auth.User}
	lim, err := limits.New(10, 20, limits.WithKey(auth.User), limits.WithLogger(log))
	if err != nil {
		panic(err)
	}

	// gRPC: authenticate first, so the limiter keys on the user.
	grpcSrv := grpc.NewServer(
		grpc.InTapHandle(authn.TapHandle()), // refuses reserved metadata
		grpc.ChainUnaryInterceptor(authn.UnaryInterceptor(), lim.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(authn.StreamInterceptor(), lim.StreamInterceptor()),
	)
	defer grpcSrv.Stop()

	// REST: served in process through the same interceptors; the mux
	// forwards X-Api-Key and sets Retry-After.
	gw := runtime.NewServeMux(
		runtime.WithIncomingHeaderMatcher(auth.HeaderMatcher),
		runtime.WithErrorHandler(limits.ErrorHandler),
	)
	_ = limits.MaxBody(limits.DefaultMaxBody, gw)

	// One call as the interceptors see it: alice's key in the metadata.
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "alice-test-key-not-secret"))
	info := &grpc.UnaryServerInfo{FullMethod: toolgatev1.ToolService_InvokeTool_FullMethodName}
	_, err = authn.UnaryInterceptor()(ctx, &toolgatev1.InvokeToolRequest{Name: "tell-joke"}, info,
		func(ctx context.Context, _ any) (any, error) {
			fmt.Println("caller:", auth.User(ctx))
			return nil, nil
		})
	fmt.Println("error:", err)
	// Output:
	// caller: alice
	// error: <nil>
}
