package config

import "testing"

func TestParseRedisURL(t *testing.T) {
	for _, good := range []string{"redis://127.0.0.1:6379", "redis://:pw@h:1/2", "rediss://h:6380", "redis-sentinel://a:26379,b:26379?master=m",
		"redis-cluster://a:7000,b:7001"} {
		if _, err := ParseRedisURL(good); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}
	for _, bad := range []string{"redis://h", "redis://a:1,b:2", "redis-sentinel://a:1", "redis-cluster://a:1/3", "redis://h:99999", "redis://h:1/x", "::"} {
		if _, err := ParseRedisURL(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
