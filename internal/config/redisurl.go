package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
)

// ParseRedisURL maps REDIS_URL to asynq's connection options:
// redis:// and rediss:// to RedisClientOpt, redis-sentinel:// to
// RedisFailoverClientOpt and redis-cluster:// to RedisClusterClientOpt.
func ParseRedisURL(s string) (asynq.RedisConnOpt, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("malformed URL: %s (the URL is not shown: it may hold a password)", parseProblem(err))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("no host in %q", RedactURL(s))
	}
	var password string
	if p, ok := u.User.Password(); ok {
		password = p
	}
	db := 0
	if p := strings.Trim(u.Path, "/"); p != "" {
		if db, err = strconv.Atoi(p); err != nil || db < 0 {
			return nil, fmt.Errorf("database %q is not a non-negative number", p)
		}
	}
	if d := u.Query().Get("db"); d != "" {
		if db, err = strconv.Atoi(d); err != nil || db < 0 {
			return nil, fmt.Errorf("database %q is not a non-negative number", d)
		}
	}
	addrs := strings.Split(u.Host, ",")
	for _, a := range addrs {
		if _, port, ok := strings.Cut(a, ":"); !ok || port == "" {
			return nil, fmt.Errorf("address %q has no port", a)
		} else if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("address %q has a bad port", a)
		}
	}
	switch u.Scheme {
	case "redis", "rediss":
		if len(addrs) != 1 {
			return nil, fmt.Errorf("%s:// takes one address; use redis-cluster:// or redis-sentinel:// for several", u.Scheme)
		}
		if u.Scheme == "rediss" {
			opt, err := asynq.ParseRedisURI(s)
			if err != nil {
				return nil, fmt.Errorf("bad rediss URL")
			}
			return opt, nil
		}
		return asynq.RedisClientOpt{Addr: addrs[0], Username: u.User.Username(), Password: password, DB: db}, nil
	case "redis-sentinel":
		master := u.Query().Get("master")
		if master == "" {
			return nil, fmt.Errorf("redis-sentinel:// needs ?master=<name>")
		}
		return asynq.RedisFailoverClientOpt{MasterName: master, SentinelAddrs: addrs, Password: password, DB: db}, nil
	case "redis-cluster":
		if db != 0 {
			return nil, errors.New("a Redis Cluster has only database 0")
		}
		return asynq.RedisClusterClientOpt{Addrs: addrs, Username: u.User.Username(), Password: password}, nil
	}
	return nil, fmt.Errorf("unsupported scheme %q", u.Scheme)
}

// parseProblem is what url.Parse found wrong, without any of the input:
// its messages quote the URL or a piece of it (an escape inside the
// password, say), so every quoted part goes.
func parseProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := quoted.ReplaceAllString(err.Error(), "")
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" {
		return "cannot be parsed"
	}
	return msg
}

var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
