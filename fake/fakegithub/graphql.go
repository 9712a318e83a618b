package fakegithub

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	graphql "github.com/graph-gophers/graphql-go"
)

// graphqlSchema is the part of GitHub's GraphQL schema prq uses: a pull
// request's review threads and resolving one. Names, types and
// nullability are GitHub's; every query is validated against it, so a
// field GitHub does not have fails here as it would there.
const graphqlSchema = `
schema { query: Query mutation: Mutation }
scalar BigInt
type Query { repository(owner: String!, name: String!): Repository }
type Mutation { resolveReviewThread(input: ResolveReviewThreadInput!): ResolveReviewThreadPayload }
type Repository { pullRequest(number: Int!): PullRequest }
type PullRequest { reviewThreads(first: Int, after: String): PullRequestReviewThreadConnection! }
type PullRequestReviewThreadConnection { nodes: [PullRequestReviewThread] pageInfo: PageInfo! totalCount: Int! }
type PageInfo { hasNextPage: Boolean! endCursor: String }
type PullRequestReviewThread { id: ID! isResolved: Boolean! path: String! line: Int comments(first: Int): PullRequestReviewCommentConnection! }
type PullRequestReviewCommentConnection { nodes: [PullRequestReviewComment] totalCount: Int! }
type PullRequestReviewComment { fullDatabaseId: BigInt body: String! author: Actor }
interface Actor { login: String! }
type Bot implements Actor { login: String! }
type User implements Actor { login: String! }
input ResolveReviewThreadInput { threadId: ID! clientMutationId: String }
type ResolveReviewThreadPayload { thread: PullRequestReviewThread clientMutationId: String }
`

// gqlError is a GraphQL error with GitHub's type (NOT_FOUND, FORBIDDEN).
type gqlError struct{ typ, msg string }

func (e *gqlError) Error() string                      { return e.msg }
func (e *gqlError) Extensions() map[string]interface{} { return map[string]interface{}{"type": e.typ} }

