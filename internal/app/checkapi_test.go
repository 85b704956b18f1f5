package app

import "testing"

func TestCheckAPIOnLoopbackByDefault(t *testing.T) {
	for in, want := range map[string]string{
		":9091": "127.0.0.1:9091", "0.0.0.0:9091": "0.0.0.0:9091", "[::]:9091": "[::]:9091",
		"api.internal:9091": "api.internal:9091", "127.0.0.1:0": "127.0.0.1:0",
	} {
		if got := loopbackByDefault(in); got != want {
			t.Errorf("loopbackByDefault(%q) = %q, want %q", in, got, want)
		}
	}
}
