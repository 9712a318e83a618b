package redisproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a local 3-master Redis Cluster.
type Cluster struct {
	dir   string
	addrs []string
	procs []*exec.Cmd
}

// URL returns the redis-cluster:// URL of the nodes.
func (c *Cluster) URL() string { return "redis-cluster://" + strings.Join(c.addrs, ",") }

// Stop kills the nodes and removes their directories.
func (c *Cluster) Stop() {
	for _, p := range c.procs {
		p.Process.Kill()
		p.Wait()
	}
	os.RemoveAll(c.dir)
}

// StartCluster starts three redis-server --cluster-enabled nodes on free
// ports and joins them with redis-cli --cluster create.
func StartCluster(ctx context.Context) (*Cluster, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is needed for the cluster run: %w", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli is needed for the cluster run: %w", err)
	}
	dir, err := os.MkdirTemp("", "prq-cluster-*")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	for i := 0; i < 3; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.Stop()
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// the cluster bus listens on port+10000: it must be free too
		if port > 55000 {
			i--
			continue
		}
		nodeDir := filepath.Join(dir, strconv.Itoa(port))
		os.MkdirAll(nodeDir, 0o755)
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--dir", nodeDir, "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			c.Stop()
			return nil, err
		}
		c.procs = append(c.procs, cmd)
		c.addrs = append(c.addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	for _, a := range c.addrs { // wait for the nodes
		for i := 0; ; i++ {
			conn, err := net.Dial("tcp", a)
			if err == nil {
				conn.Close()
				break
			}
			if i > 100 {
				c.Stop()
				return nil, fmt.Errorf("cluster node %s did not start", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs})
	defer rdb.Close()
	for i := 0; ; i++ {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if i > 100 {
			c.Stop()
			return nil, fmt.Errorf("the cluster did not become ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c, nil
}
