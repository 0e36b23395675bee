// Package api embeds the OpenAPI descriptions of toolgate's REST API so the
// gateway can serve them. Both are generated from proto/ by
// scripts/generate.sh: the Swagger 2.0 one by protoc-gen-openapiv2, the
// OpenAPI 3.1 one from it by internal/openapi31.
package api

import _ "embed"

// Spec is the OpenAPI 3.1 document in JSON.
//
//go:embed openapi/toolgate.openapi.json
var Spec []byte

// SpecV2 is the OpenAPI 2.0 (Swagger) document in JSON.
//
//go:embed openapi/toolgate.swagger.json
var SpecV2 []byte
