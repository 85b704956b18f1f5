package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// program returns the path of an installed program; without it the test
// skips, or fails in CI (CI set), where scripts/test.sh installs it.
func program(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing (Debian package %s; scripts/test.sh installs it)", name, pkg)
		}
		t.Skipf("%s is missing (Debian package %s; scripts/test.sh installs it)", name, pkg)
	}
	return p
}

// TestAlertRules checks the alert rules with promtool (check rules), runs
// their unit tests (test rules), and checks that every alert has a case
// where it fires and one where it does not.
func TestAlertRules(t *testing.T) {
	promtool := program(t, "promtool", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "tests.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "observability"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, "observability/alerts.yaml", &rules)
	readYAML(t, "observability/tests.yaml", &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: tests.yaml has a case where it fires: %v, one where it does not: %v", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	if n < 5 {
		t.Errorf("%d alerts", n)
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
	} `json:"panels"`
}

// dashboardQueries are the queries of every panel of the dashboard, with
// Grafana's variables replaced as Grafana would for a 1 s scrape interval
// and every job.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("observability/floodgate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("$__rate_interval", "15s", "$job", ".+")
	qs := map[string]string{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs[p.Title+" "+tg.RefID] = r.Replace(tg.Expr)
		}
	}
	return qs
}

// TestDashboardQueriesReturnData starts a real Prometheus scraping two real
// floodgate serve every second, one on the embedded store and one on a
// real Redis, sends them traffic that every panel is about (passes, 429s,
// 403s, a plan's quota with its alarms), and asks Prometheus every query of
// the dashboard: each must return data.
func TestDashboardQueriesReturnData(t *testing.T) {
	promBin := program(t, "prometheus", "prometheus")
	redisBin := program(t, "redis-server", "redis-server")
	bin := binary(t)
	dir := t.TempDir()

	// The school example, with alarms on the trial plan's quota of 3.
	school, err := os.ReadFile("../examples/school.yaml")
	if err != nil {
		t.Fatal(err)
	}
	trial := "  - name: trial               # lesson 07: a quota of 3 a day\n"
	if !strings.Contains(string(school), trial) {
		t.Fatalf("examples/school.yaml has no line %q", trial)
	}
	policy := strings.Replace(string(school), trial, trial+"    alarms: {thresholds: [60, 100]}\n", 1)
	policyPath := filepath.Join(dir, "school.yaml")
	writeFile(t, policyPath, policy)
	secret, err := os.ReadFile("../examples/demo-jwt-secret.txt")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "demo-jwt-secret.txt"), string(secret))

	redisPort := freePort(t)
	startProcess(t, "redis-server", redisBin, []string{"--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, nil)
	waitRedis(t, "127.0.0.1:"+redisPort)
	storeFile := filepath.Join(dir, "store-url")
	writeFile(t, storeFile, "redis://127.0.0.1:"+redisPort+"/0")

	var gateways, targets []string
	for _, extra := range [][]string{nil, {"--store-file", storeFile}} {
		args := append([]string{"serve", "--config", policyPath, "--demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0", "--log-level", "error"}, extra...)
		lines := startProcess(t, "floodgate serve", bin, args, regexp.MustCompile(`admin on `))
		gw, metrics := "", ""
		for _, l := range lines {
			if m := regexp.MustCompile(`gateway on (http://\S+)`).FindStringSubmatch(l); m != nil {
				gw = m[1]
			}
			// /metrics is on the ops listener where floodgate has one,
			// else on the admin listener.
			if m := regexp.MustCompile(`(?:ops|admin) on (http://\S+)`).FindStringSubmatch(l); m != nil && (metrics == "" || strings.Contains(l, "ops on")) {
				metrics = m[1]
			}
		}
		if gw == "" || metrics == "" {
			t.Fatalf("floodgate serve said %q", lines)
		}
		gateways = append(gateways, gw)
		u, _ := url.Parse(metrics)
		targets = append(targets, u.Host)
	}

	promPort := freePort(t)
	promCfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, promCfg, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: floodgate
    static_configs:
      - targets: ["%s"]
`, strings.Join(targets, `", "`)))
	startProcess(t, "prometheus", promBin, []string{"--config.file=" + promCfg, "--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=127.0.0.1:" + promPort, "--log.level=warn"}, nil)
	prom := "http://127.0.0.1:" + promPort
	waitHTTP(t, prom+"/-/ready")

	// Traffic, bounded: a few rounds a second for up to 30 s, until every
	// query answers.
	client := &http.Client{Timeout: 5 * time.Second}
	send := func(gw, path string, hdr ...string) {
		req, _ := http.NewRequest(http.MethodGet, gw+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	queries := dashboardQueries(t)
	empty := map[string]string{}
	deadline := time.Now().Add(30 * time.Second)
	for round := 0; ; round++ {
		for _, gw := range gateways {
			for range 8 {
				send(gw, "/students/9")
			}
			send(gw, "/partner/students/9", "x-api-key", "key-nobody")
			send(gw, "/partner/students/9", "x-api-key", "key-trial")
		}
		if round%4 == 3 {
			clear(empty)
			for name, q := range queries {
				if n, err := promQuery(client, prom, q); err != nil || n == 0 {
					empty[name] = fmt.Sprintf("%s: %d series, %v", q, n, err)
				}
			}
			if len(empty) == 0 || time.Now().After(deadline) {
				break
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	names := make([]string, 0, len(empty))
	for n := range empty {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		t.Errorf("panel %s returns no data: %s", n, empty[n])
	}
	t.Logf("%d queries of the dashboard returned data", len(queries)-len(empty))
}

// promQuery asks Prometheus an instant query and returns the number of
// series of its answer.
func promQuery(c *http.Client, prom, q string) (int, error) {
	resp, err := c.Get(prom + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("prometheus: %s", r.Error)
	}
	return len(r.Data.Result), nil
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// startProcess starts a program, stops it (SIGTERM, then SIGKILL, by its
// PID) when the test ends, and, when ready is set, returns its standard
// output's lines up to the first that matches ready.
func startProcess(t *testing.T, name, bin string, args []string, ready *regexp.Regexp) []string {
	t.Helper()
	return startProcessEnv(t, name, bin, args, nil, ready)
}

// startProcessEnv is startProcess with the environment env (nil: this
// process's).
func startProcessEnv(t *testing.T, name, bin string, args, env []string, ready *regexp.Regexp) []string {
	t.Helper()
	lines, _ := startProcessStop(t, name, bin, args, env, ready)
	return lines
}

// startProcessStop is startProcessEnv, and returns as well a function that
// stops the process (SIGTERM, then SIGKILL, by its PID) and waits for it
// to end, before the test ends.
func startProcessStop(t *testing.T, name, bin string, args, env []string, ready *regexp.Regexp) ([]string, func()) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads any more
			}
		}
	}()
	if ready == nil {
		return nil, stop
	}
	var got []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-lines:
			got = append(got, l)
			if ready.MatchString(l) {
				return got, stop
			}
		case <-done:
			t.Fatalf("%s exited: %s\n%s", name, strings.Join(got, "\n"), stderr.String())
		case <-timeout:
			t.Fatalf("%s did not start: %s\n%s", name, strings.Join(got, "\n"), stderr.String())
		}
	}
}

// waitRedis waits until the Redis server at addr answers PING.
func waitRedis(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redis-server on %s does not answer", addr)
}

// waitHTTP waits until u answers 200.
func waitHTTP(t *testing.T, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200", u)
}
