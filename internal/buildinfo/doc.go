// Package buildinfo says which build of Floodgate is running: the module
// version, the commit, the Go version and the date, read from the stamps
// the go command writes into every binary (runtime/debug.ReadBuildInfo),
// or from the values given at link time with -ldflags -X, which win:
//
//	go build -ldflags "-X github.com/floodgate/floodgate/internal/buildinfo.version=v1.2.0 \
//	  -X github.com/floodgate/floodgate/internal/buildinfo.commit=$(git rev-parse HEAD) \
//	  -X github.com/floodgate/floodgate/internal/buildinfo.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" ./cmd/floodgate
//
// A build from a git checkout needs no flags: the go command stamps the
// commit (vcs.revision), whether the tree was modified (vcs.modified) and
// the commit's time (vcs.time), unless -buildvcs=false.
package buildinfo
