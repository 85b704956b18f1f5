package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/floodgate/floodgate",
		Version: "v0.0.0-20261202100000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef"},
			{Key: "vcs.time", Value: "2026-12-02T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		name                string
		bi                  *debug.BuildInfo
		version, commit, at string
		want                Info
	}{
		{"stamped by the go command", stamped, "", "", "",
			Info{Version: "v0.0.0-20261202100000-0123456789ab+dirty", Commit: "0123456789abcdef-dirty", GoVersion: "go1.26.8", Date: "2026-12-02T10:00:00Z"}},
		{"link-time values win", stamped, "v1.2.0", "fedcba", "2026-12-03T00:00:00Z",
			Info{Version: "v1.2.0", Commit: "fedcba", GoVersion: "go1.26.8", Date: "2026-12-03T00:00:00Z"}},
		{"a clean tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.0.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}}, "", "", "",
			Info{Version: "v1.0.0", Commit: "abc", GoVersion: "go1.26.8", Date: Unknown}},
		{"no stamps", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "", "", "",
			Info{Version: "dev", Commit: Unknown, GoVersion: "go1.26.8", Date: Unknown}},
	} {
		if got := fromBuild(c.bi, c.version, c.commit, c.at); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := fromBuild(nil, "", "", ""); got.Version != "dev" || got.Commit != Unknown || got.GoVersion == "" {
		t.Errorf("no build information: %+v", got)
	}
}
