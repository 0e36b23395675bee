package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestRequested(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want bool
	}{
		{"none", nil, false},
		{"double dash", []string{"--version"}, true},
		{"single dash", []string{"-version"}, true},
		{"after other flags", []string{"--log-level", "debug", "--version"}, true},
		{"after --", []string{"--", "--version"}, false},
		{"other flag", []string{"--versions"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Requested(tc.args); got != tc.want {
				t.Errorf("Requested(%q) = %v, want %v", tc.args, got, tc.want)
			}
		})
	}
}

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"module version", debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"nothing recorded", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{"revision", debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}}}, "0123456789ab"},
		{"modified tree", debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}}, "0123456789ab-dirty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := fromBuildInfo(&tc.bi); got != tc.want {
				t.Errorf("fromBuildInfo = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLine(t *testing.T) {
	t.Parallel()
	if got := Line("gateway"); !strings.HasPrefix(got, "gateway "+String()+" (go") {
		t.Errorf("Line = %q", got)
	}
}
