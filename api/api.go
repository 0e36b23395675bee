// Package api embeds the OpenAPI description of toolgate's REST API,
// generated from proto/ by protoc-gen-openapiv2, so the gateway can serve it.
package api

import _ "embed"

// Spec is the OpenAPI 2.0 (Swagger) document in JSON.
//
//go:embed openapi/toolgate.swagger.json
var Spec []byte

// SpecV2 is the OpenAPI 2.0 (Swagger) document.
var SpecV2 = Spec
