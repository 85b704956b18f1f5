package main

import (
	"fmt"
	"os"

	"github.com/floodgate/floodgate/replay"
)

// writeHTMLReport writes the report as a self-contained HTML page.
func writeHTMLReport(path string, r *replay.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}
