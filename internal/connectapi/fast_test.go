package connectapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// seen is what the call handler was given.
type seen struct {
	Name, Args, Peer, Host string
	Timeout                time.Duration
	TimeoutSet, Deadline   bool
	Called                 bool
}

// answered is what a client got: status, the headers a Connect client
// reads, and the body (JSON compared as values: protojson's spacing
// varies).
type answered struct {
	Code   int
	Header map[string]string
	Body   any
	Raw    string
}

// serveBoth sends the same request to the door with the fast path and
// without (connect-go alone), answering with res and err, and returns
// what each handler saw and each client got.
func serveBoth(t *testing.T, body string, header map[string]string, res toolcall.Result, herr error) (fast, slow seen, fastA, slowA answered) {
	t.Helper()
	for i, on := range []bool{true, false} {
		var s seen
		path, h := newDoor(func(ctx context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
			_, dl := ctx.Deadline()
			s = seen{Name: c.Name, Args: string(c.Args), Peer: c.Peer, Host: strings.Join(c.Header.Values("host"), ","),
				Timeout: c.Timeout, TimeoutSet: c.TimeoutSet, Deadline: dl, Called: true}
			c.RequestID = "req-1"
			return res, herr
		}, Options{MaxMessageBytes: 4096, MaxHeaderBytes: 16 << 10}, on)
		req := httptest.NewRequest(http.MethodPost, path+"InvokeTool", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		a := answered{Code: rec.Code, Header: map[string]string{}, Raw: rec.Body.String()}
		for _, k := range []string{"Content-Type", "Content-Encoding", "Accept-Encoding", "X-Request-Id"} {
			a.Header[k] = strings.Join(rec.Header().Values(k), ", ")
		}
		raw := rec.Body.Bytes()
		if rec.Header().Get("Content-Encoding") == "gzip" {
			raw = gunzip(t, raw)
		}
		if rec.Header().Get("Content-Type") == "application/proto" {
			var m toolgatev1.InvokeToolResponse
			if err := proto.Unmarshal(raw, &m); err != nil {
				t.Fatalf("the answer does not decode: %v", err)
			}
			a.Body = protojson.Format(&m) // Struct fields in order
		} else if err := json.Unmarshal(raw, &a.Body); err != nil {
			a.Body = string(raw)
		}
		if i == 0 {
			fast, fastA = s, a
		} else {
			slow, slowA = s, a
		}
	}
	return fast, slow, fastA, slowA
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// The fast path gives the handler the call connect-go's path gives it and
// answers the client what connect-go answers, for the bodies it reads and
// for those it leaves to connect-go.
func TestFastInvokeMatchesConnect(t *testing.T) {
	long := strings.Repeat("answer ", 300) // past compressMinBytes
	bodies := []string{
		`{"name":"echo","arguments":{"msg":"hi"}}`,
		`{"name": "echo", "arguments": {"b": 1, "a": [1.50, -0, 1e3, 12345678901234567890, 0.1, true, null, "x"], "c": {"z": {}, "y": []}}}`,
		`{"name":"echo","arguments":{"é":"\u00e9\ud83d\ude00\n\"\\\/\b\f\r\t","\u0062":"<&>"}}`,
		`{"name":"ec\"ho","arguments":{},"timeout":"1.5s"}`,
		`{"name":"echo","timeout":"30s","unknown":{"x":[1]}}`,
		`{"name":"echo","timeout":"0.000000001s"}`,
		`{"name":"echo","timeout":"315576000000s"}`,
		`{"name":"echo","timeout":"-1s"}`,
		`{"name":"echo","timeout":"200ms"}`,
		`{"name":"echo","timeout":5}`,
		`{"name":"echo","argumentsJson":"{\"n\": 12345678901234567890}"}`,
		`{"name":"echo","arguments_json":"{\"n\":1}","arguments":{}}`,
		`{"name":"echo","arguments_json":"{\"n\":1}","arguments":{"a":1}}`,
		`{"name":"echo","arguments_json":"{}","argumentsJson":"{}"}`,
		`{"name":"echo","arguments":null,"argumentsJson":null,"timeout":null,"name":null}`,
		`{"name":null,"arguments":null}`,
		`{"n\u0061me":"echo"}`,
		`{"name":"echo","arguments":{"x":1e400}}`,
		`{"name":"echo","arguments":{"x":1e-400}}`,
		`{"name":"echo","arguments":{"bad":"\ud800"}}`,
		`{"name":"echo","arguments":[1]}`,
		`{"name":1}`,
		`{"name":"echo","arguments":{"a":1,"a":2}}`,
		`[]`,
		`{`,
		``,
		`{}`,
		`{"name":"echo","arguments":` + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70) + `}`,
		`{"name":"echo","arguments":{"pad":"` + strings.Repeat("x", 5000) + `"}}`,
	}
	results := []struct {
		name string
		res  toolcall.Result
		err  error
	}{
		{"text", toolcall.Result{Output: "hello"}, nil},
		{"empty", toolcall.Result{}, nil},
		{"json", toolcall.Result{Output: ` {"b": [1, 2.50], "a": "x"} `}, nil},
		{"long", toolcall.Result{Output: long}, nil},
		{"bad utf-8", toolcall.Result{Output: "a\xffb"}, nil},
		{"error", toolcall.Result{}, mustDetails(t)},
	}
	headers := []map[string]string{
		nil,
		{"Connect-Protocol-Version": "1", "Accept-Encoding": "gzip", "Connect-Timeout-Ms": "30000"},
		{"Accept-Encoding": "br, gzip"},
		{"Accept-Encoding": "identity"},
		{"Connect-Protocol-Version": "2"},
		{"Connect-Timeout-Ms": "-5"},
		{"Connect-Timeout-Ms": "12345678901"},
		{"Connect-Timeout-Ms": "abc"},
		{"Content-Encoding": "br"},
		{"Content-Type": "application/json; charset=utf-8"},
		{"Content-Type": "application/proto"},
	}
	for _, body := range bodies {
		for _, r := range results {
			for _, hd := range headers {
				fast, slow, fa, sa := serveBoth(t, body, hd, r.res, r.err)
				name := fmt.Sprintf("body %.60q, answer %s, headers %v", body, r.name, hd)
				if fast != slow {
					t.Errorf("%s: the handler saw\n%+v on the fast path,\n%+v through connect-go", name, fast, slow)
				}
				if !reflect.DeepEqual(fa.Code, sa.Code) || !reflect.DeepEqual(fa.Header, sa.Header) || !reflect.DeepEqual(fa.Body, sa.Body) {
					t.Errorf("%s: answered\n%d %v %.300s on the fast path,\n%d %v %.300s by connect-go", name,
						fa.Code, fa.Header, fa.Raw, sa.Code, sa.Header, sa.Raw)
				}
			}
		}
	}
}

// The same for binary bodies (application/proto, connect-go's default).
func TestFastInvokeProtoMatchesConnect(t *testing.T) {
	args, err := structpb.NewStruct(map[string]any{"b": 1.5, "a": []any{"x", true, nil, 12345678901234567890.0}, "c": map[string]any{"z": "é\n"}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*toolgatev1.InvokeToolRequest{
		{Name: "echo", Arguments: args},
		{Name: "echo", Arguments: args, Timeout: durationpb.New(1500 * time.Millisecond)},
		{Name: "echo", ArgumentsJson: `{"n": 12345678901234567890}`},
		{Name: "echo", ArgumentsJson: `{"n": 1}`, Arguments: args},
		{Name: "echo", ArgumentsJson: `{"n": 1}`, Arguments: &structpb.Struct{}},
		{Name: "echo", Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}},
		{Name: "echo", Timeout: &durationpb.Duration{Seconds: -5}},
		{},
	}
	bodies := []string{"", "\xff\xff\xff", "\x0a\x04ec"} // empty (an empty message), garbage, cut short
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b))
	}
	results := []struct {
		name string
		res  toolcall.Result
		err  error
	}{
		{"text", toolcall.Result{Output: "hello"}, nil},
		{"json", toolcall.Result{Output: ` {"b": [1, 2.50], "a": "x"} `}, nil},
		{"long", toolcall.Result{Output: strings.Repeat("answer ", 300)}, nil},
		{"bad utf-8", toolcall.Result{Output: "a\xffb"}, nil},
		{"error", toolcall.Result{}, mustDetails(t)},
	}
	for i, body := range bodies {
		for _, r := range results {
			for _, hd := range []map[string]string{
				{"Content-Type": "application/proto"},
				{"Content-Type": "application/proto", "Connect-Protocol-Version": "1", "Accept-Encoding": "gzip", "Connect-Timeout-Ms": "30000"},
			} {
				fast, slow, fa, sa := serveBoth(t, body, hd, r.res, r.err)
				name := fmt.Sprintf("body %d, answer %s, headers %v", i, r.name, hd)
				if fast != slow {
					t.Errorf("%s: the handler saw\n%+v on the fast path,\n%+v through connect-go", name, fast, slow)
				}
				if !reflect.DeepEqual(fa.Code, sa.Code) || !reflect.DeepEqual(fa.Header, sa.Header) || !reflect.DeepEqual(fa.Body, sa.Body) {
					t.Errorf("%s: answered\n%d %v %.300v on the fast path,\n%d %v %.300v by connect-go", name,
						fa.Code, fa.Header, fa.Body, sa.Code, sa.Header, sa.Body)
				}
			}
		}
	}
}

