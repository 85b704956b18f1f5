package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// floodgateBin is the floodgate binary built from the parent module for
// these tests ("" when the build failed: buildErr says why).
var (
	floodgateBin string
	buildErr     error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "floodgate-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	floodgateBin = filepath.Join(dir, "floodgate")
	// Static and -trimpath, as the image's binary is built (and as
	// scripts/test.sh builds the packages before this module's tests), so
	// that the compiled packages are shared.
	cmd := exec.Command("go", "build", "-trimpath", "-o", floodgateBin, "./cmd/floodgate")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build ./cmd/floodgate: %v\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary returns the floodgate binary, failing t when it could not be
// built.
func binary(t *testing.T) string {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return floodgateBin
}
