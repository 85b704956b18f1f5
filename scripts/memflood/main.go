// Command memflood is scripts/bench-memory.sh's load: n GET requests to a
// gateway on loopback, each forwarded (X-Forwarded-For) for a client
// address of its own in 10.0.0.0/8, or for one of the first -addrs of them
// in turn. It writes -depth requests at once on each of -c connections
// before it reads their answers, and prints how many of each status came
// back; it exits 1 if any request got no answer.
//
//	memflood -target 127.0.0.1:18300 -n 4194304
//	memflood -target 127.0.0.1:18300 -n 400000 -addrs 256 -start 16000000
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	target := flag.String("target", "127.0.0.1:8080", "the gateway's host:port")
	path := flag.String("path", "/x", "the path asked for")
	n := flag.Int("n", 100000, "requests in all")
	c := flag.Int("c", 8, "connections")
	depth := flag.Int("depth", 32, "requests written at once on a connection before its answers are read")
	addrs := flag.Int("addrs", 0, "cycle through this many addresses (0: each request from an address of its own)")
	start := flag.Int("start", 0, "the first address's number")
	flag.Parse()
	if *n > 1<<24 {
		fmt.Fprintln(os.Stderr, "memflood: -n is at most 16777216 (10.0.0.0/8)")
		os.Exit(2)
	}
	var next atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	t0 := time.Now()
	var failed atomic.Int64
	for range *c {
		wg.Go(func() {
			mine := map[int]int{}
			defer func() {
				mu.Lock()
				for k, v := range mine {
					codes[k] += v
				}
				mu.Unlock()
			}()
			conn, err := net.DialTimeout("tcp", *target, 5*time.Second)
			if err != nil {
				failed.Add(1)
				fmt.Fprintln(os.Stderr, "memflood:", err)
				return
			}
			defer conn.Close()
			bw, br := bufio.NewWriterSize(conn, 64<<10), bufio.NewReaderSize(conn, 64<<10)
			var line []byte
			for {
				first := next.Add(int64(*depth)) - int64(*depth)
				if first >= int64(*n) {
					return
				}
				last := min(first+int64(*depth), int64(*n))
				for i := first; i < last; i++ {
					a := int(i) + *start
					if *addrs > 0 {
						a = int(i)%*addrs + *start
					}
					line = append(line[:0], "GET "...)
					line = append(line, *path...)
					line = append(line, " HTTP/1.1\r\nHost: flood\r\nX-Forwarded-For: 10."...)
					line = strconv.AppendInt(line, int64(a>>16&255), 10)
					line = append(line, '.')
					line = strconv.AppendInt(line, int64(a>>8&255), 10)
					line = append(line, '.')
					line = strconv.AppendInt(line, int64(a&255), 10)
					line = append(line, "\r\n\r\n"...)
					bw.Write(line)
				}
				conn.SetDeadline(time.Now().Add(30 * time.Second))
				if err := bw.Flush(); err != nil {
					failed.Add(1)
					fmt.Fprintln(os.Stderr, "memflood:", err)
					return
				}
				for i := first; i < last; i++ {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						failed.Add(1)
						fmt.Fprintln(os.Stderr, "memflood:", err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mine[resp.StatusCode]++
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(t0)
	total := 0
	for _, v := range codes {
		total += v
	}
	fmt.Printf("requests %d in %.1fs (%.0f/s) answers %v\n", total, el.Seconds(), float64(total)/el.Seconds(), codes)
	if failed.Load() > 0 || total != *n {
		os.Exit(1)
	}
}
