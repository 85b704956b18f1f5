//go:build unix

package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestCancelWhileALogStalls: a log read from a pipe whose writer stalls
// (floodgate replay --log <(zcat ...)) does not hold a replay past its
// context: Run returns the context's error (the CLI's Ctrl-C), and stops
// reading the pipe. It waited for the pipe without end.
func TestCancelWhileALogStalls(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "access.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	written := make(chan error, 1)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			written <- err
			return
		}
		defer w.Close()
		// More than the first look at the log takes, less than a batch of
		// records; then the writer stalls.
		var b []byte
		for i := range 100 {
			b = fmt.Appendf(b, `{"time":"2026-11-30T10:00:%02d.%03dZ","ip":"192.0.2.1","method":"GET","path":"/x","status":200}`+"\n", i/10, i%10)
		}
		_, err = w.Write(b)
		written <- err
		<-release
	}()
	defer func() {
		close(release)
		<-writerDone
	}()

	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		r   *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := Run(ctx, Options{Policy: compilePolicy(t, bucketPolicy), Logs: []string{fifo}})
		done <- result{r, err}
	}()
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case res := <-done:
		if !errors.Is(res.err, context.Canceled) {
			t.Errorf("Run: %v, %+v", res.err, res.r)
		}
	case <-time.After(20 * time.Second):
		close(release) // let the replay end, to leave nothing behind
		<-done
		release = make(chan struct{})
		t.Fatal("Run went on waiting for the log after its context ended")
	}
}
