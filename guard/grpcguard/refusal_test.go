package grpcguard_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/grpcguard"
)

// TestRefusalOfItsOwnMessage: a limit whose refusal has a body of its own
// (not the gateway's JSON) refuses a call with the code of its status and
// that status's text as the message, with the RetryInfo, never with a
// message saying the server failed.
func TestRefusalOfItsOwnMessage(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(`version: 1
limits:
  - name: say
    rate: 1
    per: 1h
    match: {paths: [/test.Echo/Say]}
    refusal: {body: '{"error":"slow down"}'}
  - name: fast
    rate: 1
    per: 1h
    match: {paths: [/test.Echo/Fast]}
    refusal: {status: 503, body: go away, content_type: text/plain}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(guard.File(file), guard.Options{ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor(g)))
	srv.RegisterService(&echoDesc, &echo{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, c := range []struct {
		method string
		code   codes.Code
		msg    string
	}{
		{"Say", codes.ResourceExhausted, "Too Many Requests"},
		{"Fast", codes.Unavailable, "Service Unavailable"},
	} {
		if _, _, err := say(ctxWith(t), conn, c.method, "x"); err != nil {
			t.Fatalf("%s, first call: %v", c.method, err)
		}
		_, _, err := say(ctxWith(t), conn, c.method, "x")
		s := status.Convert(err)
		if _, ok := retryInfo(err); s.Code() != c.code || s.Message() != c.msg || !ok {
			t.Errorf("%s, second call: %v %q (RetryInfo: %v), want %v %q with a RetryInfo", c.method, s.Code(), s.Message(), ok, c.code, c.msg)
		}
	}
}
