package gitlab_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegitlab"
	"github.com/prq-dev/prq/gitlab"
	"github.com/prq-dev/prq/jobs"
)

// A tenant's client reads a merge request of a project under its group,
// on any GitLab (here a fake one).
func Example() {
	fake := fakegitlab.New(fakegitlab.Config{})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	fake.AddToken("glpat-example", "group_7_bot_1")
	fake.AddProject("acme/api", "main", "base1", nil)
	fake.AddMR("acme/api", 3, "alice", corpus.PR{Title: "Faster", HeadSHA: "head1", BaseSHA: "base1"})

	tenants, err := gitlab.New(gitlab.Config{BaseURL: srv.URL, Tenants: []gitlab.Tenant{{ID: 7, Path: "acme", Token: "glpat-example"}}})
	if err != nil {
		panic(err)
	}
	tenant, _ := jobs.GitLabTenant(7)
	c, err := tenants.Client(tenant)
	if err != nil {
		panic(err)
	}
	mr, err := c.PR(context.Background(), "acme", "api", 3)
	fmt.Println(mr.Title, mr.State, mr.HeadSHA, mr.BaseRef, err)
	// Output: Faster open head1 main <nil>
}
