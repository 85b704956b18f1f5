package httpapi

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServeAndGracefulStop(t *testing.T) {
	t.Parallel()
	eng := newEngine(t)
	h := New(eng, testRules(t), Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, lis, h, 5*time.Second) }()
	url := "http://" + lis.Addr().String()
	resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(`{"limit":"login","key":"s"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || eng.checks.Load() != 1 {
		t.Fatalf("status %d, %d engine checks", resp.StatusCode, eng.checks.Load())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not stop")
	}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if _, err := c.Post(url+"/v1/check", "application/json", strings.NewReader(`{"limit":"login"}`)); err == nil {
		t.Fatal("a stopped server answered")
	}
}
