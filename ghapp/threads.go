package ghapp

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/prq-dev/prq/forge"
)

// ReviewThread is a pull request's diff thread as GitHub's GraphQL API
// has it (REST has no threads and cannot resolve one).
type ReviewThread = forge.ReviewThread

// ThreadComment is one comment of a thread.
type ThreadComment = forge.ThreadComment

// threadsQuery reads 50 threads a page and each thread's first 20
// comments (a thread with more has people in it).
const threadsQuery = `query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 50, after: $after) {
        nodes {
          id
          isResolved
          comments(first: 20) {
            totalCount
            nodes { fullDatabaseId body author { __typename login } }
          }
        }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
}`

// ReviewThreads returns every diff thread of a pull request.
func (c *Client) ReviewThreads(ctx context.Context, owner, repo string, n int) ([]ReviewThread, error) {
	var out []ReviewThread
	var after *string
	for {
		var data struct {
			Repository *struct {
				PullRequest *struct {
					ReviewThreads struct {
						Nodes []struct {
							ID         string `json:"id"`
							IsResolved bool   `json:"isResolved"`
							Comments   struct {
								TotalCount int `json:"totalCount"`
								Nodes      []struct {
									FullDatabaseID string `json:"fullDatabaseId"`
									Body           string `json:"body"`
									Author         *struct {
										Typename string `json:"__typename"`
										Login    string `json:"login"`
									} `json:"author"`
								} `json:"nodes"`
							} `json:"comments"`
						} `json:"nodes"`
						PageInfo struct {
							HasNextPage bool    `json:"hasNextPage"`
							EndCursor   *string `json:"endCursor"`
						} `json:"pageInfo"`
					} `json:"reviewThreads"`
				} `json:"pullRequest"`
			} `json:"repository"`
		}
		if err := c.graphql(ctx, "review threads", threadsQuery, map[string]any{"owner": owner, "name": repo, "number": n, "after": after}, &data); err != nil {
			return nil, err
		}
		if data.Repository == nil || data.Repository.PullRequest == nil {
			return nil, fmt.Errorf("review threads: %w", ErrNotFound)
		}
		rt := data.Repository.PullRequest.ReviewThreads
		for _, t := range rt.Nodes {
			th := ReviewThread{ID: t.ID, Resolved: t.IsResolved, More: t.Comments.TotalCount > len(t.Comments.Nodes)}
			for _, cm := range t.Comments.Nodes {
				id, _ := strconv.ParseInt(cm.FullDatabaseID, 10, 64)
				ours := cm.Author != nil && c.oursByLogin(cm.Author.Typename, cm.Author.Login)
				th.Comments = append(th.Comments, ThreadComment{ID: id, Body: cm.Body, Ours: ours})
			}
			out = append(out, th)
		}
		if !rt.PageInfo.HasNextPage || rt.PageInfo.EndCursor == nil {
			return out, nil
		}
		after = rt.PageInfo.EndCursor
	}
}

// oursByLogin is ours for an author as GraphQL names it: a Bot's login
// there lacks REST's "[bot]".
func (c *Client) oursByLogin(typename, login string) bool {
	if typename != "Bot" {
		return false
	}
	bot := ""
	if c.app != nil {
		bot = c.app.botLogin()
	}
	return bot == "" || strings.EqualFold(login+"[bot]", bot) || strings.EqualFold(login, bot)
}

const resolveMutation = `mutation($id: ID!) {
  resolveReviewThread(input: {threadId: $id}) { thread { id isResolved } }
}`

// ResolveThread resolves a diff thread (resolving a resolved one changes
// nothing).
func (c *Client) ResolveThread(ctx context.Context, threadID string) error {
	var data struct {
		ResolveReviewThread *struct {
			Thread struct {
				IsResolved bool `json:"isResolved"`
			} `json:"thread"`
		} `json:"resolveReviewThread"`
	}
	if err := c.graphql(ctx, "resolve thread", resolveMutation, map[string]any{"id": threadID}, &data); err != nil {
		return err
	}
	if data.ResolveReviewThread == nil || !data.ResolveReviewThread.Thread.IsResolved {
		return fmt.Errorf("resolve thread %s: GitHub did not resolve it", threadID)
	}
	return nil
}

// GraphQLError is an error GitHub's GraphQL API answered with (HTTP 200).
type GraphQLError struct {
	Op, Type, Message string
}

func (e *GraphQLError) Error() string {
	return fmt.Sprintf("ghapp: %s: %s (%s)", e.Op, e.Message, e.Type)
}

// Unwrap makes a NOT_FOUND an ErrNotFound and a FORBIDDEN an ErrForbidden.
func (e *GraphQLError) Unwrap() error {
	switch e.Type {
	case "NOT_FOUND":
		return ErrNotFound
	case "FORBIDDEN":
		return ErrForbidden
	}
	return nil
}

// graphql makes one GraphQL request: the API's /graphql (an Enterprise
// Server's /api/graphql), with the installation's token, its HTTP errors
// and rate limits classified as REST's are.
func (c *Client) graphql(ctx context.Context, op, query string, vars map[string]any, out any) error {
	u := "graphql"
	if strings.HasSuffix(c.gh.BaseURL.Path, "/api/v3/") {
		u = "../graphql"
	}
	req, err := c.gh.NewRequest("POST", u, map[string]any{"query": query, "variables": vars})
	if err != nil {
		return fmt.Errorf("ghapp: %s: %w", op, err)
	}
	var body struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	resp, err := c.gh.Do(ctx, req, &body)
	if err != nil {
		return classify(op, resp, err)
	}
	if len(body.Errors) > 0 {
		return &GraphQLError{Op: op, Type: body.Errors[0].Type, Message: body.Errors[0].Message}
	}
	if err := json.Unmarshal(body.Data, out); err != nil {
		return fmt.Errorf("ghapp: %s: %w", op, err)
	}
	return nil
}
