package memstore

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
)

// The embedded store opens as "memory".
func init() {
	store.Register("memory", store.Driver{Check: checkURL, Open: open})
}

func checkURL(url string) error {
	if url != "memory" {
		// Not the URL itself: it may hold a password.
		return errors.New(`memstore: the embedded store is named "memory", with nothing after it`)
	}
	return nil
}

func open(_ context.Context, _ string, o store.Options) (limiter.Store, io.Closer, error) {
	mo := Options{StatePath: o.StatePath, MaxBytes: o.MaxBytes, SnapshotInterval: o.SnapshotInterval, Logger: o.Logger}
	if o.ExactClock {
		// The system clocks read at every decision: the wall clock for
		// quotas, the monotonic one for everything else, as the cached
		// default does.
		start := time.Now()
		mo.Now = func() int64 { return time.Now().UnixNano() }
		mo.Elapsed = func() time.Duration { return time.Since(start) }
	}
	s, err := New(mo)
	if err != nil {
		return nil, nil, err
	}
	return s, s, nil
}