func mustDetails(t *testing.T) error {
	t.Helper()
	st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(
		&errdetails.ErrorInfo{Reason: "RATE_LIMITED", Domain: "toolgate"},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// Random argument objects: the fast path writes them as connect-go's
// path (protojson into a Struct, then apiproto.Arguments) does.
func TestCanonicalArgsMatchesStruct(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		args := randomObject(rng, 0)
		body := `{"name":"t","arguments":` + args + `}`
		fast, slow, _, _ := serveBoth(t, body, nil, toolcall.Result{Output: "ok"}, nil)
		if fast != slow {
			t.Fatalf("case %d: %s\nfast: %q\nslow: %q", i, body, fast.Args, slow.Args)
		}
	}
}

func randomObject(rng *rand.Rand, depth int) string {
	n := rng.IntN(5)
	var b strings.Builder
	b.WriteByte('{')
	keys := map[string]bool{}
	for i := 0; i < n; i++ {
		k := randomString(rng)
		if keys[k] {
			continue
		}
		keys[k] = true
		if b.Len() > 1 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(k))
		b.WriteString(": ")
		b.WriteString(randomValue(rng, depth+1))
	}
	b.WriteByte('}')
	return b.String()
}

func randomValue(rng *rand.Rand, depth int) string {
	k := rng.IntN(9)
	if depth > 4 && k >= 7 {
		k = 0
	}
	switch k {
	case 0:
		return strconv.Quote(randomString(rng))
	case 1:
		return strconv.FormatInt(rng.Int64N(1<<62)-(1<<61), 10)
	case 2:
		return strconv.FormatFloat(rng.NormFloat64()*math10(rng.IntN(40)-20), 'g', -1, 64)
	case 3:
		return []string{"true", "false", "null", "-0", "0.0", "1.10", "1e2", "1E+2", "-1.5e-3", "123456789012345678"}[rng.IntN(10)]
	case 4:
		return strconv.Itoa(rng.IntN(1000))
	case 5:
		return `"\u00e9\ud83d\ude00\t\"\\\/"`
	case 6:
		return fmt.Sprintf("%d.%d", rng.IntN(1e6), rng.IntN(1e6))
	case 7:
		return randomObject(rng, depth)
	default:
		var b strings.Builder
		b.WriteByte('[')
		for i := range rng.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(randomValue(rng, depth+1))
		}
		b.WriteByte(']')
		return b.String()
	}
}

