package gateway

import (
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

// AccessLogger receives one record per request, rejected ones included;
// *accesslog.Logger is one. Log is called on the request's goroutine once
// the answer is written; it must not keep the record.
type AccessLogger interface {
	Log(r *accesslog.Record)
}

// statusClientGone is the status logged for a request whose client went
// away before it was answered (NGINX logs the same).
const statusClientGone = 499

// accessState is what the access log keeps of one request.
type accessState struct {
	start time.Time
	rec   accesslog.Record
}

// logAccess writes the request's record: who sent it, what the limits
// decided and how it was answered.
func (g *Gateway) logAccess(x Exchange, st *Flow) {
	a := &st.access
	m, res, r := &st.m, &st.res, &st.view
	status, bytes := x.Answered()
	rec := &a.rec
	*rec = accesslog.Record{
		Time:     a.start,
		ClientIP: m.ClientIP,
		Method:   r.Method,
		Host:     r.Host,
		Path:     r.Path,
		Proto:    r.Proto,
		Status:   status,
		Bytes:    bytes,
		Key:      m.KeyID,
		User:     m.User,
		Route:    m.Route,
	}
	if !rec.ClientIP.IsValid() {
		// No address names the client (a trusted proxy forwarded one that
		// cannot be read): the log says whom the limits counted, and
		// which peer sent it.
		rec.ClientIP, rec.ClientKey = r.Peer, m.ClientKey
	}
	if o := st.ovl.o; m.Overload != nil && o != nil {
		rec.Tier, rec.Shed = o.Tiers[st.ovl.tier], st.ovl.shed
	}
	if st.screened {
		rec.Screened = accesslog.ScreenedBanned
		if status == http.StatusForbidden {
			rec.Screened = accesslog.ScreenedDenied
		}
	}
	if rec.Status == 0 {
		rec.Status = http.StatusOK
		if x.Context().Err() != nil || rec.Shed == ShedClientGone {
			rec.Status = statusClientGone
		}
	}
	// A request the gatekeeper refused was decided by no limit, even one
	// refused as a banned user after the limits that need no user were
	// looked at (which charged nothing).
	if hits := st.req.Hits; len(hits) > 0 && !st.screened {
		switch {
		case res.Allowed:
			rec.Decision = accesslog.Allow
		case res.Binding >= 0:
			rec.Decision = accesslog.Deny
			rec.RetryAfter = res.RetryAfter
		default:
			rec.Decision = accesslog.Error
		}
		if res.Binding >= 0 && res.Binding < len(hits) {
			rec.Limit = hits[res.Binding].Rule.Name()
		}
		// The instant the store decided at, when it says, rather than the
		// arrival: a replay of the log then decides at the same instant,
		// and ends the request (releases, charges counted by outcome)
		// at Time+Duration, after the gateway did.
		for i := range res.Decisions {
			if at := res.Decisions[i].At; at > 0 {
				rec.Time = time.Unix(0, at)
				break
			}
		}
		rec.Degraded = res.Degraded.String()
	}
	rec.Referer = r.header("Referer")
	rec.UserAgent = r.header("User-Agent")
	// On this process's clock alone, from the arrival: the store's
	// instant above is on the store's clock, which may be off from ours.
	rec.Duration = time.Since(a.start)
	g.alog.Log(rec)
	*rec = accesslog.Record{}
}

// accessWriter counts the status and the body bytes of an answer.
type accessWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (a *accessWriter) WriteHeader(code int) {
	if a.status == 0 && code >= 200 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *accessWriter) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	n, err := a.ResponseWriter.Write(b)
	a.bytes += int64(n)
	return n, err
}

// Flush passes flushes through for streaming responses.
func (a *accessWriter) Flush() {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (a *accessWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// LogRefused writes the record of a request an engine answered before its
// request path (Preflight's answers, and each engine's own refusals of a
// request it read but will not serve): the connection's peer as its
// client, no route and no decision, its path the target up to its query.
// start is when the request arrived; nothing is written without an access
// log.
func (g *Gateway) LogRefused(peer netip.Addr, method, target, host, proto string, status int, bytes int64, start time.Time) {
	if g.alog == nil {
		return
	}
	rec := accesslog.Record{
		Time: start, ClientIP: peer, Method: method, Host: host, Path: targetLogPath(target), Proto: proto,
		Status: status, Bytes: bytes, Duration: time.Since(start),
	}
	g.alog.Log(&rec)
}

// targetLogPath is the part of a request target an access record keeps:
// an absolute form's path (OriginPath), and nothing from the query on (it
// may carry secrets). It stays as sent, escapes and all: the target of a
// refused request need not decode.
func targetLogPath(target string) string {
	target = OriginPath(target)
	if i := strings.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	return target
}
