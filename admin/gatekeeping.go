package admin

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"time"

	"github.com/floodgate/floodgate/access"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/penalty"
)

// BanBox is the penalty box the API lists and lifts bans of
// (*penalty.Box).
type BanBox interface {
	List(ctx context.Context) ([]penalty.Ban, error)
	Lift(ctx context.Context, rule, key string) error
}

// AccessLists are the allow and deny lists the API reads and changes
// (*access.Lists).
type AccessLists interface {
	List() *access.List
	Add(ctx context.Context, e access.Entry) (access.Entry, error)
	Remove(ctx context.Context, list string, n netip.Prefix) error
}

// banView is a ban as the API shows it.
type banView struct {
	penalty.Ban
	RetryAfter int64 `json:"retry_after"`
}

// banPage is how many bans GET /api/v1/bans lists without ?limit=.
const banPage = 1000

// listBans answers GET /api/v1/bans[?limit=N]: the bans in force, soonest
// end first, at most limit of them (1,000 by default, 10,000 at most: a
// flood from many addresses can earn 100,000), and how many there are.
func (a *API) listBans(_ http.ResponseWriter, r *http.Request, _ string) (any, error) {
	limit, err := limitParam(r, banPage)
	if err != nil {
		return nil, err
	}
	if a.o.Bans == nil {
		return map[string]any{"bans": []banView{}, "total": 0}, nil
	}
	bans, err := a.o.Bans.List(r.Context())
	if err != nil {
		return nil, err
	}
	now := a.o.Now()
	out := make([]banView, 0, min(len(bans), limit))
	for _, b := range bans[:min(len(bans), limit)] {
		out = append(out, banView{Ban: b, RetryAfter: int64((b.Until.Sub(now) + time.Second - 1) / time.Second)})
	}
	return map[string]any{"bans": out, "total": len(bans)}, nil
}

// liftBan answers DELETE /api/v1/bans?ban=RULE&key=KEY: the ban ends on
// every instance, and the key's strikes are forgotten.
func (a *API) liftBan(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	rule, key := r.URL.Query().Get("ban"), r.URL.Query().Get("key")
	if rule == "" || key == "" {
		return nil, errorf(http.StatusBadRequest, "ban and key are required: DELETE /api/v1/bans?ban=RULE&key=KEY")
	}
	if a.o.Bans == nil {
		return nil, errorf(http.StatusNotFound, "no such ban")
	}
	if err := a.o.Bans.Lift(r.Context(), rule, key); err != nil {
		if errors.Is(err, penalty.ErrNoBan) {
			return nil, errorf(http.StatusNotFound, "%s is not banned by %s", key, rule)
		}
		return nil, err
	}
	a.record(r.Context(), actor, "ban.lift", rule+"|"+key, map[string]any{"ban": rule, "key": key})
	return map[string]any{"lifted": true, "ban": rule, "key": key}, nil
}

// listAccess answers GET /api/v1/access: the entries of both lists, the
// file's and the API's.
func (a *API) listAccess(_ http.ResponseWriter, _ *http.Request, _ string) (any, error) {
	if a.o.Access == nil {
		return map[string]any{"entries": []access.Entry{}}, nil
	}
	es := a.o.Access.List().Entries()
	if es == nil {
		es = []access.Entry{}
	}
	return map[string]any{"entries": es}, nil
}

// accessBody is the body of POST /api/v1/access.
type accessBody struct {
	List    string   `json:"list"`
	Network string   `json:"network"`
	Exempt  []string `json:"exempt"`
}

// addAccess answers POST /api/v1/access {list, network, exempt}. An allow
// entry's exempt list follows the policy file's rules (config.CheckExempt):
// [all] alone, or limits that exist, each once; a deny entry has none.
func (a *API) addAccess(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	var b accessBody
	if err := decode(r, &b); err != nil {
		return nil, err
	}
	e, err := a.accessEntry(b.List, b.Network)
	if err != nil {
		return nil, err
	}
	e.Exempt, e.Added, e.Actor = b.Exempt, a.o.Now().UTC(), actor
	switch e.List {
	case access.Deny:
		if len(b.Exempt) > 0 {
			return nil, errorf(http.StatusBadRequest, "exempt: a deny entry takes none: a denied address is refused before any limit")
		}
	case access.Allow:
		p := a.o.Policy()
		if err := config.CheckExempt(e.Exempt, func(n string) bool { _, ok := p.Limit(n); return ok }); err != nil {
			return nil, errorf(http.StatusBadRequest, "%v", err)
		}
	}
	if e, err = a.o.Access.Add(r.Context(), e); err != nil {
		return nil, accessError(err)
	}
	a.record(r.Context(), actor, "access.add", e.List+"|"+e.Network.String(), map[string]any{"list": e.List, "network": e.Network.String(), "exempt": e.Exempt})
	return e, nil
}

// removeAccess answers DELETE /api/v1/access?list=LIST&network=CIDR.
func (a *API) removeAccess(_ http.ResponseWriter, r *http.Request, actor string) (any, error) {
	e, err := a.accessEntry(r.URL.Query().Get("list"), r.URL.Query().Get("network"))
	if err != nil {
		return nil, err
	}
	if err := a.o.Access.Remove(r.Context(), e.List, e.Network); err != nil {
		return nil, accessError(err)
	}
	a.record(r.Context(), actor, "access.remove", e.List+"|"+e.Network.String(), map[string]any{"list": e.List, "network": e.Network.String()})
	return map[string]any{"removed": true, "list": e.List, "network": e.Network.String()}, nil
}

func (a *API) accessEntry(list, network string) (access.Entry, error) {
	if a.o.Access == nil {
		return access.Entry{}, errorf(http.StatusNotFound, "no access lists")
	}
	l, err := access.ParseList(list)
	if err != nil {
		return access.Entry{}, errorf(http.StatusBadRequest, "%v", err)
	}
	p, err := config.ParseNetwork(network)
	if err != nil {
		return access.Entry{}, errorf(http.StatusBadRequest, "network: %v", err)
	}
	return access.Entry{List: l, Network: p}, nil
}

func accessError(err error) error {
	switch {
	case errors.Is(err, access.ErrNotFound):
		return errorf(http.StatusNotFound, "%v", err)
	case errors.Is(err, access.ErrFromFile), errors.Is(err, access.ErrFull):
		return errorf(http.StatusConflict, "%v", err)
	}
	return errorf(http.StatusBadRequest, "%v", err)
}