func math10(e int) float64 {
	f := 1.0
	for ; e > 0; e-- {
		f *= 10
	}
	for ; e < 0; e++ {
		f /= 10
	}
	return f
}

func randomString(rng *rand.Rand) string {
	const alphabet = "abcAB_é😀\n\"\\/<>&\x01 "
	rs := []rune(alphabet)
	n := rng.IntN(6)
	out := make([]rune, n)
	for i := range out {
		out[i] = rs[rng.IntN(len(rs))]
	}
	return string(out)
}

// The calls Connect clients and browsers make take the fast path; others
// are left to connect-go with their bodies as they came.
func TestFastPathTaken(t *testing.T) {
	s := &service{h: func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{Output: "ok"}, nil
	}, errs: connect.NewErrorWriter(), fast: true}
	for _, tc := range []struct {
		body   string
		header map[string]string
		want   bool
	}{
		{`{"name":"echo","arguments":{"msg":"hi"}}`, map[string]string{"Connect-Protocol-Version": "1", "Accept-Encoding": "gzip", "Connect-Timeout-Ms": "100"}, true},
		{`{"name":"echo","argumentsJson":"{\"a\":1}","timeout":"2.5s"}`, nil, true},
		{`{"name":"echo","timeout":"200ms"}`, nil, false},
		{"\x0a\x04echo", map[string]string{"Content-Type": "application/proto"}, true},
		{"\xff\xff", map[string]string{"Content-Type": "application/proto"}, false},
		{`{"name":"echo"}`, map[string]string{"Content-Type": "application/connect+json"}, false},
	} {
		req := httptest.NewRequest(http.MethodPost, invokePath, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		if got := s.serveInvoke(httptest.NewRecorder(), req); got != tc.want {
			t.Errorf("%s %v: fast path %v, want %v", tc.body, tc.header, got, tc.want)
		}
		if !tc.want {
			if rest, _ := io.ReadAll(req.Body); string(rest) != tc.body {
				t.Errorf("%s: connect-go would read %q", tc.body, rest)
			}
		}
	}
}
