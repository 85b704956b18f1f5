package redisstore

import (
	"fmt"

	"github.com/floodgate/floodgate"
)

// MaxCount is the largest limit of a counting algorithm (a fixed or
// sliding window, a sliding log, a quota, a concurrency limit) that the
// store decides exactly. Its scripts count in Lua's numbers, doubles,
// which hold every integer up to 2^53: past it a count stops growing by
// one, and a limit above it would admit every request once its count got
// there. Below it, a sum past the limit stays past it however it rounds.
// The store decides a counting limit above MaxCount as one of MaxCount
// (given by a program or an admin API's override): it may deny before
// the limit, never past it.
const MaxCount = 1<<53 - 1

// CheckLimit reports a limit the store cannot decide exactly: a counting
// limit whose max is above MaxCount, as a *floodgate.ParamError (nil
// otherwise). floodgate serve refuses a file that gives one with a Redis
// store, at the limit's field.
func CheckLimit(l *floodgate.Limit) error {
	switch l.Algorithm.Family() {
	case floodgate.FamilyWindow, floodgate.FamilyQuota, floodgate.FamilyConcurrency:
		if l.Max > MaxCount {
			name := l.Name
			if name == "" {
				name = l.Algorithm.String()
			}
			return &floodgate.ParamError{Limit: name, Param: floodgate.ParamMax,
				Msg: fmt.Sprintf("%d is above %d (2^53-1), the largest count the Redis store keeps exactly", l.Max, int64(MaxCount))}
		}
	}
	return nil
}
