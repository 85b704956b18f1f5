package config

// The stores register the schemes server.store is checked against, as the
// binary that imports them does.
import (
	"fmt"
	"strings"
	"testing"

	_ "github.com/floodgate/floodgate/store/memstore"
	_ "github.com/floodgate/floodgate/store/redisstore"
)

// TestCountPastTheRedisStoresBound: a counting limit above what the Redis
// store counts exactly (2^53-1) is refused at its field with a Redis
// store, and taken with the embedded store, which counts to the int64
// bound.
func TestCountPastTheRedisStoresBound(t *testing.T) {
	const src = `version: 1
server:
  store: %s
limits:
  - name: bytes
    algorithm: quota
    period: month
    limit: 9007199254740993
`
	_, err := Parse("big.yaml", []byte(fmt.Sprintf(src, "redis://127.0.0.1:6379/0")))
	if err == nil || !strings.Contains(err.Error(), "big.yaml:8:12: limits[0].limit:") || !strings.Contains(err.Error(), "Redis store") {
		t.Errorf("a limit of 2^53+1 with a Redis store: %v; want it refused at limits[0].limit", err)
	}
	if _, err := Parse("big.yaml", []byte(fmt.Sprintf(src, "memory"))); err != nil {
		t.Errorf("a limit of 2^53+1 with the embedded store: %v", err)
	}
}
