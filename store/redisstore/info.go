package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Usage is what the Redis servers behind a store have spent since they
// started, summed over a Cluster's primaries: for benchmarks, which compare
// two readings.
type Usage struct {
	// CPU is the servers' CPU time, user and system (INFO cpu).
	CPU time.Duration
	// ScriptCalls counts script calls (EVALSHA and EVAL in INFO
	// commandstats), the store's and anyone else's.
	ScriptCalls int64
}

// Sub returns u minus an earlier reading.
func (u Usage) Sub(earlier Usage) Usage {
	return Usage{CPU: u.CPU - earlier.CPU, ScriptCalls: u.ScriptCalls - earlier.ScriptCalls}
}

// ServerUsage reads the servers' CPU time and script calls (INFO).
func (s *Store) ServerUsage(ctx context.Context) (Usage, error) {
	var u Usage
	err := s.eachNode(ctx, func(c nodeClient) error {
		text, err := c.info(ctx, "cpu")
		if err != nil {
			return err
		}
		for k, v := range infoFields(text) {
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("redisstore: INFO cpu: %s: %w", k, err)
				}
				u.CPU += time.Duration(f * float64(time.Second))
			}
		}
		text, err = c.info(ctx, "commandstats")
		if err != nil {
			return err
		}
		for k, v := range infoFields(text) {
			if k != "cmdstat_evalsha" && k != "cmdstat_eval" {
				continue
			}
			for _, f := range strings.Split(v, ",") {
				if n, ok := strings.CutPrefix(f, "calls="); ok {
					calls, err := strconv.ParseInt(n, 10, 64)
					if err != nil {
						return fmt.Errorf("redisstore: INFO commandstats: %s: %w", k, err)
					}
					u.ScriptCalls += calls
				}
			}
		}
		return nil
	})
	return u, err
}

// infoFields returns the name:value lines of an INFO reply.
func infoFields(text string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// nodeClient talks to one server.
type nodeClient struct {
	addr string
	c    rueidis.Client
}

// info returns the text of INFO section.
func (n nodeClient) info(ctx context.Context, section string) (string, error) {
	text, err := n.c.Do(ctx, n.c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("redisstore: INFO %s on %s: %w", section, n.addr, err)
	}
	return text, nil
}

// eachNode calls fn for every server of the deployment (the one server, or
// every node of a Cluster), and returns the first error.
func (s *Store) eachNode(ctx context.Context, fn func(nodeClient) error) error {
	nodes := s.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		if err := fn(nodeClient{addr: a, c: nodes[a]}); err != nil {
			return err
		}
	}
	return nil
}
