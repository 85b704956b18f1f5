package alarm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/promtest"
)

// refusedTargets are link-local and metadata webhooks, refused unless the
// plan allows link-local targets.
var refusedTargets = []string{
	"http://169.254.169.254/latest/meta-data/",
	"http://169.254.170.2/v2/credentials",
	"https://169.254.1.2:8443/hook",
	"http://[fe80::1]/hook",
	"http://[fe80::1%25eth0]:8080/hook",
	"http://[febf::ffff]/",
	"http://[fd00:ec2::254]/latest/meta-data/",
	"http://[::ffff:169.254.169.254]/",
	"http://100.100.100.200/latest/meta-data/",
	"http://metadata.google.internal/computeMetadata/v1/",
	"http://METADATA.google.internal./computeMetadata/v1/",
	"http://metadata/computeMetadata/v1/",
	"http://metadata.goog/",
}

// TestCheckWebhookRefusesLinkLocalAndMetadata: link-local addresses and
// cloud metadata services (by address or by name) are refused as webhook
// targets unless the plan allows them; loopback, private and public ones
// are not.
func TestCheckWebhookRefusesLinkLocalAndMetadata(t *testing.T) {
	t.Parallel()
	for _, u := range refusedTargets {
		if err := CheckWebhook(u, false); !errors.Is(err, ErrRefusedTarget) {
			t.Errorf("%s: %v, want refused", u, err)
		}
		if err := CheckWebhook(u, true); err != nil {
			t.Errorf("%s, link-local allowed: %v", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:9000/hook", "http://[::1]/", "https://10.0.0.7/hook",
		"https://hooks.example.com/floodgate", "http://169.255.0.1/", "http://[fe00::1]/", "http://[fd00:ec2::255]/"} {
		if err := CheckWebhook(u, false); err != nil {
			t.Errorf("%s: %v, want allowed", u, err)
		}
	}
	for _, u := range []string{"ftp://hooks.example.com/", "http:///path", "hooks.example.com"} {
		if err := CheckWebhook(u, false); err == nil || errors.Is(err, ErrRefusedTarget) {
			t.Errorf("%s: %v, want an invalid URL", u, err)
		}
	}
}

// TestSetPolicyTurnsOffRefusedWebhooks: a plan whose webhook is refused
// keeps its alarms without the webhook, and SetPolicy says which plan;
// allow_link_local (AllowLinkLocal) lets the same target through.
func TestSetPolicyTurnsOffRefusedWebhooks(t *testing.T) {
	t.Parallel()
	p := plansPolicy(t)
	a, err := New(Options{Dedup: NewLocalDedup(), Deny: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	plans := map[string]Plan{
		"slow": {Thresholds: []int{100}, Webhook: "http://169.254.169.254/latest/meta-data/", Secret: []byte("s")},
		"fast": {Thresholds: []int{100}, Webhook: "http://10.9.1.1/hook", Secret: []byte("s"), AllowLinkLocal: true},
	}
	err = a.SetPolicy(p, plans)
	if !errors.Is(err, ErrRefusedTarget) || !strings.Contains(err.Error(), "plan slow") || !strings.Contains(err.Error(), "plan fast") {
		t.Fatalf("SetPolicy: %v, want both plans refused", err)
	}
	if plans["slow"].Webhook == "" {
		t.Error("SetPolicy changed its argument")
	}
	for _, name := range []string{"slow.quota", "fast.quota"} {
		pa := (*a.plans.Load())[name]
		if pa == nil || pa.Webhook != "" || len(pa.Thresholds) != 1 {
			t.Errorf("%s: %+v, want its alarms without the webhook", name, pa)
		}
	}
	plans["slow"] = Plan{Thresholds: []int{100}, Webhook: "http://169.254.169.254/hook", AllowLinkLocal: true}
	delete(plans, "fast")
	if err := a.SetPolicy(p, plans); err != nil {
		t.Fatalf("allowed link-local target: %v", err)
	}
	if pa := (*a.plans.Load())["slow.quota"]; pa.Webhook != "http://169.254.169.254/hook" {
		t.Errorf("allowed link-local target: %+v", pa)
	}
}

// TestDialChecksResolvedAddresses: the address checked is the one dialled,
// after name resolution; link-local and metadata ones are refused there,
// whatever name led to them.
func TestDialChecksResolvedAddresses(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"169.254.169.254:80", "[fe80::1%lo]:80", "[fe80::1]:443", "[fd00:ec2::254]:80",
		"[::ffff:169.254.169.254]:80", "100.100.100.200:80"} {
		if err := (guard{}).control("tcp", addr, nil); !errors.Is(err, ErrRefusedTarget) {
			t.Errorf("dial %s: %v, want refused", addr, err)
		}
		if err := (guard{allowLinkLocal: true}).control("tcp", addr, nil); err != nil {
			t.Errorf("dial %s, link-local allowed: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:80", "[::1]:80", "10.0.0.1:443"} {
		if err := (guard{}).control("tcp", addr, nil); err != nil {
			t.Errorf("dial %s: %v", addr, err)
		}
	}
	deny := guard{allowLinkLocal: true, deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	if err := deny.control("tcp4", "127.0.0.2:80", nil); !errors.Is(err, ErrRefusedTarget) {
		t.Errorf("denied address: %v", err)
	}
}

// TestWebhookNameResolvedToRefusedAddress: a webhook given by name passes
// validation (names are not resolved then), but when the name resolves to
// a refused address the connection is refused as it is dialled, before
// anything is sent, and not retried; another name, resolving to an
// allowed address, is delivered. Names resolve through a DNS server on
// loopback; the refused address is a loopback one that Options.Deny lists,
// so that nothing leaves the machine whatever happens.
func TestWebhookNameResolvedToRefusedAddress(t *testing.T) {
	t.Parallel()
	var reached atomic.Int32
	lis, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 is not a loopback address here: %v", err)
	}
	refused := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	refused.Listener.Close()
	refused.Listener = lis
	refused.Start()
	defer refused.Close()
	var delivered atomic.Int32
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { delivered.Add(1) }))
	defer good.Close()
	_, refusedPort, _ := net.SplitHostPort(lis.Addr().String())
	_, goodPort, _ := net.SplitHostPort(good.Listener.Addr().String())

	dns := startDNS(t, func(name string) []netip.Addr {
		switch name {
		case "hooks.test.":
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}
		case "good.test.":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	var logMu sync.Mutex
	a, err := New(Options{Dedup: NewLocalDedup(), Registerer: reg, Resolver: dns,
		Deny:   []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p := plansPolicy(t)
	if err := a.SetPolicy(p, map[string]Plan{
		"slow": {Thresholds: []int{100}, Webhook: "http://hooks.test:" + refusedPort + "/hook", Secret: []byte("s")},
		"fast": {Thresholds: []int{100}, Webhook: "http://good.test:" + goodPort + "/hook", Secret: []byte("s")},
	}); err != nil {
		t.Fatalf("SetPolicy: %v", err)
	}
	runAlarms(t, a)
	usePlan(a, p, "slow", "key:s", 10)
	usePlan(a, p, "fast", "key:f", 10)
	result := func(r string) float64 {
		return promtest.Value(t, reg, "floodgate_alarm_webhooks_total", promtest.Labels{"result": r})
	}
	waitFor(t, "both webhooks' outcomes", func() bool { return result("delivered")+result("failed") == 2 })
	if result("delivered") != 1 || delivered.Load() != 1 || result("failed") != 1 || reached.Load() != 0 {
		t.Errorf("delivered %v (received %d), failed %v, the refused address reached %d times; want 1, 1, 1, 0",
			result("delivered"), delivered.Load(), result("failed"), reached.Load())
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), "127.0.0.2 is a denied address") || !strings.Contains(logs.String(), "attempts=1") {
		t.Errorf("log %q: want the refusal, after one attempt", logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startDNS serves A and AAAA answers from answer (nil: no such name) on a
// loopback UDP port until the test ends, and returns a resolver that asks
// it.
func startDNS(t *testing.T, answer func(name string) []netip.Addr) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := dnsAnswer(buf[:n], answer); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// dnsAnswer answers one DNS query (RFC 1035): the addresses of its
// question's name of its type, or NXDOMAIN.
func dnsAnswer(q []byte, answer func(name string) []netip.Addr) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	var name strings.Builder
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if l > 63 || i+1+l > len(q) {
			return nil
		}
		name.Write(q[i+1 : i+1+l])
		name.WriteByte('.')
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	question := q[12 : i+5]
	addrs := answer(strings.ToLower(name.String()))
	var rrs [][]byte
	for _, a := range addrs {
		var typ uint16 = 1 // A
		if a.Is6() {
			typ = 28 // AAAA
		}
		if typ != qtype {
			continue
		}
		rdata := a.AsSlice()
		rr := []byte{0xc0, 12} // the question's name
		rr = binary.BigEndian.AppendUint16(rr, typ)
		rr = binary.BigEndian.AppendUint16(rr, 1) // IN
		rr = binary.BigEndian.AppendUint32(rr, 0) // TTL
		rr = binary.BigEndian.AppendUint16(rr, uint16(len(rdata)))
		rrs = append(rrs, append(rr, rdata...))
	}
	flags := uint16(0x8580) // response, authoritative, recursion desired and available
	if addrs == nil {
		flags |= 3 // NXDOMAIN
	}
	out := append([]byte{}, q[0], q[1])
	out = binary.BigEndian.AppendUint16(out, flags)
	out = binary.BigEndian.AppendUint16(out, 1)
	out = binary.BigEndian.AppendUint16(out, uint16(len(rrs)))
	out = append(out, 0, 0, 0, 0)
	out = append(out, question...)
	for _, rr := range rrs {
		out = append(out, rr...)
	}
	return out
}

// TestWebhookSecretsNeverShown: a webhook URL carrying its token in its
// path or query (as Slack's and Discord's do) is shown by its scheme and
// host alone, in the log of a failed delivery (a receiver that drops the
// connection) and in SetPolicy's refusal of a URL that does not parse or
// lacks its scheme.
func TestWebhookSecretsNeverShown(t *testing.T) {
	t.Parallel()
	const secret = "s3cretT0ken"
	dropper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
	}))
	defer dropper.Close()
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	var logMu sync.Mutex
	a, err := New(Options{Dedup: NewLocalDedup(), Registerer: reg, MaxAttempts: 2, Backoff: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p := plansPolicy(t)
	for _, bad := range []string{"hooks.example.com/services/T0/B0/" + secret, "https://hooks.example.com/services/" + secret + "\x7f"} {
		err := a.SetPolicy(p, map[string]Plan{"slow": {Thresholds: []int{100}, Webhook: bad, Secret: []byte("s")}})
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("SetPolicy with webhook %q: %v, want a refusal without its token", bad, err)
		}
	}
	if err := a.SetPolicy(p, map[string]Plan{
		"slow": {Thresholds: []int{100}, Webhook: dropper.URL + "/services/T0/B0/" + secret, Secret: []byte("s")},
		"fast": {Thresholds: []int{100}, Webhook: dropper.URL + "/hook?token=" + secret, Secret: []byte("s")},
	}); err != nil {
		t.Fatalf("SetPolicy: %v", err)
	}
	runAlarms(t, a)
	usePlan(a, p, "slow", "key:s", 10)
	usePlan(a, p, "fast", "key:f", 10)
	waitFor(t, "both webhooks to fail", func() bool {
		return promtest.Value(t, reg, "floodgate_alarm_webhooks_total", promtest.Labels{"result": "failed"}) == 2
	})
	logMu.Lock()
	defer logMu.Unlock()
	out := logs.String()
	if strings.Contains(out, secret) {
		t.Errorf("the log shows a webhook's token:\n%s", out)
	}
	if strings.Count(out, "http://"+dropper.Listener.Addr().String()) != 2 {
		t.Errorf("the log does not name the webhooks' hosts:\n%s", out)
	}
}
