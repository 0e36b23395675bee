package auth

import (
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// HeaderMatcher is grpc-gateway's incoming header matcher for this
// package (runtime.WithIncomingHeaderMatcher(auth.HeaderMatcher)). It
// forwards X-Api-Key as metadata "x-api-key", which grpc-gateway's default
// matcher drops, never forwards a header into the gateway's reserved
// "x-toolgate-" metadata, and otherwise behaves as
// runtime.DefaultHeaderMatcher. (Authorization needs no matcher:
// grpc-gateway always passes it on as metadata "authorization".)
func HeaderMatcher(key string) (string, bool) {
	switch k := strings.ToLower(key); {
	case k == apiKeyMD:
		return apiKeyMD, true
	case strings.HasPrefix(k, ReservedPrefix), strings.HasPrefix(k, strings.ToLower(runtime.MetadataHeaderPrefix)+ReservedPrefix):
		return "", false
	}
	return runtime.DefaultHeaderMatcher(key)
}
