package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/jobs"
)

// gateway builds the LLM gateway's handler (/v1/chat/completions,
// /v1/embeddings, /v1/responses, /v1/messages and /v1/models) on the
// process's scheduler; its subscription to admissions
// ends with ctx. Its requests are admitted by the workers' admission
// loops, like PR jobs.
func (s *Server) gateway(ctx context.Context) (http.Handler, error) {
	cfg := s.cfg
	// every configured model, each forwarded to its own provider (one
	// *gateway.Provider per configured provider, its keys in the order of
	// the models' buckets)
	providers := map[string]*gateway.Provider{}
	models := map[string]gateway.Model{}
	for _, m := range cfg.Models {
		p, ok := cfg.ProviderOf(m.Name)
		if !ok {
			continue // the configuration's validation names it
		}
		up := providers[p.Name]
		if up == nil {
			up = &gateway.Provider{Kind: p.Kind, BaseURL: p.BaseURL, Keys: p.KeyValues(), APIVersion: p.APIVersion}
			if up.BaseURL == "" {
				switch p.Kind {
				case config.KindAnthropic:
					up.BaseURL = "https://api.anthropic.com"
				default:
					up.BaseURL = "https://api.openai.com/v1"
				}
			}
			providers[p.Name] = up
		}
		models[m.Name] = gateway.Model{Model: s.models[m.Name], Provider: up}
	}
	if len(models) == 0 {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"message":"the gateway serves the configured models; none is configured","type":"invalid_request_error","code":"model_not_found"}}`))
		}), nil
	}
	waiter, err := s.sched.NewWaiter(ctx, 0)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { waiter.Close() })
	gm := gateway.NewMetrics()
	if err := s.metrics.Register(gm.Collectors()...); err != nil {
		s.log.WarnContext(ctx, "gateway metrics not registered", "err", err)
	}
	g, err := gateway.New(gateway.Config{Models: models,
		Timeout: cfg.OpenAI.Timeout.D(), MaxWait: cfg.Gateway.MaxWait.D(), MinOutput: cfg.Gateway.MinOutput,
		HeaderTimeout: cfg.Gateway.HeaderTimeout.D(), StreamIdle: cfg.Gateway.StreamIdle.D(), FallbackWait: cfg.Gateway.FallbackWait.D(),
		MaxBodyBytesInFlight: cfg.Gateway.MaxBodyBytesInFlight,
		CostFunc:             s.metrics.CountGatewayCost, Log: s.log.With("component", "gateway")}, gateway.NewKeys(s.rdb), s.sched, waiter, s.rdb, gm)
	if err != nil {
		waiter.Close()
		return nil, err
	}
	return g.Handler(), nil
}

// RunGateway runs prq gateway until ctx ends: only the gateway's
// endpoints (with health checks and metrics), stateless like serve; the
// admission loops run in the workers. With admit it runs one itself, for
// a gateway without workers (it would also release PR jobs, past any
// worker's capacity).
func RunGateway(ctx context.Context, cfg *config.Config, admit bool, stdout, stderr io.Writer) error {
	log := logging.New(stderr, cfg.Log)
	conn, err := config.ParseRedisURL(cfg.RedisURL)
	if err != nil {
		return &config.SettingError{Name: "REDIS_URL", Problem: err.Error()}
	}
	s, err := New(ctx, cfg, log, conn)
	if err != nil {
		return err
	}
	defer s.Close()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h, err := s.GatewayHandler(hctx)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return &config.SettingError{Name: "PRQ_ADDR", Problem: err.Error()}
	}
	s.addr.Store(hostPort(ln.Addr()))
	if admit {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.sched.Run(hctx, admission.RunConfig{Capacity: func() int { return 64 }, Queues: jobs.Queues})
		}()
		defer func() { cancel(); <-done }()
	}
	wait := serveHTTP(ctx, ln, h, log)
	fmt.Fprintf(stdout, "prq: gateway http://%s/v1  metrics http://%s/metrics\n", hostPort(ln.Addr()), hostPort(ln.Addr()))
	log.InfoContext(ctx, "gateway serving", "addr", ln.Addr().String(), "models", s.sched.Models())
	return wait()
}

// GatewayHandler is prq gateway's routes: the endpoint, health checks
// and metrics (behind the admin token when metrics.require_token).
func (s *Server) GatewayHandler(ctx context.Context) (http.Handler, error) {
	gw, err := s.gateway(ctx)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", gw)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	var metricsHandler http.Handler = s.metrics.Handler()
	if s.cfg.Metrics.RequireToken {
		metricsHandler = tokenAuth(string(s.cfg.Admin.Token), false)(metricsHandler)
	}
	mux.Handle("GET /metrics", metricsHandler)
	return securityHeaders(mux), nil
}
