package console

import (
	"context"
	"net/http"
	"time"

	"github.com/floodgate/floodgate/access"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/penalty"
	"github.com/floodgate/floodgate/policy"
)

// Keeper screens the gateway's requests with the console's allow and
// deny lists and penalty box (a gateway.Gatekeeper): a denied address is
// answered 403 and a banned key 429 with Retry-After until its ban ends,
// both before any limit is charged; an allowed address is exempt from the
// limits its entry names.
type Keeper struct {
	lists *access.Lists
	box   *penalty.Box
}

// Gatekeeper returns the console's Keeper.
func (c *Console) Gatekeeper() *Keeper { return &Keeper{lists: c.lists, box: c.box} }

// Screen answers for the lists and the penalty box.
func (k *Keeper) Screen(m *gateway.Match) (int, time.Duration) {
	if l := k.lists.List(); l != nil {
		if status := gateway.ScreenByList(l, m, true); status != 0 {
			return status, 0
		}
	}
	if _, until, banned := k.box.Banned(m.ClientKey, m.KeyID, m.User); banned {
		return http.StatusTooManyRequests, time.Until(until)
	}
	return 0, 0
}

// ScreensUsers reports whether a penalty-box rule bans users (a
// gateway.UserScreener): the gateway then verifies the token of a request
// on every route, so that a banned user is refused, and a user's offences
// counted, also where no limit counts per user.
func (k *Keeper) ScreensUsers() bool {
	for _, r := range k.box.Rules() {
		if r.Key == config.BanKeyUser {
			return true
		}
	}
	return false
}

// CountsStatuses reports whether a penalty-box rule counts answers by
// their status (count_on; a gateway.StatusCounter): the gateway then
// learns the upstream's status of a request whose client left before it.
func (k *Keeper) CountsStatuses() bool {
	for _, r := range k.box.Rules() {
		if len(r.CountOn) > 0 {
			return true
		}
	}
	return false
}

// Outcome counts the offences of a request's answer, within the time given
// and whether or not the request's context has ended; without penalty-box
// rules it returns at once. A refusal on a limit is an offence of the
// identities the refusing limit counts per (m.RefusedBy) alone.
func (k *Keeper) Outcome(ctx context.Context, within time.Duration, m *gateway.Match, refused bool, status int) {
	if len(k.box.Rules()) == 0 {
		return
	}
	var by policy.Identities
	if refused {
		by = m.RefusedBy
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), within)
	defer cancel()
	k.box.Outcome(ctx, m.ClientKey, m.KeyID, m.User, refused, by, status)
}
