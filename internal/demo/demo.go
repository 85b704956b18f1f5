package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Password is the password the demo's /login accepts (for any user).
const Password = "open-sesame"

// LoginDelay is how long the demo's /login takes to answer, as checking a
// password hash does: concurrent attempts overlap.
const LoginDelay = 200 * time.Millisecond

// Handler returns the demo API:
//
//	GET  /notices                the notice board
//	GET  /notices/{id}           one notice
//	POST /notices/urgent         send an urgent notice (answers 202)
//	GET  /students/{id}          one student
//	GET  /partner/students/{id}  one student, for partner schools
//	POST /login                  {"user":..,"password":..}; 401 unless the password is Password
//	                             (after LoginDelay, as a password hash takes)
//	POST /v1/chat/completions    an OpenAI-style completion with its usage; "stream": true
//	                             answers Server-Sent Events, the last one with the usage
//	GET  /reports, POST /reports  a report; POST takes ?ms= milliseconds (default 200, at most 5000)
//	GET  /                       what the demo serves
//
// Every answer is JSON. The handler counts the requests it served.
func Handler() *API {
	a := &API{mux: http.NewServeMux()}
	a.mux.HandleFunc("GET /notices", a.notices)
	a.mux.HandleFunc("GET /notices/{id}", a.notice)
	a.mux.HandleFunc("POST /notices/urgent", a.urgent)
	a.mux.HandleFunc("GET /students/{id}", a.student)
	a.mux.HandleFunc("GET /partner/students/{id}", a.student)
	a.mux.HandleFunc("POST /login", a.login)
	a.mux.HandleFunc("POST /v1/chat/completions", a.chat)
	a.mux.HandleFunc("GET /reports", a.report)
	a.mux.HandleFunc("POST /reports", a.report)
	a.mux.HandleFunc("GET /{$}", a.index)
	a.mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
	})
	return a
}

// API is the demo's HTTP handler.
type API struct {
	mux    *http.ServeMux
	served atomic.Int64
}

// Served returns the number of requests the API has answered.
func (a *API) Served() int64 { return a.served.Load() }

// ServeHTTP answers one request.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.served.Add(1)
	a.mux.ServeHTTP(w, r)
}

func (a *API) index(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"service": "school office (Floodgate demo upstream)",
		"routes": []string{"GET /notices", "GET /notices/{id}", "POST /notices/urgent", "GET /students/{id}",
			"GET /partner/students/{id}", "POST /login", "GET /reports", "POST /reports", "POST /v1/chat/completions"},
	})
}

func (a *API) notices(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"notices": []map[string]string{
		{"id": "1", "title": "Sports day on Friday"},
		{"id": "2", "title": "The library closes early on Wednesday"},
	}})
}

func (a *API) notice(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id != "1" && id != "2" {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "no such notice"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "title": "Notice " + id})
}

func (a *API) urgent(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusAccepted, map[string]string{"message": "urgent notice queued for SMS"})
}

var names = []string{"Asha", "Bilal", "Chen", "Dara", "Esi", "Farid", "Gita", "Hugo", "Ines", "Jomo"}

func (a *API) student(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || id < 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "student id must be a number"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "name": names[id%len(names)], "class": 1 + id%6})
}

func (a *API) login(w http.ResponseWriter, r *http.Request) {
	var in struct {
		User     string `json:"user"`
		Password string `json:"password"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "want a JSON body {\"user\":..,\"password\":..}"})
		return
	}
	t := time.NewTimer(LoginDelay)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		return
	}
	if in.Password != Password {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "wrong user or password"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "welcome, " + in.User})
}

func (a *API) report(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		d := 200 * time.Millisecond
		if ms := r.URL.Query().Get("ms"); ms != "" {
			n, err := strconv.Atoi(ms)
			if err != nil || n < 0 || n > 5000 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"message": "ms must be between 0 and 5000"})
				return
			}
			d = time.Duration(n) * time.Millisecond
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"report": "attendance", "rows": 42})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Server is the demo API listening on a loopback port.
type Server struct {
	// URL is the base URL, e.g. http://127.0.0.1:41234.
	URL string
	// API is the handler, to read how many requests it served.
	API *API

	srv  *http.Server
	done chan error
}

// Start serves the demo API on addr (":0" style addresses pick a free
// port; an empty addr means 127.0.0.1:0) until Close.
func Start(addr string) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demo: listen: %w", err)
	}
	api := Handler()
	s := &Server{
		URL:  "http://" + ln.Addr().String(),
		API:  api,
		srv:  &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second},
		done: make(chan error, 1),
	}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// Close stops the server, letting requests in flight finish until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("demo: close: %w", err)
	}
	return nil
}
