package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set at link time with -ldflags -X (see the package documentation); empty
// unless set.
var (
	version string
	commit  string
	date    string
)

// Unknown is what a field holds when the build does not say.
const Unknown = "unknown"

// Info describes one build.
type Info struct {
	// Version is the module version: a tag (v1.2.0), a pseudo-version
	// the go command derived from the commit, or "dev" when neither the
	// build nor the link says.
	Version string
	// Commit is the commit built, with "-dirty" when the tree held
	// changes not committed, or Unknown.
	Commit string
	// GoVersion is the version of Go that built the binary.
	GoVersion string
	// Date is when the commit was made (vcs.time), or the date given at
	// link time, or Unknown.
	Date string
}

// Read returns this binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuild(bi, version, commit, date)
}

// fromBuild makes an Info from the go command's stamps in bi (nil when the
// binary has none) and the link-time values, which win when set.
func fromBuild(bi *debug.BuildInfo, linkVersion, linkCommit, linkDate string) Info {
	in := Info{Version: "dev", Commit: Unknown, GoVersion: runtime.Version(), Date: Unknown}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		var rev, modified, at string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			case "vcs.time":
				at = s.Value
			}
		}
		if rev != "" {
			in.Commit = rev
			if modified == "true" {
				in.Commit += "-dirty"
			}
		}
		if at != "" {
			in.Date = at
		}
	}
	if linkVersion != "" {
		in.Version = linkVersion
	}
	if linkCommit != "" {
		in.Commit = linkCommit
	}
	if linkDate != "" {
		in.Date = linkDate
	}
	return in
}
