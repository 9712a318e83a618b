package config

import (
	"strings"
	"testing"
)

func TestIsLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.5:80": false, "example.com:80": false, "nonsense": false,
	} {
		if got := IsLoopbackAddr(addr); got != want {
			t.Errorf("IsLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestServeNeedsAdminTokenOffLoopback: config check --for serve refuses
// what serve would, an exposed address without PRQ_ADMIN_TOKEN.
func TestServeNeedsAdminTokenOffLoopback(t *testing.T) {
	c := Default()
	c.RedisURL, c.GitHub.WebhookSecret = "redis://127.0.0.1:6379", "0123456789abcdef0123"
	if err := c.Validate(ModeServe); err == nil || !strings.Contains(err.Error(), "PRQ_ADMIN_TOKEN: is required to expose the dashboard") {
		t.Fatalf(":8080 without a token: %v", err)
	}
	c.Addr = "127.0.0.1:8080"
	if err := c.Validate(ModeServe); err != nil {
		t.Fatalf("loopback without a token: %v", err)
	}
	c.Addr, c.Admin.Token = ":8080", "fedcba9876543210fedcba"
	if err := c.Validate(ModeServe); err != nil {
		t.Fatalf("a token: %v", err)
	}
}
