// Package version names the build a command was made from, for --version:
// the version stamped in at link time (make image does), else what the Go
// toolchain recorded in the binary.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// stamped is set at link time:
//
//	go build -ldflags "-X github.com/toolgate/toolgate/internal/version.stamped=v1.2.3"
var stamped string

// String is the build's version: the stamped one, else the module version
// or VCS revision Go recorded, else "devel".
func String() string {
	if stamped != "" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// Line is what --version prints for the command named cmd.
func Line(cmd string) string {
	return fmt.Sprintf("%s %s (%s %s/%s)", cmd, String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Requested reports whether args (without the program name) ask for the
// version: -version or --version before any "--".
func Requested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-version", "--version":
			return true
		}
	}
	return false
}
