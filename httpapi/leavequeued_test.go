package httpapi

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// TestCheckWhoseCallerLeftWhileQueuedStands: a check whose caller leaves
// while it waits for a store call in flight (behind calls a stalled Redis
// holds, as under load) is a check whose caller may have gone ahead by
// its own failure policy, as a caller whose check was already sent
// (TestCheckWhoseCallerLeftStands): it must count once Redis answers, or
// by its limit's failure policy, never not at all.
func TestCheckWhoseCallerLeftWhileQueuedStands(t *testing.T) {
	t.Parallel()
	url, rs := onRedis(t, limiter.Options{MaxInFlight: 1})
	post(t, url+"/v1/check", `{"limit":"tokens","key":"warm"}`)
	rs.Pause()
	var wg sync.WaitGroup
	for i := range 2 {
		// Checks of other keys: one Redis holds, with the one store
		// call in flight (limiter.Options.MaxInFlight, 1,024 by
		// default, here 1: as under load), and one waiting for it.
		wg.Go(func() { post(t, url+"/v1/check", fmt.Sprintf(`{"limit":"tokens","key":"held-%d"}`, i)) })
	}
	time.Sleep(200 * time.Millisecond)
	postAndLeave(t, url, "/v1/check", `{"limit":"tokens","key":"q","cost":800}`, 300*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the server sees the connection close
	rs.Resume()
	wg.Wait()
	if free := freeTokens(t, url, "q", 200); free != 200 {
		t.Fatalf("a check of 800 whose caller left while it waited behind a stalled Redis: %v of 1000 free, want 200 (the charge stands, as for one already sent)", free)
	}
}
