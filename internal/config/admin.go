package config

import (
	"encoding/pem"
	"fmt"
	"net"
	"os"
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

// keyFileProblem says what is wrong with GITHUB_PRIVATE_KEY_PATH when
// the key is read from it ("" when nothing is): unreadable, or no PEM.
func (c *Config) keyFileProblem() string {
	if c.GitHub.PrivateKeyPath == "" || c.GitHub.PrivateKey != "" {
		return ""
	}
	b, err := os.ReadFile(c.GitHub.PrivateKeyPath)
	if err != nil {
		return err.Error()
	}
	if blk, _ := pem.Decode(b); blk == nil {
		return c.GitHub.PrivateKeyPath + " holds no PEM key: want the .pem GitHub generated for the App (-----BEGIN RSA PRIVATE KEY-----, App settings → Private keys)"
	}
	return ""
}
