package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommittedSchemaIsGenerated: the committed schema is what the
// generator writes from the Go types today.
func TestCommittedSchemaIsGenerated(t *testing.T) {
	got, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "floodgate.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(g) || i < len(w); i++ {
			if i >= len(g) || i >= len(w) || g[i] != w[i] {
				t.Fatalf("schema/floodgate.schema.json is not what the generator writes (run go generate ./schema); line %d:\n got: %.200s\nfile: %.200s",
					i+1, at(g, i), at(w, i))
			}
		}
	}
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end)"
}

// TestNotesNameFields: a note for a field the types do not have is an
// error, so that a renamed field does not lose its description silently.
func TestNotesNameFields(t *testing.T) {
	notes["Server.no_such_field"] = `{"description": "x"}`
	defer delete(notes, "Server.no_such_field")
	if _, err := generate(); err == nil || !strings.Contains(err.Error(), "Server.no_such_field") {
		t.Errorf("generate with a stray note: %v", err)
	}
}
