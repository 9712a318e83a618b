package config

import (
	"fmt"
	"net"
)

// AdminTokenProblem says why the HTTP surface may not run as configured
// ("" when it may): without PRQ_ADMIN_TOKEN the dashboard, the admin API
// and the asynq web UI may listen on loopback only. serve, all and the
// demo refuse to start otherwise; prq doctor reports it.
func (c *Config) AdminTokenProblem() string {
	if c.Admin.Token != "" || IsLoopbackAddr(c.Addr) {
		return ""
	}
	return fmt.Sprintf("is required to expose the dashboard, admin API and asynq web UI on %s; set it (openssl rand -hex 32), or bind to loopback (--addr 127.0.0.1:8080)", c.Addr)
}

// IsLoopbackAddr reports whether a listen address (host:port) binds to
// this machine's loopback only.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
