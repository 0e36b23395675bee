// Package docs serves the gateway's documentation pages under one path
// (/docs by default): a "try it" page that lists the tools a caller may see
// and calls them over the REST API, and the API reference rendered by an
// embedded Swagger UI from the live OpenAPI document. Every asset is compiled
// into the binary; the pages load nothing from other hosts.
//
// Layout, with the default Path:
//
//	/docs, /docs/            the "try it" page
//	/docs/assets/{file}      its stylesheet and script
//	/docs/reference          the API reference (Swagger UI), its assets below it
//	/favicon.ico             the pages' icon (an SVG), for browsers that ask
//	                         there; the server mounts it when it wants it
package docs

import (
	"bytes"
	"embed"
	"html/template"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Options configure the handler.
type Options struct {
	// Path is where the handler is mounted, without a trailing slash;
	// "/docs" when empty. The handler expects full request paths (no
	// http.StripPrefix in front of it).
	Path string
	// SpecURL is the OpenAPI document the reference renders and the pages
	// link to; "/openapi.json" when empty.
	SpecURL string
	// Title heads both pages; "toolgate" when empty.
	Title string
	// Logger receives errors writing responses; discarded when nil.
	Logger *slog.Logger
}

//go:embed static
var static embed.FS

// assets are the files served under {Path}/assets/, with their types.
var assets = map[string]string{
	"try.css":     "text/css; charset=utf-8",
	"try.js":      "text/javascript; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// FaviconPath is where browsers look for a site's icon; New's handler
// serves the pages' icon there too.
const FaviconPath = "/favicon.ico"

// pagePolicy keeps the "try it" page to its own origin: its script, its
// stylesheet and the API calls it makes.
const pagePolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var indexTemplate = template.Must(template.ParseFS(static, "static/index.html"))

type handler struct {
	path      string
	index     []byte
	reference http.Handler
	log       *slog.Logger
	modified  time.Time
}

// New returns the handler serving the documentation pages under opts.Path.
func New(opts Options) http.Handler {
	if opts.Path == "" {
		opts.Path = "/docs"
	}
	opts.Path = "/" + strings.Trim(opts.Path, "/")
	if opts.SpecURL == "" {
		opts.SpecURL = "/openapi.json"
	}
	if opts.Title == "" {
		opts.Title = "toolgate"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var page bytes.Buffer
	if err := indexTemplate.Execute(&page, map[string]string{
		"Title":     opts.Title,
		"Path":      opts.Path,
		"SpecURL":   opts.SpecURL,
		"Reference": opts.Path + "/reference",
	}); err != nil {
		// The template and its data are fixed: this is a build defect.
		panic("docs: rendering the try-it page: " + err.Error())
	}
	return &handler{
		path:  opts.Path,
		index: page.Bytes(),
		reference: v5emb.NewHandlerWithConfig(swgui.Config{
			Title:       opts.Title + " API reference",
			SwaggerJSON: opts.SpecURL,
			BasePath:    opts.Path + "/reference/",
			SettingsUI: map[string]string{
				"defaultModelsExpandDepth": "1",
				"displayRequestDuration":   "true",
				"tryItOutEnabled":          "false",
			},
			// Phones and narrow windows get the page at their width.
			AppendHead: template.HTML(`<meta name="viewport" content="width=device-width, initial-scale=1">`),
			PrependHTML: template.HTML(`<nav style="font: 14px sans-serif; padding: 8px 20px; background: #1f2933;">` +
				`<a style="color: #fff;" href="` + template.HTMLEscapeString(opts.Path) + `">← Try the tools</a></nav>`),
		}),
		log:      opts.Logger,
		modified: time.Now(),
	}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, h.path)
	if r.URL.Path == FaviconPath {
		rest, ok = "/assets/favicon.svg", true
	}
	if !ok || (rest != "" && rest[0] != '/') {
		notFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeStatus(w, http.StatusMethodNotAllowed, codes.Unimplemented, "METHOD_NOT_ALLOWED",
			r.Method+" is not allowed on "+r.URL.Path+"; use GET, HEAD")
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch {
	case rest == "" || rest == "/":
		w.Header().Set("Content-Security-Policy", pagePolicy)
		h.serve(w, r, "index.html", "text/html; charset=utf-8", h.index)
	case rest == "/reference" || strings.HasPrefix(rest, "/reference/"):
		h.reference.ServeHTTP(w, r)
	case strings.HasPrefix(rest, "/assets/"):
		name := strings.TrimPrefix(rest, "/assets/")
		ctype, ok := assets[name]
		if !ok {
			notFound(w, r)
			return
		}
		body, err := static.ReadFile(path.Join("static", name))
		if err != nil {
			h.log.Error("docs: reading an embedded asset", "name", name, "err", err)
			writeStatus(w, http.StatusInternalServerError, codes.Internal, "INTERNAL", "internal error")
			return
		}
		h.serve(w, r, name, ctype, body)
	default:
		notFound(w, r)
	}
}

// serve writes body with its type; http.ServeContent answers HEAD and
// conditional requests.
func (h *handler) serve(w http.ResponseWriter, r *http.Request, name, ctype string, body []byte) {
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, h.modified, bytes.NewReader(body))
}

// notFound answers a path under the pages that is none of them.
func notFound(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, http.StatusNotFound, codes.NotFound, "ROUTE_NOT_FOUND", "no such page: "+r.URL.Path)
}

// writeStatus answers an error as every answer of the gateway's HTTP
// listener does: a google.rpc.Status in JSON with an ErrorInfo.
func writeStatus(w http.ResponseWriter, httpCode int, code codes.Code, reason, msg string) {
	st := status.New(code, msg)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: toolcall.ErrorDomain}); err == nil {
		st = ds
	}
	body, err := protojson.Marshal(st.Proto())
	if err != nil {
		body = []byte(`{"code":5,"message":"not found"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = w.Write(body)
}
