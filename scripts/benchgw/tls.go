package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"
)

// clientTLS is the clients' TLS configuration: the server's CA from
// caFile, serverName asked for, HTTP/1.1.
func clientTLS(caFile, serverName string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate in " + caFile)
	}
	return &tls.Config{RootCAs: roots, ServerName: serverName, NextProtos: []string{"http/1.1"}}, nil
}

// benchTLS measures a TLS server for d with c clients: full handshakes
// (a new connection each, no session resumption, then closed) or HTTP/1.1
// GETs on kept-alive TLS connections. It prints the operations a second
// and their p50 and p99 latency in microseconds.
func benchTLS(target, caFile, serverName, mode string, c int, d time.Duration) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	tc, err := clientTLS(caFile, serverName)
	if err != nil {
		return err
	}
	var op func(*http.Client) error
	switch mode {
	case "handshake":
		op = func(*http.Client) error {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", u.Host, tc)
			if err != nil {
				return err
			}
			return conn.Close()
		}
	case "request":
		op = func(hc *http.Client) error {
			resp, err := hc.Get(target)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	default:
		return fmt.Errorf("mode %q: want handshake or request", mode)
	}
	var mu sync.Mutex
	var lat []time.Duration
	var failures int
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: 1}}
			var mine []time.Duration
			bad := 0
			for time.Now().Before(end) {
				t0 := time.Now()
				if err := op(hc); err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			failures += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(lat) == 0 {
		return errors.New("no operation succeeded")
	}
	slices.Sort(lat)
	q := func(f float64) int64 { return lat[int(f*float64(len(lat)-1))].Microseconds() }
	fmt.Printf("%d %.0f %d %d %d\n", len(lat), float64(len(lat))/d.Seconds(), q(0.5), q(0.99), failures)
	return nil
}
