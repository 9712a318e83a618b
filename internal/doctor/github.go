package doctor

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// CheckGitHub checks the App's key, that GitHub accepts its JWT (GET
// /app), its permissions and events, and its installations.
func CheckGitHub(ctx context.Context, client *http.Client, now time.Time, gh GitHub) []Result {
	if gh.Permissions == nil {
		gh.Permissions = RequiredPermissions
	}
	if gh.Events == nil {
		gh.Events = RequiredEvents
	}
	base, err := apiBase(gh.APIURL)
	if err != nil {
		return []Result{{Name: "github app", Detail: err.Error(), Fix: "set GITHUB_API_URL to https://api.github.com/ or https://<ghe-host>/api/v3/"}}
	}
	keyRes, key := githubKey(gh)
	if !keyRes.OK {
		return []Result{keyRes}
	}
	if gh.AppID <= 0 {
		return []Result{keyRes, {Name: "github app", Detail: "GITHUB_APP_ID is not set", Fix: "set GITHUB_APP_ID to the App's numeric id (App settings → General → About → App ID)"}}
	}
	tok, err := appJWT(gh.AppID, key, now)
	if err != nil {
		keyRes.OK, keyRes.Detail, keyRes.Fix = false, "cannot sign a JWT with the key: "+err.Error(), "use the .pem GitHub generated for the App (App settings → Private keys)"
		return []Result{keyRes}
	}
	var app appInfo
	status, body, err := getJSON(ctx, client, base+"app", "Bearer "+tok, &app)
	appRes := Result{Name: "github app"}
	switch {
	case err != nil:
		appRes.Detail, appRes.Fix = "GET /app: "+err.Error(), "check GITHUB_API_URL and that GitHub is reachable from here (proxy, firewall)"
		return []Result{keyRes, appRes}
	case status == http.StatusUnauthorized:
		appRes.Detail = fmt.Sprintf("GET /app answered 401 %s: GitHub refused the JWT for App id %d", body, gh.AppID)
		appRes.Fix = "GITHUB_APP_ID must be the id of the App whose private key this is (App settings → General → About → App ID); if the id is right, generate a new key for it; check this host's clock"
		return []Result{keyRes, appRes}
	case status != http.StatusOK:
		appRes.Detail, appRes.Fix = fmt.Sprintf("GET /app answered %d %s", status, body), "check GITHUB_API_URL (Enterprise Server: https://<host>/api/v3/)"
		return []Result{keyRes, appRes}
	}
	appRes.OK, appRes.Detail = true, fmt.Sprintf("JWT accepted: App %q (id %d)", app.Slug, app.ID)
	out := []Result{keyRes, appRes, slugResult(gh.AppSlug, app.Slug), permissionsResult("github permissions", app.Permissions, app.Events, gh, "edit the App (App settings → Permissions & events) to grant them")}
	return append(out, installations(ctx, client, base, tok, gh))
}

// slugResult compares GITHUB_APP_SLUG with the App's real slug: chat
// starts when a comment mentions @slug, so a wrong or missing one means
// chat silently never triggers.
func slugResult(configured, real string) Result {
	r := Result{Name: "github app slug"}
	fix := fmt.Sprintf("set GITHUB_APP_SLUG=%s (the App's slug, as in https://github.com/apps/%s)", real, real)
	switch {
	case configured == "":
		r.Detail, r.Fix = fmt.Sprintf("GITHUB_APP_SLUG is not set: comments mentioning @%s will never start chat", real), fix
	case !strings.EqualFold(configured, real):
		r.Detail, r.Fix = fmt.Sprintf("GITHUB_APP_SLUG is %q but the App is %q: comments mentioning @%s will never start chat", configured, real, real), fix
	default:
		r.OK, r.Detail = true, fmt.Sprintf("GITHUB_APP_SLUG %q is the App's: @%s starts chat", configured, real)
	}
	return r
}

type appInfo struct {
	ID          int64             `json:"id"`
	Slug        string            `json:"slug"`
	Permissions map[string]string `json:"permissions"`
	Events      []string          `json:"events"`
}

type installation struct {
	ID      int64 `json:"id"`
	Account struct {
		Login string `json:"login"`
	} `json:"account"`
	Permissions map[string]string `json:"permissions"`
	Events      []string          `json:"events"`
	HTMLURL     string            `json:"html_url"`
	SuspendedAt *string           `json:"suspended_at"`
}

