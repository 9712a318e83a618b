package appmanifest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// managed are the env file's settings the flow owns: with Force they
// are replaced and GITHUB_PRIVATE_KEY (a previous App's key, which would
// win over GITHUB_PRIVATE_KEY_PATH) is dropped.
var managed = map[string]bool{"GITHUB_APP_ID": true, "GITHUB_APP_SLUG": true, "GITHUB_PRIVATE_KEY_PATH": true,
	"GITHUB_PRIVATE_KEY": true, "GITHUB_WEBHOOK_SECRET": true, "GITHUB_API_URL": true}

// safeValue is a value an env file holds without quotes, read the same
// by docker compose, systemd and a shell.
var safeValue = regexp.MustCompile(`^[A-Za-z0-9._/:@+,=-]*$`)

// write writes the key file, then the env file.
func write(cfg Config, c *conversion, res *Result) error {
	if err := writeSecret(cfg.KeyFile, []byte(c.PEM), cfg.Force); err != nil {
		return fmt.Errorf("appmanifest: write the key to %s: %w", cfg.KeyFile, err)
	}
	settings := [][2]string{{"GITHUB_APP_ID", strconv.FormatInt(c.ID, 10)}, {"GITHUB_APP_SLUG", c.Slug},
		{"GITHUB_PRIVATE_KEY_PATH", cfg.KeyPath}}
	if c.WebhookSecret != nil {
		settings = append(settings, [2]string{"GITHUB_WEBHOOK_SECRET", *c.WebhookSecret})
	}
	settings = append(settings, [2]string{"GITHUB_API_URL", cfg.APIURL})
	header := fmt.Sprintf("# The GitHub App %q (id %d, owner %s, client id %s), registered by prq setup github.\n",
		c.Name, c.ID, c.Owner.Login, c.ClientID)
	if c.WebhookSecret == nil {
		header += "# GitHub sent no webhook secret: set one in the App's settings and here as GITHUB_WEBHOOK_SECRET.\n"
	}
	old, err := os.ReadFile(cfg.EnvFile)
	switch {
	case err == nil:
		res.EnvFileUpdated = true
	case errors.Is(err, os.ErrNotExist):
		old = nil
	default:
		return fmt.Errorf("appmanifest: read %s: %w", cfg.EnvFile, err)
	}
	body, err := envFile(old, header, settings)
	if err != nil {
		return err
	}
	if err := writeSecret(cfg.EnvFile, body, res.EnvFileUpdated); err != nil {
		return fmt.Errorf("appmanifest: write the settings to %s: %w", cfg.EnvFile, err)
	}
	return nil
}

// envFile returns old with the managed settings replaced in place (or
// dropped), then the header and the settings old lacked.
func envFile(old []byte, header string, settings [][2]string) ([]byte, error) {
	value := map[string]string{}
	for _, s := range settings {
		v, err := quote(s[1])
		if err != nil {
			return nil, fmt.Errorf("appmanifest: %s: %w", s[0], err)
		}
		value[s[0]] = v
	}
	var b strings.Builder
	done := map[string]bool{}
	for _, line := range strings.SplitAfter(string(old), "\n") {
		k := envKey(line)
		if !managed[k] {
			b.WriteString(line)
			continue
		}
		if v, ok := value[k]; ok && !done[k] {
			b.WriteString(k + "=" + v + "\n")
			done[k] = true
		}
	}
	if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	if len(done) == len(settings) {
		return []byte(b.String()), nil
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	b.WriteString(header)
	for _, s := range settings {
		if !done[s[0]] {
			b.WriteString(s[0] + "=" + value[s[0]] + "\n")
		}
	}
	return []byte(b.String()), nil
}

// envKey is the name a line sets ("" for a comment or a blank line).
func envKey(line string) string {
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "#") {
		return ""
	}
	line = strings.TrimPrefix(line, "export ")
	k, _, ok := strings.Cut(line, "=")
	if !ok {
		return ""
	}
	return strings.TrimSpace(k)
}

// quote writes v bare when it is safe, else in single quotes (literal
// for docker compose and a shell).
func quote(v string) (string, error) {
	if safeValue.MatchString(v) {
		return v, nil
	}
	if strings.ContainsAny(v, "'\n\r") {
		return "", errors.New("the value holds a quote or a line break")
	}
	return "'" + v + "'", nil
}

// writeSecret writes a file only its owner may read: a new file (it must
// not exist), or with replace a temporary file renamed over the old one.
func writeSecret(path string, data []byte, replace bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !replace {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
		return f.Close()
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
