package app

import (
	"context"
	"errors"
	"net/http"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/gateway/edge"
)

// The gateway listener's HTTP engine (server.engine, --engine): the edge
// engine (fast) serves HTTP/1.1 on fasthttp and hands what it cannot serve
// to the net/http server (HTTP/2 with prior knowledge, upgraded
// connections such as WebSockets); net/http serves every request itself.

// httpEngine returns the engine the gateway listener runs: the flag, else the
// file's (fast by default). With OpenTelemetry tracing on, net/http, whose
// requests are traced, unless the flag says otherwise.
func (s *server) httpEngine() string {
	switch {
	case s.cfg.Engine != "":
		return s.cfg.Engine
	case s.tracing.on():
		return config.EngineNetHTTP
	case s.srv.Engine != "":
		return s.srv.Engine
	}
	return config.EngineFast
}

// serveFront serves the gateway listener on its engine; s.front, the
// net/http server, serves it whole or takes what the edge engine hands
// over.
func (s *server) serveFront(g *gateway.Gateway) {
	s.engineName = s.httpEngine()
	if s.engineName == config.EngineNetHTTP {
		go func() { s.errc <- s.front.Serve(s.frontLn) }()
		return
	}
	t := s.srv.Timeouts
	s.edge = edge.New(g, edge.Options{
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    s.front.MaxHeaderBytes,
		Fallback:          s.front,
		Logger:            s.log,
		// The process is the gateway: what parked idle connections gave
		// back goes back to the system.
		ReturnMemory: true,
	})
	go func() {
		err := s.edge.Serve(s.frontLn)
		if err == nil {
			err = http.ErrServerClosed
		}
		s.errc <- err
	}()
}

// shutdownFront stops the gateway listener's engine gracefully (until ctx
// ends), then at once.
func (s *server) shutdownFront(ctx context.Context) {
	if s.edge == nil {
		if err := s.front.Shutdown(ctx); err != nil {
			s.log.Warn("requests still in flight at the shutdown timeout", "err", err)
			_ = s.front.Close()
		}
		return
	}
	if err := s.edge.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("requests still in flight at the shutdown timeout", "err", err)
		_ = s.edge.Close()
	}
}

// engineLine says which engine serves the gateway, for the start line.
func (s *server) engineLine() string {
	if s.engineName == config.EngineNetHTTP {
		return "net/http"
	}
	return "fast; h2c and upgrades on net/http"
}