func installations(ctx context.Context, client *http.Client, base, tok string, gh GitHub) Result {
	r := Result{Name: "github installations"}
	var list []installation
	status, body, err := getJSON(ctx, client, base+"app/installations?per_page=100", "Bearer "+tok, &list)
	if err != nil || status != http.StatusOK {
		if err == nil {
			err = fmt.Errorf("answered %d %s", status, body)
		}
		r.Detail, r.Fix = "GET /app/installations: "+err.Error(), "check GITHUB_API_URL and the App's state on GitHub"
		return r
	}
	if len(list) == 0 {
		r.Detail = "the App has no installations: no repository will send webhooks"
		r.Fix = "install the App on the accounts or repositories to review (https://github.com/apps/<slug>/installations/new)"
		return r
	}
	var short []string
	for _, in := range list {
		if in.SuspendedAt != nil {
			short = append(short, fmt.Sprintf("%s (%d) is suspended", in.Account.Login, in.ID))
			continue
		}
		if miss := missing(in.Permissions, in.Events, gh); miss != "" {
			short = append(short, fmt.Sprintf("%s (%d) lacks %s", in.Account.Login, in.ID, miss))
		}
	}
	n := strconv.Itoa(len(list))
	if len(list) == 100 {
		n = "100 or more"
	}
	if len(short) > 0 {
		r.Detail = n + " installations; " + strings.Join(short, "; ")
		r.Fix = "an installation's owner must accept the App's new permissions (or unsuspend it) in the account's Settings → Applications → Installed GitHub Apps"
		return r
	}
	r.OK, r.Detail = true, n+" installations, each with the permissions and events prq needs"
	return r
}

func permissionsResult(name string, perms map[string]string, events []string, gh GitHub, fix string) Result {
	r := Result{Name: name}
	if miss := missing(perms, events, gh); miss != "" {
		r.Detail, r.Fix = "the App lacks "+miss, fix
		return r
	}
	r.OK, r.Detail = true, "permissions "+describe(gh.Permissions)+"; events "+strings.Join(gh.Events, ", ")
	return r
}

// missing lists the required permissions and events that have/events lack.
func missing(have map[string]string, events []string, gh GitHub) string {
	level := map[string]int{"read": 1, "write": 2, "admin": 3}
	var miss []string
	for _, p := range sortedKeys(gh.Permissions) {
		want := gh.Permissions[p]
		if level[have[p]] < level[want] {
			got := have[p]
			if got == "" {
				got = "none"
			}
			miss = append(miss, fmt.Sprintf("permission %s: %s (has %s)", p, want, got))
		}
	}
	got := map[string]bool{}
	for _, e := range events {
		got[e] = true
	}
	for _, e := range gh.Events {
		if !got[e] {
			miss = append(miss, "event "+e)
		}
	}
	return strings.Join(miss, ", ")
}

func describe(m map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+":"+m[k])
	}
	return strings.Join(parts, " ")
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// githubKey reads and parses the App's private key.
func githubKey(gh GitHub) (Result, *rsa.PrivateKey) {
	r := Result{Name: "github key"}
	pemBytes, src := gh.PrivateKey, "GITHUB_PRIVATE_KEY"
	if len(pemBytes) == 0 {
		if gh.PrivateKeyPath == "" {
			r.Detail, r.Fix = "no private key configured", "set GITHUB_PRIVATE_KEY_PATH to the App's .pem (or GITHUB_PRIVATE_KEY to its contents)"
			return r, nil
		}
		src = gh.PrivateKeyPath
		b, err := os.ReadFile(gh.PrivateKeyPath)
		if err != nil {
			r.Detail = "unreadable key: " + pathError(err)
			r.Fix = "make GITHUB_PRIVATE_KEY_PATH point at the App's .pem, readable by this user (mounted secret, file mode)"
			return r, nil
		}
		pemBytes = b
	}
	key, err := parseKey(pemBytes)
	if err != nil {
		r.Detail = "unreadable key in " + src + ": " + err.Error()
		r.Fix = "use the .pem GitHub generated for the App (App settings → Private keys → Generate), unmodified"
		return r, nil
	}
	r.OK, r.Detail = true, fmt.Sprintf("RSA %d-bit key from %s", key.N.BitLen(), src)
	return r, key
}

// pathError says what went wrong with a file without its contents.
func pathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

func parseKey(b []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("not PEM (expected -----BEGIN RSA PRIVATE KEY-----)")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("not an RSA private key in PKCS#1 or PKCS#8 form")
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an RSA key (GitHub Apps sign with RS256)")
	}
	return rk, nil
}

// appJWT is the App's RS256 JWT as GitHub wants it: issued 60s in the
// past (clock drift), valid for 9 minutes (at most 10).
func appJWT(id int64, key *rsa.PrivateKey, now time.Time) (string, error) {
	claims := jwt.RegisteredClaims{
		Issuer:    strconv.FormatInt(id, 10),
		IssuedAt:  jwt.NewNumericDate(now.Add(-60 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(9 * time.Minute)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(key)
}

func apiBase(s string) (string, error) {
	if s == "" {
		s = "https://api.github.com/"
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("GITHUB_API_URL %q is not an http(s) URL", s)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.String(), nil
}

// getJSON GETs u and decodes a 200 answer into v; other answers return
// their status and a one-line body.
func getJSON(ctx context.Context, client *http.Client, u, auth string, v any) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/vnd.github+json, application/json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", scrubURLError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, oneLine(b), nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return resp.StatusCode, "", fmt.Errorf("unexpected answer (not the API's JSON): %v", err)
	}
	return resp.StatusCode, "", nil
}

// scrubURLError drops the URL's query from a transport error.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %v", ue.Op, ue.Err)
	}
	return err
}
