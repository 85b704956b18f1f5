package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/internal/leaktest"
)

func TestMain(m *testing.M) {
	if os.Getenv(cgiChild) == "1" {
		serveCGIChild() // the upstream of TestUnderscoreSpellingsNeverReachTheUpstream
	}
	if os.Getenv(healthChild) == "1" {
		serveHealthChild() // the upstream of TestHealthCheckOfAStarvedProcess
	}
	code := m.Run()
	if kit.pemPath != "" {
		// The token kit's key file, made once for the whole package.
		_ = os.RemoveAll(filepath.Dir(kit.pemPath))
	}
	leaktest.Exit(code)
}