// graphql is POST /graphql (and /api/graphql on an Enterprise Server):
// the installation's token, the query validated against graphqlSchema,
// errors as GitHub sends them (HTTP 200, a "type" on each).
func (s *Server) graphql(w http.ResponseWriter, r *http.Request) {
	a := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(a, "token ")
	if !ok {
		tok, _ = strings.CutPrefix(a, "Bearer ")
	}
	s.mu.Lock()
	t, known := s.tokens[tok]
	_, refused := s.refused[t.inst]
	if known {
		s.attempts = append(s.attempts, WriteAttempt{At: s.cfg.NowFunc(), Installation: t.inst, Method: r.Method, Path: r.URL.Path, Refused: refused})
	}
	s.mu.Unlock()
	if !known || refused || !t.expires.After(s.cfg.NowFunc()) {
		ghError(w, 401, "Bad credentials")
		return
	}
	var in struct {
		Query         string         `json:"query"`
		OperationName string         `json:"operationName"`
		Variables     map[string]any `json:"variables"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
		ghError(w, 400, "Problems parsing JSON")
		return
	}
	schema, err := graphql.ParseSchema(graphqlSchema, &gqlRoot{s: s, inst: t.inst})
	if err != nil {
		ghError(w, 500, err.Error())
		return
	}
	res := schema.Exec(r.Context(), in.Query, in.OperationName, in.Variables)
	out := map[string]any{}
	if len(res.Data) > 0 {
		out["data"] = res.Data
	}
	var errs []map[string]any
	for _, e := range res.Errors {
		m := map[string]any{"message": e.Message, "locations": e.Locations}
		if e.Path != nil {
			m["path"] = e.Path
		}
		if typ, ok := e.Extensions["type"]; ok {
			m["type"] = typ
		}
		errs = append(errs, m)
	}
	if len(errs) > 0 {
		out["errors"] = errs
	}
	writeJSON(w, 200, out)
}

type gqlRoot struct {
	s    *Server
	inst int64
}

func (q *gqlRoot) Repository(args struct{ Owner, Name string }) (*gqlRepo, error) {
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	for _, p := range q.s.prs {
		if p.owner == args.Owner && p.repo == args.Name && p.inst == q.inst {
			return &gqlRepo{s: q.s, owner: args.Owner, name: args.Name}, nil
		}
	}
	return nil, &gqlError{"NOT_FOUND", fmt.Sprintf("Could not resolve to a Repository with the name '%s/%s'.", args.Owner, args.Name)}
}

type gqlRepo struct {
	s           *Server
	owner, name string
}

func (r *gqlRepo) PullRequest(args struct{ Number int32 }) (*gqlPR, error) {
	k := key(r.owner, r.name, int(args.Number))
	r.s.mu.Lock()
	_, ok := r.s.prs[k]
	r.s.mu.Unlock()
	if !ok {
		return nil, &gqlError{"NOT_FOUND", fmt.Sprintf("Could not resolve to a PullRequest with the number of %d.", args.Number)}
	}
	return &gqlPR{s: r.s, key: k}, nil
}

type gqlPR struct {
	s   *Server
	key string
}

// threadID is a thread's node id (opaque, as GitHub's are): its root
// comment's id.
func threadID(root int64) graphql.ID {
	return graphql.ID("PRRT_" + base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(root, 10))))
}

func rootOf(id graphql.ID) (int64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(string(id), "PRRT_"))
	if err != nil || !strings.HasPrefix(string(id), "PRRT_") {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

// thread is one review thread (s.mu held): its root and replies, oldest
// first.
func (s *Server) thread(root int64) *gqlThread {
	c := s.reviewCmt[root]
	t := &gqlThread{id: threadID(root), resolved: s.resolved[root], path: c.Path, line: int32(c.Line)}
	var ids []int64
	for id, r := range s.reviewCmt {
		if id == root || r.InReplyTo == root {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		t.comments = append(t.comments, &gqlComment{c: *s.reviewCmt[id], bot: s.Bot()})
	}
	return t
}

func (p *gqlPR) ReviewThreads(args struct {
	First *int32
	After *string
}) (*gqlThreadConn, error) {
	first := 100
	if args.First != nil {
		if *args.First < 0 || *args.First > 100 {
			return nil, &gqlError{"EXCESSIVE_PAGINATION", "Requesting up to 100 records on the `reviewThreads` connection is allowed; the request asked for more."}
		}
		first = int(*args.First)
	}
	start := 0
	if args.After != nil {
		b, err := base64.StdEncoding.DecodeString(*args.After)
		n, perr := strconv.Atoi(strings.TrimPrefix(string(b), "cursor:"))
		if err != nil || perr != nil || n < 0 {
			return nil, &gqlError{"INVALID_CURSOR_ARGUMENTS", fmt.Sprintf("`%s` does not appear to be a valid cursor.", *args.After)}
		}
		start = n
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	var roots []int64
	for id, c := range p.s.reviewCmt {
		if c.PR == p.key && c.InReplyTo == 0 {
			roots = append(roots, id)
		}
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i] < roots[j] })
	conn := &gqlThreadConn{total: int32(len(roots))}
	end := min(start+first, len(roots))
	for _, id := range roots[min(start, end):end] {
		conn.nodes = append(conn.nodes, p.s.thread(id))
	}
	conn.hasNext = end < len(roots)
	if end > start {
		c := base64.StdEncoding.EncodeToString([]byte("cursor:" + strconv.Itoa(end)))
		conn.end = &c
	}
	return conn, nil
}

type gqlThreadConn struct {
	nodes   []*gqlThread
	hasNext bool
	end     *string
	total   int32
}

func (c *gqlThreadConn) Nodes() *[]*gqlThread   { return &c.nodes }
func (c *gqlThreadConn) PageInfo() *gqlPageInfo { return &gqlPageInfo{c.hasNext, c.end} }
func (c *gqlThreadConn) TotalCount() int32      { return c.total }

type gqlPageInfo struct {
	hasNext bool
	end     *string
}

func (p *gqlPageInfo) HasNextPage() bool  { return p.hasNext }
func (p *gqlPageInfo) EndCursor() *string { return p.end }

type gqlThread struct {
	id       graphql.ID
	resolved bool
	path     string
	line     int32
	comments []*gqlComment
}

func (t *gqlThread) ID() graphql.ID   { return t.id }
func (t *gqlThread) IsResolved() bool { return t.resolved }
func (t *gqlThread) Path() string     { return t.path }
func (t *gqlThread) Line() *int32     { return &t.line }
func (t *gqlThread) Comments(args struct{ First *int32 }) (*gqlCommentConn, error) {
	n := len(t.comments)
	if args.First != nil {
		if *args.First < 0 || *args.First > 100 {
			return nil, &gqlError{"EXCESSIVE_PAGINATION", "Requesting up to 100 records on the `comments` connection is allowed; the request asked for more."}
		}
		n = min(n, int(*args.First))
	}
	nodes := t.comments[:n]
	return &gqlCommentConn{nodes: nodes, total: int32(len(t.comments))}, nil
}

type gqlCommentConn struct {
	nodes []*gqlComment
	total int32
}

func (c *gqlCommentConn) Nodes() *[]*gqlComment { return &c.nodes }
func (c *gqlCommentConn) TotalCount() int32     { return c.total }

type gqlComment struct {
	c   ReviewComment
	bot string
}

func (c *gqlComment) FullDatabaseID() *bigInt { b := bigInt(c.c.ID); return &b }
func (c *gqlComment) Body() string            { return c.c.Body }
func (c *gqlComment) Author() *gqlActor {
	return &gqlActor{login: c.c.Author, bot: c.c.Author == c.bot}
}

// gqlActor is an author: GraphQL names a bot without REST's "[bot]".
type gqlActor struct {
	login string
	bot   bool
}

func (a *gqlActor) Login() string {
	if a.bot {
		return strings.TrimSuffix(a.login, "[bot]")
	}
	return a.login
}
func (a *gqlActor) ToBot() (*gqlActor, bool)  { return a, a.bot }
func (a *gqlActor) ToUser() (*gqlActor, bool) { return a, !a.bot }

// bigInt is GitHub's BigInt: an integer sent as a string.
type bigInt int64

func (bigInt) ImplementsGraphQLType(name string) bool { return name == "BigInt" }
func (b *bigInt) UnmarshalGraphQL(v interface{}) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("BigInt: want a string, got %T", v)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	*b = bigInt(n)
	return err
}
func (b bigInt) MarshalJSON() ([]byte, error) { return json.Marshal(strconv.FormatInt(int64(b), 10)) }

func (q *gqlRoot) ResolveReviewThread(args struct {
	Input struct {
		ThreadID         graphql.ID
		ClientMutationID *string
	}
}) (*gqlResolved, error) {
	if q.s.cfg.Permissions["pull_requests"] != "write" {
		return nil, &gqlError{"FORBIDDEN", "Resource not accessible by integration"}
	}
	root, ok := rootOf(args.Input.ThreadID)
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	c := q.s.reviewCmt[root]
	if !ok || c == nil || c.InReplyTo != 0 || q.s.prs[c.PR] == nil || q.s.prs[c.PR].inst != q.inst {
		return nil, &gqlError{"NOT_FOUND", fmt.Sprintf("Could not resolve to a node with the global id of '%s'", args.Input.ThreadID)}
	}
	if q.s.resolved == nil {
		q.s.resolved = map[int64]bool{}
	}
	q.s.resolved[root] = true
	return &gqlResolved{thread: q.s.thread(root), id: args.Input.ClientMutationID}, nil
}

type gqlResolved struct {
	thread *gqlThread
	id     *string
}

func (r *gqlResolved) Thread() *gqlThread        { return r.thread }
func (r *gqlResolved) ClientMutationID() *string { return r.id }

// Resolved reports whether the thread of a root review comment is
// resolved.
func (s *Server) Resolved(root int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resolved[root]
}

// AddReply records a person's reply in a diff thread, as if they had
// posted it.
func (s *Server) AddReply(owner, repo string, n int, to int64, body, author string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	root := s.reviewCmt[to]
	s.reviewCmt[s.nextID] = &ReviewComment{ID: s.nextID, PR: key(owner, repo, n), InReplyTo: to, Path: root.Path, Line: root.Line, Side: root.Side, Body: body, Author: author, Created: s.cfg.NowFunc()}
	return s.nextID
}
