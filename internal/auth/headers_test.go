package auth

import "testing"

func TestHeaderMatcher(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		want   string
		ok     bool
	}{
		{"X-Api-Key", "x-api-key", true},
		{"x-api-key", "x-api-key", true},
		{"Authorization", "grpcgateway-Authorization", true}, // as the default; "authorization" is added by grpc-gateway itself
		{"User-Agent", "grpcgateway-User-Agent", true},
		{"X-Toolgate-User", "", false},
		{"X-Toolgate-Forwarded-Identity", "", false},
		{"Grpc-Metadata-X-Toolgate-User", "", false},
		{"grpc-metadata-x-toolgate-forwarded-identity", "", false},
		{"Grpc-Metadata-Foo", "", false}, // as the default
		{"X-Custom", "", false},
	}
	for _, tc := range tests {
		got, ok := HeaderMatcher(tc.header)
		if got != tc.want || ok != tc.ok {
			t.Errorf("HeaderMatcher(%q) = %q, %v; want %q, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}
