package main

import (
	"slices"
	"testing"
)

func TestLegs(t *testing.T) {
	us := int64(1000)
	evs := []event{
		// call 1: request read at 0 and 5 µs (headers, body), published at
		// 30, Pulsar's receipt read at 60, reply read at 200, answered at 215
		{0, doorRead}, {5 * us, doorRead}, {30 * us, busWrite}, {60 * us, busRead}, {200 * us, busRead}, {215 * us, doorWrite},
		// a second write of the same answer (trailers) starts nothing
		{216 * us, doorWrite},
		// call 2, with a write of the door's own (a window update) while
		// the call waits
		{300 * us, doorRead}, {340 * us, busWrite}, {400 * us, doorWrite}, {500 * us, busRead}, {520 * us, doorWrite},
		// a window update read and no publish: no call
		{600 * us, doorRead}, {610 * us, doorWrite},
	}
	l := legs(evs)
	if !slices.Equal(l.in, []float64{30, 40}) || !slices.Equal(l.service, []float64{170, 160}) || !slices.Equal(l.out, []float64{15, 20}) {
		t.Fatalf("legs %+v; want in [30 40], service [170 160], out [15 20]", l)
	}
	if got := pct([]float64{5, 1, 3, 2, 4}, .5); got != 3 {
		t.Fatalf("p50 %v, want 3", got)
	}
}

func TestClassifyStack(t *testing.T) {
	for _, tc := range []struct {
		stack string
		want  kind
	}{
		{"syscall.write;syscall.Write;net.(*netFD).Write;github.com/apache/pulsar-client-go/pulsar/internal.(*connection).run;", busWrite},
		{"syscall.read;net.(*conn).Read;github.com/apache/pulsar-client-go/pulsar/internal.(*connectionReader).readFromConnection;", busRead},
		{"syscall.read;google.golang.org/grpc/internal/transport/readyreader.sysRead;", doorRead},
		{"syscall.write;bufio.(*Writer).Flush;net/http.(*response).finishRequest;", doorWrite},
		{"syscall.read;os.(*File).Read;", other},
	} {
		if got := classifyStack(tc.stack); got != tc.want {
			t.Errorf("classifyStack(%q) = %v, want %v", tc.stack, got, tc.want)
		}
	}
}
