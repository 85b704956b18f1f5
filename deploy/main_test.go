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
	cmd := exec.Command("go", "build", "-o", floodgateBin, "./cmd/floodgate")
	cmd.Dir = ".."
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
