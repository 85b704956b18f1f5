package alarm

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrRefusedTarget is the error of a webhook whose address may not be
// reached: a link-local or cloud metadata address (unless its plan allows
// link-local targets), or one of Options.Deny.
var ErrRefusedTarget = errors.New("alarm: webhook target refused")

// metadataAddrs are cloud metadata services outside the link-local ranges:
// AWS's over IPv6 (the instance metadata service, EKS Pod Identity) and
// Alibaba Cloud's.
var metadataAddrs = []netip.Prefix{
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("fd00:ec2::23/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
}

// metadataNames are host names of cloud metadata services, refused as
// link-local targets are whatever they resolve to here.
var metadataNames = map[string]bool{
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"metadata":                   true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
}

// guard decides which addresses a webhook may reach.
type guard struct {
	allowLinkLocal bool
	deny           []netip.Prefix
}

// check refuses ip when the guard does.
func (g guard) check(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	for _, p := range g.deny {
		if p.Contains(ip) {
			return fmt.Errorf("%w: %s is a denied address", ErrRefusedTarget, ip)
		}
	}
	if g.allowLinkLocal {
		return nil
	}
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
		return fmt.Errorf("%w: %s is a link-local address (where cloud metadata services answer); "+
			"the plan must allow link-local targets explicitly", ErrRefusedTarget, ip)
	}
	for _, p := range metadataAddrs {
		if p.Contains(ip) {
			return fmt.Errorf("%w: %s is a cloud metadata address; the plan must allow link-local targets explicitly",
				ErrRefusedTarget, ip)
		}
	}
	return nil
}

// control is the dialer's check of each address it is about to connect
// to, after name resolution: a name that resolves (or is made to resolve,
// later) to a refused address is refused before any packet is sent.
func (g guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: address %q", ErrRefusedTarget, address)
	}
	return g.check(ap.Addr())
}

// checkURL validates a webhook URL before any delivery: an http or https
// URL with a host that is not a refused address or a metadata service's
// name. Names are not resolved here; each connection's address is checked
// when it is dialled.
func (g guard) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a token
		}
		return fmt.Errorf("alarm: webhook: not a URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("alarm: webhook: want an http:// or https:// URL, got %s", WebhookName(raw))
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		return g.check(ip)
	}
	if !g.allowLinkLocal && metadataNames[strings.TrimSuffix(strings.ToLower(host), ".")] {
		return fmt.Errorf("%w: %s is a cloud metadata service; the plan must allow link-local targets explicitly",
			ErrRefusedTarget, host)
	}
	return nil
}

// WebhookName is how messages and logs show the webhook URL raw: its
// scheme and host, and "/…" for a path or query, which may carry the
// receiver's token (Slack's and Discord's webhooks hold theirs in the
// path); a URL that does not parse, or has no host, is shown as
// "a webhook URL that is not http(s)://host/...".
func WebhookName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "a webhook URL that is not http(s)://host/..."
	}
	name := u.Scheme + "://" + u.Host
	if u.Opaque != "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		name += "/…"
	}
	return name
}

// CheckWebhook reports whether raw may be a webhook: an http:// or
// https:// URL whose host is neither a link-local address (169.254.0.0/16,
// fe80::/10) nor a cloud metadata service (169.254.169.254,
// fd00:ec2::254, metadata.google.internal, ...), unless allowLinkLocal.
// Names are checked again at each connection, on the addresses they
// resolve to.
func CheckWebhook(raw string, allowLinkLocal bool) error {
	return guard{allowLinkLocal: allowLinkLocal}.checkURL(raw)
}

// maxResponseHeader bounds the header of a webhook's answer: a receiver
// answers with a status and a few short fields, and net/http's default
// bound (10 MiB) would let a hostile or broken one make each delivery
// under way read and hold megabytes. An answer over it fails the attempt.
const maxResponseHeader = 64 << 10

// maxResponseBody is the part of a webhook's answer body that is read (and
// discarded) so that its connection can be reused; the rest is not read.
const maxResponseBody = 4 << 10

// newClient is the webhooks' HTTP client for targets that g allows: no
// proxy from the environment, no redirects followed (the response of a
// redirect is returned), every address checked as it is dialled, and an
// answer's header bounded by maxResponseHeader.
func newClient(g guard, timeout time.Duration, r *net.Resolver) *http.Client {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Resolver: r, Control: g.control}
	tr := &http.Transport{
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           16,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeader,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
