// Package follow keeps a process's copy of state that instances share
// through a store (the access lists, the penalty box's bans) in step with
// it: at every tick the owner asks the state's version and, when it
// changed, reads the state again.
package follow

import (
	"context"
	"time"
)

// Loop calls check at every interval until ctx ends, each call bounded by
// timeout, and hands a failure to failed unless ctx has ended (a check cut
// short by a stop is no failure). It returns when ctx ends.
func Loop(ctx context.Context, every, timeout time.Duration, check func(context.Context) error, failed func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := check(cctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			failed(err)
		}
	}
}
