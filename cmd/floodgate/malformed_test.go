package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// smuggled is the request some malformed requests hide after their body:
// whatever an engine makes of the framing, it never reaches the upstream
// as a request of its own on one engine and not on the other.
const smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"

// malformed is one request of the corpus: a name (as docs/engines.md
// lists it) and the bytes sent on a new connection.
type malformed struct{ name, raw string }

// malformedCorpus is what broken clients and request smugglers send, by
// class: request lines, field syntax, Host, Content-Length,
// Transfer-Encoding, chunked bodies and their trailers, and a few
// well-formed requests for contrast.
func malformedCorpus() []malformed {
	var cs []malformed
	add := func(name, raw string) { cs = append(cs, malformed{name, raw}) }
	get := func(head string) string { return head + "\r\nHost: x\r\n\r\n" }

	// Request lines.
	add("a plain GET", get("GET /plain HTTP/1.1"))
	add("HTTP/1.0", "GET /old HTTP/1.0\r\n\r\n")
	add("HTTP/1.0 kept alive", "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /old2 HTTP/1.0\r\n\r\n")
	add("HEAD", get("HEAD /head HTTP/1.1"))
	add("a lowercase method", get("get /lower HTTP/1.1"))
	add("an unknown method", get("FROB /frob HTTP/1.1"))
	add("TRACE", get("TRACE /trace HTTP/1.1"))
	add("a method of 64 bytes", get(strings.Repeat("M", 64)+" /m HTTP/1.1"))
	add("a method of 10,000 bytes", get(strings.Repeat("M", 10000)+" /m HTTP/1.1"))
	add("a method with a bracket", get("G(ET /m HTTP/1.1"))
	add("a method with a NUL", get("GET\x00 /m HTTP/1.1"))
	add("CONNECT to an authority", get("CONNECT example.com:443 HTTP/1.1"))
	add("CONNECT to a path", get("CONNECT /c HTTP/1.1"))
	add("OPTIONS *", get("OPTIONS * HTTP/1.1"))
	add("GET *", get("GET * HTTP/1.1"))
	add("PRI * on HTTP/1.1", get("PRI * HTTP/1.1"))
	add("two spaces after the method", get("GET  /two HTTP/1.1"))
	add("a space after the version", get("GET /sp HTTP/1.1 "))
	add("tabs between the parts", get("GET\t/tab\tHTTP/1.1"))
	add("a space before the method", get(" GET /lead HTTP/1.1"))
	add("an empty line before the request", "\r\n"+get("GET /empty-first HTTP/1.1"))
	add("no version (HTTP/0.9)", "GET /nine\r\n\r\n")
	add("HTTP/0.9 spelled out", get("GET /nine HTTP/0.9"))
	add("a lowercase version", get("GET /v http/1.1"))
	add("HTTP/1.2", get("GET /v HTTP/1.2"))
	add("HTTP/1.2 with a chunked body", "POST /v HTTP/1.2\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	add("HTTP/1.01", get("GET /v HTTP/1.01"))
	add("HTTP/01.1", get("GET /v HTTP/01.1"))
	add("HTTP/1", get("GET /v HTTP/1"))
	add("HTTP/2.0 in a request line", get("GET /v HTTP/2.0"))
	add("HTTP/3.0 in a request line", get("GET /v HTTP/3.0"))
	add("another protocol name", get("GET /v FOO/1.1"))
	add("a space in the target", get("GET /a b HTTP/1.1"))
	add("a target without a slash", get("GET rel HTTP/1.1"))
	add("a target of two slashes", get("GET //dbl HTTP/1.1"))
	add("a fragment in the target", get("GET /frag#x HTTP/1.1"))
	add("a bad percent escape", get("GET /%zz HTTP/1.1"))
	add("a bad percent escape in the query", get("GET /q?x=%zz HTTP/1.1"))
	add("a cut percent escape at the end", get("GET /q?x=%4 HTTP/1.1"))
	add("a fragment after the query", get("GET /q?x=1#y HTTP/1.1"))
	add("a fragment that climbs out", get("GET /public#/../admin HTTP/1.1"))
	add("an escaped NUL", get("GET /%00 HTTP/1.1"))
	add("an escaped backslash", get("GET /a%5cb HTTP/1.1"))
	add("a DEL in the target", get("GET /\x7f HTTP/1.1"))
	add("a control byte in the target", get("GET /\x01 HTTP/1.1"))
	add("raw UTF-8 in the target", get("GET /\xc3\xa9 HTTP/1.1"))
	add("a target of 10 KB", get("GET /"+strings.Repeat("p", 10<<10)+" HTTP/1.1"))
	add("an absolute target", "GET http://other.example/abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an absolute https target", "GET https://other.example/abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an absolute target without a path", "GET http://other.example HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an absolute target with user info", "GET http://u@other.example/abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an absolute target of another scheme", "GET ftp://other.example/abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an absolute target without a host", "GET http:///abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an absolute target with user info and no host", "GET http://u@/abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an absolute target with a port and no host", "GET http://:80/abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("a scheme without an authority", "GET http:/abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an https scheme without an authority", "GET https:abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("another scheme without an authority", "GET x:/abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("an opaque target", "GET x:abs HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	add("a colon in the path", get("GET /a:b HTTP/1.1"))
	add("a URI in the query", get("GET /q?u=http:/y HTTP/1.1"))
	add("an absolute target with an empty Host", "GET http://other.example/abs HTTP/1.1\r\nHost: \r\n\r\n")
	add("an absolute target without Host", "GET http://other.example/abs HTTP/1.1\r\n\r\n")

	// Field syntax.
	add("a space before the colon", "GET /f HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n")
	add("a space before the colon of Host", "GET /f HTTP/1.1\r\nHost : x\r\n\r\n")
	add("a tab before the colon", "GET /f HTTP/1.1\r\nHost: x\r\nX-A\t: b\r\n\r\n")
	add("an empty field name", "GET /f HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n")
	add("a field without a colon", "GET /f HTTP/1.1\r\nHost: x\r\nX-A b\r\n\r\n")
	add("a field name with a space", "GET /f HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n")
	add("a field name with a high byte", "GET /f HTTP/1.1\r\nHost: x\r\nX-\xe9: y\r\n\r\n")
	add("a field name with an underscore", "GET /f HTTP/1.1\r\nHost: x\r\nX_A: y\r\n\r\n")
	add("a NUL in a value", "GET /f HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n")
	add("a control byte in a value", "GET /f HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n")
	add("a DEL in a value", "GET /f HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n")
	add("a bare CR in a value", "GET /f HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n")
	add("high bytes in a value", "GET /f HTTP/1.1\r\nHost: x\r\nX-A: \xe9\xff\r\n\r\n")
	add("a tab in a value", "GET /f HTTP/1.1\r\nHost: x\r\nX-A: a\tb\r\n\r\n")
	add("a folded field", "GET /fold HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n")
	add("a field folded with a tab", "GET /fold HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n")
	add("a fold before the first field", "GET /fold HTTP/1.1\r\n X-A: a\r\nHost: x\r\n\r\n")
	add("a bare LF between fields", "GET /lf HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n")
	add("bare LF line ends", "GET /lf HTTP/1.1\nHost: x\n\n")
	add("a bare LF ending the fields", "GET /lf HTTP/1.1\r\nHost: x\r\n\n")
	add("60 KB of fields", "GET /big HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 60<<10)+"\r\n\r\n")
	add("1 MB of fields", "GET /huge HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 1<<20)+"\r\n\r\n")
	add("500 fields", "GET /many HTTP/1.1\r\nHost: x\r\n"+strings.Repeat("X-M: 1\r\n", 500)+"\r\n")
	add("Expect: 100-continue on HTTP/1.0", "POST /expect HTTP/1.0\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc")
	add("Expect: 100-continue", "POST /expect HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc")
	add("an unknown expectation", "POST /expect HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 3\r\n\r\nabc")
	add("Connection: close", "GET /close HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	add("Connection: keep-alive, close", "GET /close HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n")
	add("Upgrade without Connection", "GET /up HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n")
	add("Connection: upgrade without Upgrade", "GET /up HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n\r\n")
	add("pipelined", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
	add("pipelined after a body", "POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")

	// Host.
	add("no Host", "GET / HTTP/1.1\r\n\r\n")
	add("an empty Host", "GET /h HTTP/1.1\r\nHost: \r\n\r\n")
	add("two Hosts", "GET /h HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
	add("two equal Hosts", "GET /h HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n")
	add("a Host list", "GET /h HTTP/1.1\r\nHost: a, b\r\n\r\n")
	add("a space in Host", "GET /h HTTP/1.1\r\nHost: a b\r\n\r\n")
	add("user info in Host", "GET /h HTTP/1.1\r\nHost: u@a\r\n\r\n")
	add("a slash in Host", "GET /h HTTP/1.1\r\nHost: a/b\r\n\r\n")
	add("a port out of range in Host", "GET /h HTTP/1.1\r\nHost: a:99999\r\n\r\n")
	add("an IPv6 Host", "GET /h HTTP/1.1\r\nHost: [::1]:80\r\n\r\n")
	add("an unclosed IPv6 Host", "GET /h HTTP/1.1\r\nHost: [::1\r\n\r\n")
	add("a DEL in Host", "GET /h HTTP/1.1\r\nHost: a\x7f\r\n\r\n")
	add("a Host of 1 KB", "GET /h HTTP/1.1\r\nHost: "+strings.Repeat("h", 1<<10)+"\r\n\r\n")

	// Content-Length.
	cl := func(name, value, body string) {
		add("Content-Length "+name, "POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: "+value+"\r\n\r\n"+body+smuggled)
	}
	cl("3", "3", "abc")
	cl("with leading zeros", "003", "abc")
	cl("with a plus sign", "+3", "abc")
	cl("negative", "-1", "")
	cl("of minus zero", "-0", "")
	cl("in hex", "0x3", "abc")
	cl("with a decimal point", "3.0", "abc")
	cl("with an exponent", "3e0", "abc")
	cl("empty", "", "")
	cl("with a trailing space", "3 ", "abc")
	cl("with a tab", "\t3", "abc")
	cl("as a list of equal values", "3, 3", "abc")
	cl("as a list of different values", "3, 30", "abc")
	cl("with trailing letters", "3abc", "abc")
	cl("of 20 digits", "99999999999999999999", "")
	cl("of 2^63", "9223372036854775808", "")
	add("two equal Content-Lengths", "POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"+smuggled)
	add("two different Content-Lengths", "POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc"+smuggled)
	add("Content-Length on a GET", "GET /cl HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"+smuggled)
	add("Content-Length 0 with bytes after", "POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nabc\r\n\r\n")
	add("a Content-Length longer than the body", "POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\nabc")
	add("a space before the colon of Content-Length", "POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc"+smuggled)

	// Transfer-Encoding.
	chunked := "3\r\nabc\r\n0\r\n\r\n"
	te := func(name, value string) {
		add("Transfer-Encoding "+name, "POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "+value+"\r\n\r\n"+chunked+smuggled)
	}
	te("chunked", "chunked")
	te("identity", "identity")
	te("identity, chunked", "identity, chunked")
	te("chunked, identity", "chunked, identity")
	te("gzip, chunked", "gzip, chunked")
	te("gzip", "gzip")
	te("Chunked", "Chunked")
	te("CHUNKED", "CHUNKED")
	te("with a trailing space", "chunked ")
	te("with a tab", "\tchunked")
	te("with a parameter", "chunked;q=1")
	te("xchunked", "xchunked")
	te("chunked, chunked", "chunked, chunked")
	te("empty", "")
	te("as a list with an empty member", "chunked,")
	add("two Transfer-Encoding fields", "POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked+smuggled)
	add("Transfer-Encoding identity then chunked", "POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked+smuggled)
	add("Transfer-Encoding and Content-Length", "POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 30\r\n\r\n0\r\n\r\n"+smuggled)
	add("Content-Length and Transfer-Encoding", "POST /te HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked+smuggled)
	add("Transfer-Encoding identity and Content-Length", "POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc"+smuggled)
	add("a space before the colon of Transfer-Encoding", "POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n"+chunked+smuggled)
	add("Transfer_Encoding", "POST /te HTTP/1.1\r\nHost: x\r\nTransfer_Encoding: chunked\r\n\r\n"+chunked+smuggled)
	add("Transfer-Encoding on a GET", "GET /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked+smuggled)
	add("Transfer-Encoding on HTTP/1.0", "POST /te HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked+smuggled)
	add("Transfer-Encoding on HTTP/1.0 kept alive", "POST /te HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0 /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
	add("Transfer-Encoding and Content-Length on HTTP/1.0 kept alive", fmt.Sprintf("POST /te HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled))

	// Chunked bodies.
	body := func(name, chunks string) {
		add("chunks: "+name, "POST /chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+chunks+smuggled)
	}
	body("two", "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
	body("a size with leading zeros", "0003\r\nabc\r\n0\r\n\r\n")
	body("a last size with leading zeros", "3\r\nabc\r\n000\r\n\r\n")
	body("a size of 17 digits", "00000000000000003\r\nabc\r\n0\r\n\r\n")
	body("an uppercase size", "A\r\nabcdefghij\r\n0\r\n\r\n")
	body("a size in 0x", "0x3\r\nabc\r\n0\r\n\r\n")
	body("a size with a trailing space", "3 \r\nabc\r\n0\r\n\r\n")
	body("a size with a leading space", " 3\r\nabc\r\n0\r\n\r\n")
	body("a size with a tab", "3\t\r\nabc\r\n0\r\n\r\n")
	body("a negative size", "-3\r\nabc\r\n0\r\n\r\n")
	body("a size that overflows", "ffffffffffffffffff\r\nabc\r\n0\r\n\r\n")
	body("a bad size", "zz\r\nabc\r\n0\r\n\r\n")
	body("an empty size line", "\r\nabc\r\n0\r\n\r\n")
	body("an extension", "3;name=value\r\nabc\r\n0\r\n\r\n")
	body("a quoted extension", "3;name=\"a b\"\r\nabc\r\n0\r\n\r\n")
	body("an extension without a name", "3;\r\nabc\r\n0\r\n\r\n")
	body("an extension after a space", "3 ;x\r\nabc\r\n0\r\n\r\n")
	body("an extension of 8 KB", "3;x="+strings.Repeat("e", 8<<10)+"\r\nabc\r\n0\r\n\r\n")
	body("a bare LF after the size", "3\nabc\r\n0\r\n\r\n")
	body("a bare LF after the data", "3\r\nabc\n0\r\n\r\n")
	body("a bare CR after the data", "3\r\nabc\r0\r\n\r\n")
	body("no line end after the data", "3\r\nabcX0\r\n\r\n")
	body("more data than the size", "2\r\nabc\r\n0\r\n\r\n")
	body("a bare LF ending the body", "3\r\nabc\r\n0\n\n")
	body("a trailer", "3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n")
	body("a Content-Length trailer", "3\r\nabc\r\n0\r\nContent-Length: 5\r\n\r\n")
	body("a Transfer-Encoding trailer", "3\r\nabc\r\n0\r\nTransfer-Encoding: chunked\r\n\r\n")
	body("a Host trailer", "3\r\nabc\r\n0\r\nHost: evil\r\n\r\n")
	body("a trailer without a colon", "3\r\nabc\r\n0\r\nbad trailer\r\n\r\n")
	body("a trailer with a space before the colon", "3\r\nabc\r\n0\r\nX-T : 1\r\n\r\n")
	body("a folded trailer", "3\r\nabc\r\n0\r\nX-T: 1\r\n 2\r\n\r\n")
	body("a trailer with a control byte", "3\r\nabc\r\n0\r\nX-T: a\x01b\r\n\r\n")
	body("a trailer of 70 KB", "3\r\nabc\r\n0\r\nX-T: "+strings.Repeat("t", 70<<10)+"\r\n\r\n")
	add("chunks: cut short", "POST /chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
	add("chunks: a size larger than what comes", "POST /chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n100\r\nabc\r\n")
	add("chunks: a Trailer field naming Host", "POST /chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: Host\r\n\r\n3\r\nabc\r\n0\r\n\r\n"+smuggled)
	add("chunks: a Trailer field naming Content-Length", "POST /chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n3\r\nabc\r\n0\r\n\r\n"+smuggled)
	add("a Trailer field without a chunked body", "POST /cl HTTP/1.1\r\nHost: x\r\nTrailer: Host\r\nContent-Length: 3\r\n\r\nabc")
	add("chunks: a trailer declared", "POST /chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"+smuggled)
	return cs
}

// rawOutcome is what one engine made of one malformed request: its
// answers, whether it closed the connection after them, and what its
// upstream got.
type rawOutcome struct {
	statuses []int
	closed   bool
	upstream []string
}

// String renders an outcome as docs/engines.md lists it: the statuses
// ("no answer"), ", closed" when the gateway closed the connection, then
// what reached the upstream.
func (o rawOutcome) String() string {
	var b strings.Builder
	if len(o.statuses) == 0 {
		b.WriteString("no answer")
	}
	for i, s := range o.statuses {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, s)
	}
	if o.closed {
		b.WriteString(", closed")
	}
	for _, u := range o.upstream {
		b.WriteString("; upstream: " + u)
	}
	return b.String()
}

// desync reports whether two engines framed a request differently: one
// forwarded as a request of its own what the other forwarded inside a
// body, or both forwarded the request with different bodies.
func desync(a, b rawOutcome) bool {
	asRequest := func(o rawOutcome) bool {
		return slices.ContainsFunc(o.upstream, func(u string) bool { return strings.HasPrefix(u, "GET /smuggled") })
	}
	inBody := func(o rawOutcome) bool {
		return slices.ContainsFunc(o.upstream, func(u string) bool { return strings.Contains(u, `"`) && strings.Contains(u, "GET /smuggled") })
	}
	if asRequest(a) && inBody(b) || asRequest(b) && inBody(a) {
		return true
	}
	if len(a.upstream) == 0 || len(b.upstream) == 0 {
		return false
	}
	ra, rb := a.upstream[0], b.upstream[0]
	name := func(r string) string {
		m, p, _ := strings.Cut(r, " ")
		p, _, _ = strings.Cut(p, " ")
		return m + " " + p
	}
	return name(ra) == name(rb) && ra != rb
}

// sourcedUpstream is a real upstream that files each request it gets under
// the client address the gateway forwards (the last hop of
// X-Forwarded-For): each malformed request is sent from an address of its
// own, so the requests can be sent at once and what each one caused told
// apart.
type sourcedUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string][]string
}

func newSourcedUpstream(t *testing.T) *sourcedUpstream {
	t.Helper()
	u := &sourcedUpstream{seen: map[string][]string{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return // a body broken off is not a request
		}
		hops := strings.Split(r.Header.Get("X-Forwarded-For"), ",")
		from := strings.TrimSpace(hops[len(hops)-1])
		rec := r.Method + " " + r.URL.Path
		if len(b) > 0 {
			rec += fmt.Sprintf(" %q", b)
		}
		if h := r.Header.Get("X-Forwarded-Host"); h != "x" {
			rec += " (X-Forwarded-Host " + h + ")"
		}
		u.mu.Lock()
		u.seen[from] = append(u.seen[from], rec)
		u.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *sourcedUpstream) take(from string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.seen[from]
	delete(u.seen, from)
	return s
}

// rawFrom sends raw on a new connection from the loopback address from and
// reads the answers until the gateway closes the connection or nothing
// more comes for quiet.
func rawFrom(addr, from, raw string, quiet time.Duration) (statuses []int, closed bool, err error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil && len(raw) < 64<<10 {
		return nil, false, err // a long request may be cut off by an early answer
	}
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(quiet))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, !(errors.As(err, &ne) && ne.Timeout()), nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
}

// engineDifference is a row of the table in docs/engines.md of the
// malformed requests the engines answer differently.
type engineDifference struct{ fast, netHTTP string }

// documentedDifferences reads that table: between the markers, rows of
// | request | engine: fast | engine: net/http | why |.
func documentedDifferences(t *testing.T) map[string]engineDifference {
	t.Helper()
	b, err := os.ReadFile("../../docs/engines.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- malformed-differences -->")
	table, _, ok2 := strings.Cut(rest, "<!-- /malformed-differences -->")
	if !ok || !ok2 {
		t.Fatal("docs/engines.md has no table between <!-- malformed-differences --> and <!-- /malformed-differences -->")
	}
	out := map[string]engineDifference{}
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) < 5 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "request" {
			continue
		}
		cell := func(i int) string { return strings.Trim(strings.TrimSpace(cells[i]), "`") }
		out[cell(1)] = engineDifference{fast: cell(2), netHTTP: cell(3)}
	}
	return out
}

// TestEnginesAgreeOnMalformedRequests sends every request of the malformed
// corpus to floodgate serve on each engine (each request from a loopback
// address of its own, so that what reached the upstream is told apart)
// and compares what each engine made of it: the answers, whether the
// connection was closed, and what the upstream got. Every difference must
// be listed, outcome for outcome, in docs/engines.md, every row listed
// there must still be one, and no difference may be one of framing (a
// request one engine forwards inside a body and the other on its own).
func TestEnginesAgreeOnMalformedRequests(t *testing.T) {
	t.Parallel() // it waits out quiet periods, not on the CPU
	up := newSourcedUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	addrs := map[string]string{}
	for _, e := range engines {
		gw, _, _, _ := startServe(t, "--engine", e, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
		addrs[e] = strings.TrimPrefix(gw, "http://")
	}
	corpus := malformedCorpus()
	seen := map[string]bool{}
	for _, c := range corpus {
		if seen[c.name] {
			t.Fatalf("two requests of the corpus are named %q", c.name)
		}
		seen[c.name] = true
	}
	// exchange sends case i to engine e from an address of its own.
	exchange := func(i int, e string, quiet time.Duration) (rawOutcome, error) {
		from := fmt.Sprintf("127.1.%d.%d", i/200, 1+i%200)
		if e != "fast" {
			from = fmt.Sprintf("127.2.%d.%d", i/200, 1+i%200)
		}
		st, closed, err := rawFrom(addrs[e], from, corpus[i].raw, quiet)
		if err != nil {
			return rawOutcome{}, err
		}
		// The upstream has answered what the gateway forwarded before the
		// gateway answered the client.
		return rawOutcome{statuses: st, closed: closed, upstream: up.take(from)}, nil
	}
	// run sends the cases at once (a bounded number at a time) to both
	// engines and returns what each made of them.
	run := func(cases []int, quiet time.Duration) map[int]map[string]rawOutcome {
		out := map[int]map[string]rawOutcome{}
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		sem := make(chan struct{}, 24)
		for _, i := range cases {
			mu.Lock() // the goroutines of the cases before write into out
			out[i] = map[string]rawOutcome{}
			mu.Unlock()
			for _, e := range engines {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					o, err := exchange(i, e, quiet)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, fmt.Errorf("%s on %s: %w", corpus[i].name, e, err))
					}
					out[i][e] = o
				}()
			}
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatal(errors.Join(errs...))
		}
		return out
	}
	all := make([]int, len(corpus))
	for i := range all {
		all[i] = i
	}
	outcomes := run(all, 2*time.Second)
	// A loaded machine may have kept an answer past the quiet time: a
	// difference is confirmed with more patience.
	var again []int
	for i := range corpus {
		if outcomes[i]["fast"].String() != outcomes[i]["net/http"].String() {
			again = append(again, i)
		}
	}
	maps.Copy(outcomes, run(again, 6*time.Second))
	docs := documentedDifferences(t)
	differ := 0
	for i, c := range corpus {
		fast, slow := outcomes[i]["fast"], outcomes[i]["net/http"]
		doc, listed := docs[c.name]
		delete(docs, c.name)
		switch {
		case desync(fast, slow):
			t.Errorf("%s: the engines frame it differently: fast %s; net/http %s", c.name, fast, slow)
		case fast.String() == slow.String() && listed:
			t.Errorf("%s: listed in docs/engines.md as a difference, but both engines answer %s", c.name, fast)
		case fast.String() == slow.String():
		case !listed:
			t.Errorf("%s: the engines differ and docs/engines.md does not say so:\n| %s | %s | %s | |", c.name, c.name, fast, slow)
		case doc.fast != fast.String() || doc.netHTTP != slow.String():
			t.Errorf("%s: docs/engines.md lists fast %q, net/http %q; they answer\n| %s | %s | %s | |", c.name, doc.fast, doc.netHTTP, c.name, fast, slow)
		}
		if fast.String() != slow.String() {
			differ++
		}
	}
	for name := range docs {
		t.Errorf("docs/engines.md lists %q, which is not in the corpus", name)
	}
	t.Logf("the engines differ on %d of %d malformed requests", differ, len(corpus))
	if os.Getenv("MALFORMED_LOG") != "" {
		for i, c := range corpus {
			t.Logf("%-50s fast: %s | net/http: %s", c.name, outcomes[i]["fast"], outcomes[i]["net/http"])
		}
	}
}
