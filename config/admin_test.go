package config

import (
	"strings"
	"testing"
)

func TestAdminAndAlarms(t *testing.T) {
	t.Parallel()
	good := `
server:
  admin:
    tokens: [{name: ops, sha256: "` + strings.Repeat("AB", 32) + `"}]
    hosts: [Admin.Example.com., floodgate-admin]
plans:
  - name: basic
    quota: {limit: 10, period: DAY}
    alarms: {webhook: "http://127.0.0.1:9/hook", secret_file: hook.secret}
`
	f, err := Parse("/etc/fg/p.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Server.Admin.Tokens[0].SHA256; got != strings.Repeat("ab", 32) {
		t.Errorf("token sha256 %q, want lower case", got)
	}
	if got := f.Server.Admin.Hosts; len(got) != 2 || got[0] != "admin.example.com" || got[1] != "floodgate-admin" {
		t.Errorf("admin hosts %q, want lower case without the final dot", got)
	}
	a := f.Plans[0].Alarms
	if len(a.Thresholds) != 2 || a.Thresholds[0] != 80 || a.Thresholds[1] != 100 || a.SecretPath != "/etc/fg/hook.secret" {
		t.Errorf("alarms %+v", a)
	}

	bad := `
server:
  admin:
    tokens: [{name: "", sha256: "xyz"}]
    tls_cert: c.pem
    hosts: ["admin.example.com:9090", "http://x"]
plans:
  - name: basic
    rate: 5
    alarms: {thresholds: [0, 120], webhook: "ftp://x"}
`
	_, err = Parse("p.yaml", []byte(bad))
	if err == nil {
		t.Fatal("bad admin and alarm settings accepted")
	}
	for _, want := range []string{
		"p.yaml:4:21: server.admin.tokens[0].name: a token needs a name",
		"server.admin.tokens[0].sha256: want the 64 hex digits",
		"server.admin.tls_cert: tls_cert and tls_key go together",
		`server.admin.hosts[0]: "admin.example.com:9090" is not a host name`,
		`server.admin.hosts[1]: "http://x" is not a host name`,
		"plans[0].alarms: alarms need a quota",
		"plans[0].alarms.thresholds[1]: a threshold is a percentage from 1 to 100, got 120",
		"plans[0].alarms.webhook: want an http:// or https:// URL",
		"plans[0].alarms.secret_file: a webhook needs secret_file",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
}

// TestWebhookTokenNotShown: a webhook URL the file gets wrong is refused
// without its path or query, which may hold the receiver's token.
func TestWebhookTokenNotShown(t *testing.T) {
	for _, hook := range []string{"hooks.example.com/services/T0/B0/s3cretT0ken", "ftp://hooks.example.com/s3cretT0ken",
		"https://hooks.example.com/services/s3cretT0ken\\u007f", "http:///hook?token=s3cretT0ken"} {
		_, err := Parse("p.yaml", []byte(`
routes: [{name: r, match: {paths: ["/**"]}, upstream: none}]
plans:
  - name: basic
    quota: {limit: 10, period: DAY}
    alarms: {thresholds: [80], webhook: "`+hook+`", secret_file: s}
`))
		if err == nil || !strings.Contains(err.Error(), "plans[0].alarms.webhook: want an http:// or https:// URL") {
			t.Errorf("webhook %q: %v, want it refused", hook, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("webhook %q: the error shows its token: %v", hook, err)
		}
	}
}
