// Command openapi31 writes the OpenAPI 3.1 document of toolgate's REST API
// from the Swagger 2.0 one that protoc-gen-openapiv2 generates. Run by
// scripts/generate.sh:
//
//	go run ./internal/openapi31/cmd/openapi31 -in api/openapi/toolgate.swagger.json -out api/openapi/toolgate.openapi.json
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/toolgate/toolgate/internal/openapi31"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "openapi31:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("openapi31", flag.ContinueOnError)
	in := fs.String("in", "", "the Swagger 2.0 document to read")
	out := fs.String("out", "", "where to write the OpenAPI 3.1 document")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: openapi31 -in SWAGGER.json -out OPENAPI.json")
	}
	v2, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	v3, err := openapi31.Convert(v2)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, v3, 0o644)
}
