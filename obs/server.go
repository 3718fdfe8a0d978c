package obs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Server serves the observability endpoints:
//
//	/metrics  Prometheus exposition of reg
//	/healthz  200 "ok" while the process runs
//	/readyz   200 "ready" when ready() returns nil, else 503 with the
//	          (redacted) error text
//	/status   the JSON of status(), redacted; normally a StatusReport
type Server struct {
	addr    string
	handler http.Handler
	mux     *http.ServeMux
	log     *zap.Logger

	mu   sync.Mutex
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// NewServer builds a server for addr ("host:port"; port 0 picks a free one).
// reg nil serves prometheus.DefaultGatherer; status and ready may be nil
// (an empty object, always ready); log nil logs nothing. Nothing listens
// until Start.
func NewServer(addr string, reg *prometheus.Registry, status func() any, ready func() error, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	var gatherer prometheus.Gatherer = prometheus.DefaultGatherer
	var registerer prometheus.Registerer = prometheus.DefaultRegisterer
	if reg != nil {
		gatherer, registerer = reg, reg
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{Registry: registerer}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ready != nil {
			if err := ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, Redact(err.Error()))
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		var v any = struct{}{}
		if status != nil {
			v = status()
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			log.Error("encode /status", zap.Error(err))
			http.Error(w, "cannot encode status", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append([]byte(Redact(string(b))), '\n'))
	})
	return &Server{addr: addr, handler: mux, mux: mux, log: log}
}

// Handle adds a route (for example the daemon's /search); call it before
// Start.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// HandleProfiles adds Go's runtime profiles under /debug/pprof/ (the
// routes of net/http/pprof); call it before Start.
func (s *Server) HandleProfiles() {
	s.mux.HandleFunc("/debug/pprof/", pprof.Index)
	s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// Handler returns the server's routes, for tests and for mounting elsewhere.
func (s *Server) Handler() http.Handler { return s.handler }

// Start binds the address and serves in the background. It returns once
// the listener is bound (or failed to bind); calling it twice is an error.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("obs: server already started")
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("obs: listen on %s: %w", s.addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("observability server stopped", zap.String("addr", ln.Addr().String()), zap.Error(err))
		}
	}()
	s.log.Info("observability server listening", zap.String("addr", ln.Addr().String()))
	return nil
}

// Addr returns the bound address after Start (the configured one before).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.addr
}

// Shutdown stops accepting connections and waits for active requests until
// ctx is done, returning ctx's error then. It is a no-op before Start.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err == nil {
		<-done
	}
	return err
}
