package rls

import (
	"errors"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"sync"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate/floodgate/internal/browser"
)

// maxJSONBody bounds the body of a /json request.
const maxJSONBody = 1 << 20

// smallJSONBody is the part of a /json body read at once, whatever the
// other requests do; a body longer than that (a request of many
// descriptors) is read on while at most largeJSONReads others are, so that
// the bodies held at once stay within a few tens of MiB however many
// clients send them.
const (
	smallJSONBody  = 64 << 10
	largeJSONReads = 16
)

// readJSONBody reads a /json body, within maxJSONBody, holding one of
// large's places while it reads past smallJSONBody.
func readJSONBody(w http.ResponseWriter, r *http.Request, large chan struct{}) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	b, err := io.ReadAll(io.LimitReader(body, smallJSONBody+1))
	if err != nil || len(b) <= smallJSONBody {
		return b, err
	}
	select {
	case large <- struct{}{}:
		defer func() { <-large }()
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	rest, err := io.ReadAll(body)
	return append(b, rest...), err
}

// badJSON answers a /json request with status and why, after the status's
// text as envoyproxy/ratelimit writes it alone.
func badJSON(w http.ResponseWriter, status int, why string) {
	http.Error(w, http.StatusText(status)+": "+why, status)
}

// JSONHandler answers envoyproxy/ratelimit's /json endpoint: a
// RateLimitRequest in the protobuf JSON mapping in the body of a POST (any
// method is taken, as there), the RateLimitResponse in the same mapping in
// the answer, with status 200 when the request may pass, 429 when it is
// over the limit, 413 for a body over 1 MiB, 400 for a body that is not a
// request, one of more JSON objects than a request within
// Options.MaxDescriptors and Options.MaxEntries holds (refused before it
// is decoded), or a request the service refuses or cannot decide (as
// envoyproxy/ratelimit answers both), with the reason after the status's
// text, and 500 for an answer it cannot write.
//
// A request a browser sent (it carries Origin or Sec-Fetch-Site) is
// answered 403, with the reason, and charges nothing: see the package
// documentation.
func JSONHandler(svc *Service) http.Handler {
	large := make(chan struct{}, largeJSONReads)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /json takes no token: a page of another site posts to it
		// without a preflight, and one rebound to its address reads the
		// answers. Services send neither field a browser adds.
		if browser.Sent(r) {
			badJSON(w, http.StatusForbidden, "/json takes no token, so it answers no browser "+
				"(the request carries Origin or Sec-Fetch-Site): any page the browser opens could send it")
			return
		}
		body, err := readJSONBody(w, r, large)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				badJSON(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", maxJSONBody))
				return
			}
			badJSON(w, http.StatusBadRequest, "the body could not be read")
			return
		}
		if n, most := jsonObjects(body), svc.maxJSONObjects(); n > most {
			svc.opts.Stats.serviceError()
			badJSON(w, http.StatusBadRequest, fmt.Sprintf("the body holds %d JSON objects, a request at most %d (%d descriptors of %d entries)",
				n, most, svc.maxDesc, svc.maxEnts))
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			badJSON(w, http.StatusBadRequest, "not a RateLimitRequest in JSON: "+err.Error())
			return
		}
		resp, err := svc.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			badJSON(w, http.StatusBadRequest, status.Convert(err).Message())
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		case rlsv3.RateLimitResponse_UNKNOWN:
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = w.Write(out)
	})
}

// jsonObjects counts the objects of a JSON text: the '{' outside its
// strings. Every descriptor, entry and limit override of a request is an
// object, and decoding makes one of each, so a body is refused on this
// count before it is decoded (1 MiB of empty entries, "{}," each, was
// 340,000 of them and about 50 MiB of heap). It allocates nothing; a text
// that is not JSON is left to the decoder.
func jsonObjects(b []byte) int {
	n := 0
	in, esc := false, false
	for _, c := range b {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && c == '{':
			n++
		}
	}
	return n
}

// maxJSONObjects is the most objects a request within the service's
// bounds holds: itself, and for each descriptor the descriptor, its limit
// override and its entries.
func (s *Service) maxJSONObjects() int { return 1 + s.maxDesc*(2+s.maxEnts) }

// Health components, as envoyproxy/ratelimit names them.
const (
	// HealthConfig is healthy once a configuration with at least one
	// domain is loaded (only watched when asked for).
	HealthConfig = "config"
	// HealthStopping turns unhealthy when the process starts to stop.
	HealthStopping = "sigterm"
)

// Health is the service's health as envoyproxy/ratelimit reports it: it is
// healthy when all its components are. It serves /healthcheck (200 "OK",
// else 500) and keeps a gRPC health server's status for a service name in
// step. Its methods are safe for concurrent use.
type Health struct {
	mu   sync.Mutex      // guards comp
	comp map[string]bool // component → healthy
	ok   atomic.Bool
	grpc *health.Server
	name string
}

// NewHealth returns a Health with the given components, healthy unless
// listed in failing. When grpcHealth is not nil, its status for name
// follows.
func NewHealth(grpcHealth *health.Server, name string, components []string, failing ...string) *Health {
	h := &Health{comp: map[string]bool{}, grpc: grpcHealth, name: name}
	for _, c := range components {
		h.comp[c] = true
	}
	for _, c := range failing {
		h.comp[c] = false
	}
	h.update()
	return h
}

// Set marks a component healthy or not.
func (h *Health) Set(component string, healthy bool) {
	h.mu.Lock()
	h.comp[component] = healthy
	h.update()
	h.mu.Unlock()
}

// update recomputes the overall health; the caller holds mu or owns h.
func (h *Health) update() {
	ok := true
	for _, v := range h.comp {
		ok = ok && v
	}
	h.ok.Store(ok)
	if h.grpc != nil {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		h.grpc.SetServingStatus(h.name, st)
	}
}

// Healthy reports whether every component is healthy.
func (h *Health) Healthy() bool { return h.ok.Load() }

// ServeHTTP answers /healthcheck.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if !h.ok.Load() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "OK")
}

// DebugHandler serves envoyproxy/ratelimit's debug port: / lists the
// endpoints, /rlconfig dumps the configuration in use (Config.Dump),
// /stats prints the process's expvar variables and /debug/pprof/ the
// profiles; extra adds endpoints (path → help and handler).
func DebugHandler(svc *Service, extra map[string]DebugEndpoint) http.Handler {
	mux := http.NewServeMux()
	help := map[string]string{}
	add := func(path, h string, fn http.Handler) {
		mux.Handle(path, fn)
		help[path] = h
	}
	add("/rlconfig", "print out the currently loaded configuration for debugging", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, svc.Config().Dump())
	}))
	add("/stats", "print out stats", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		expvar.Do(func(kv expvar.KeyValue) { fmt.Fprintf(w, "%s: %s\n", kv.Key, kv.Value) })
	}))
	add("/debug/pprof/", "root of various pprof endpoints. hit for help.", http.HandlerFunc(pprof.Index))
	add("/debug/pprof/profile", "CPU profiling endpoint", http.HandlerFunc(pprof.Profile))
	add("/debug/pprof/trace", "trace endpoint", http.HandlerFunc(pprof.Trace))
	for p, e := range extra {
		add(p, e.Help, e.Handler)
	}
	paths := make([]string, 0, len(help))
	for p := range help {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		for _, p := range paths {
			fmt.Fprintf(w, "%s: %s\n", p, help[p])
		}
	})
	return mux
}

// DebugEndpoint is one more endpoint of the debug port.
type DebugEndpoint struct {
	Help    string
	Handler http.Handler
}
