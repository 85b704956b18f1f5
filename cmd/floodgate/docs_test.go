package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/limiter"

	"github.com/floodgate/floodgate/internal/app"
)

// words joins s's words with single spaces, so that a check does not
// depend on where a text wraps.
func words(s string) string { return strings.Join(strings.Fields(s), " ") }

// docLine returns the first line of the file at path that contains marker.
func docLine(t *testing.T, path, marker string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, marker) {
			return line
		}
	}
	t.Fatalf("%s has no line with %q", path, marker)
	return ""
}

// TestDocumentedStoreTimeout: the store deadline that floodgate rls --help
// and docs/envoy.md give as FLOODGATE_STORE_TIMEOUT's default is the
// engine's (floodgate.DefaultStoreTimeout), which rls uses when the
// variable is not set.
func TestDocumentedStoreTimeout(t *testing.T) {
	want := floodgate.DefaultStoreTimeout.String()
	env := rlsDocumentsDefault(t, "FLOODGATE_STORE_TIMEOUT", want, ")")
	if got := env.Settings.Engine.Timeout; got != 0 {
		t.Errorf("rls without FLOODGATE_STORE_TIMEOUT sets %v, not the engine's default", got)
	}
}

// TestDocumentedHeapReserve: the heap reserve that floodgate rls --help
// and docs/envoy.md give as FLOODGATE_HEAP_RESERVE_MIB's default is the one
// rls holds when the variable is not set.
func TestDocumentedHeapReserve(t *testing.T) {
	want := strconv.Itoa(app.DefaultHeapReserveMiB)
	env := rlsDocumentsDefault(t, "FLOODGATE_HEAP_RESERVE_MIB", want, ";")
	if got := env.Settings.RLS.HeapReserveMiB; strconv.Itoa(got) != want {
		t.Errorf("rls without FLOODGATE_HEAP_RESERVE_MIB holds %d MiB, want %s", got, want)
	}
}

// rlsDocumentsDefault checks that floodgate rls --help says "(default
// <want><end>" of the variable, and docs/envoy.md's row of it "(<want>)",
// and returns what rls reads from an empty environment.
func rlsDocumentsDefault(t *testing.T, variable, want, end string) *app.Envoy {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"rls", "--help"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	help := words(out.String() + errb.String())
	i := strings.Index(help, variable)
	if i < 0 {
		t.Fatalf("rls --help does not name %s:\n%s", variable, help)
	}
	if got := help[i:min(len(help), i+200)]; !strings.Contains(got, "(default "+want+end) {
		t.Errorf("rls --help on %s: %q, want the default %s", variable, got, want)
	}
	if row := docLine(t, "../../docs/envoy.md", "| `"+variable+"` ("); !strings.Contains(row, "("+want+")") {
		t.Errorf("docs/envoy.md: %s\nwant the default %s", row, want)
	}
	env, err := app.ReadEnvoy(func(string) (string, bool) { return "", false }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestDocumentedInvalidToken: a route's on_invalid_token defaults to
// reject, and the pages that say what a bad token does say 401, not
// anonymous.
func TestDocumentedInvalidToken(t *testing.T) {
	f, err := config.Parse("t.yaml", []byte("version: 1\nroutes:\n  - {name: r, match: {paths: [\"/\"]}, upstream: none}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Routes[0].OnInvalidToken; got != config.InvalidTokenReject {
		t.Fatalf("on_invalid_token defaults to %q", got)
	}
	b, err := os.ReadFile("../../config/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"examples/README.md": docLine(t, "../../examples/README.md", "The user is the `claim`") +
			docLine(t, "../../examples/README.md", "expired, over 8 KiB"),
		"config/doc.go": string(b),
	} {
		text = words(strings.ReplaceAll(text, "//", ""))
		if strings.Contains(text, "bad token has no user") || !strings.Contains(text, "401") {
			t.Errorf("%s does not say a bad token is answered 401", name)
		}
	}
	if row := docLine(t, "../../README.md", "| `routes[].on_invalid_token` |"); !strings.Contains(row, "`"+config.InvalidTokenReject+"` (401)") {
		t.Errorf("README: %s", row)
	}
}

// TestDocumentedDenyCache: docs/envoy.md, like docs/redis.md, says that
// the rate-limit service keeps an over-limit cache (the engine's deny
// cache) and how many keys it holds.
func TestDocumentedDenyCache(t *testing.T) {
	row := docLine(t, "../../docs/envoy.md", "`LOCAL_CACHE_SIZE_IN_BYTES`")
	n := fmt.Sprint(limiter.DefaultDenyCacheEntries)
	if len(n) > 3 {
		n = n[:len(n)-3] + "," + n[len(n)-3:]
	}
	if !strings.Contains(row, "deny cache") || !strings.Contains(row, n+" keys") || strings.Contains(row, "without an over-limit cache") {
		t.Errorf("docs/envoy.md: %s\nwant the deny cache of %s keys", row, n)
	}
	if line := docLine(t, "../../docs/envoy.md", "`over_limit_with_local_cache`"); strings.Contains(line, "no over-limit cache") {
		t.Errorf("docs/envoy.md: %s", line)
	}
}
