package ghapp_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

func TestContents(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, nil)
	ctx := context.Background()
	base, head := strings.Repeat("b", 40), strings.Repeat("a", 40)
	f.fake.SetFile(1, "acme", "api", "", ".prq.yaml", "hello\n")
	f.fake.SetFile(1, "acme", "api", head, ".prq.yaml", "changed on the head\n")
	f.fake.SetFile(1, "acme", "api", "", "big/x.bin", strings.Repeat("z", 1<<20+1))
	f.fake.SetFile(1, "acme", ".github", "", "prq.yaml", "org: defaults\n"+strings.Repeat("# a long comment line\n", 20))

	fc, err := f.client.Contents(ctx, "acme", "api", ".prq.yaml", base)
	if err != nil {
		t.Fatal(err)
	}
	// git hash-object of "hello\n"
	if string(fc.Content) != "hello\n" || fc.SHA != "ce013625030ba8dba906f756967f9e9ca394464a" || fc.Size != 6 || fc.Path != ".prq.yaml" {
		t.Errorf("at the base commit: %+v", fc)
	}
	if fc, err := f.client.Contents(ctx, "acme", "api", ".prq.yaml", head); err != nil || string(fc.Content) != "changed on the head\n" {
		t.Errorf("at the head: %q %v", fc.Content, err)
	}
	// a repository without pull requests, its content in wrapped base64
	if fc, err := f.client.Contents(ctx, "acme", ".github", "prq.yaml", ""); err != nil || !strings.HasPrefix(string(fc.Content), "org: defaults\n") || len(fc.Content) != fc.Size {
		t.Errorf("the organisation's file: %q %v", fc.Content, err)
	}
	for _, tc := range []struct{ repo, path, ref string }{
		{"api", ".github/prq.yaml", base}, // absent
		{"api", "big", ""},                // a directory
		{"nope", ".prq.yaml", ""},         // no such repository
	} {
		if _, err := f.client.Contents(ctx, "acme", tc.repo, tc.path, tc.ref); !errors.Is(err, ghapp.ErrNotFound) {
			t.Errorf("%s:%s: %v, want ErrNotFound", tc.repo, tc.path, err)
		}
	}
	if fc, err := f.client.Contents(ctx, "acme", "api", "big/x.bin", ""); !errors.Is(err, ghapp.ErrTooLarge) || fc.Size != 1<<20+1 || fc.Content != nil {
		t.Errorf("over 1 MB: %+v %v, want ErrTooLarge with its size", fc.Size, err)
	}
	other, _ := f.app.Client(2)
	if _, err := other.Contents(ctx, "acme", "api", ".prq.yaml", ""); !errors.Is(err, ghapp.ErrNotFound) {
		t.Errorf("another installation: %v, want ErrNotFound", err)
	}
	f.fake.FailFamily(fakegithub.FamilyContents, 403)
	if _, err := f.client.Contents(ctx, "acme", "api", ".prq.yaml", ""); !errors.Is(err, ghapp.ErrForbidden) {
		t.Errorf("without the contents permission: %v, want ErrForbidden", err)
	}
}

func TestPRLabelsAndBaseRef(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, nil)
	f.fake.SetLabels("acme", "api", 7, "bug", "no-review")
	f.fake.SetBaseRef("acme", "api", 7, "release/1.2")
	f.fake.SetDraft("acme", "api", 7, true)
	pr, err := f.client.PR(context.Background(), "acme", "api", 7)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr.Labels, []string{"bug", "no-review"}) || pr.BaseRef != "release/1.2" || !pr.Draft {
		t.Errorf("labels %v, base ref %q, draft %v", pr.Labels, pr.BaseRef, pr.Draft)
	}
}

func TestReact(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, nil)
	ctx := context.Background()
	issue := f.fake.AddComment("acme", "api", 7, "@prq-bot pause", "dev")
	diff := f.fake.AddReviewComment("acme", "api", 7, "a.go", 1, "@prq-bot help", "dev")
	for _, c := range []string{ghapp.ReactionTaken, ghapp.ReactionDone, ghapp.ReactionTaken} {
		if err := f.client.React(ctx, "acme", "api", issue, false, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.client.React(ctx, "acme", "api", diff, true, ghapp.ReactionRefused); err != nil {
		t.Fatal(err)
	}
	if got := f.fake.Reactions(issue); !reflect.DeepEqual(got, []string{"eyes", "rocket"}) {
		t.Errorf("conversation comment: %v, want eyes then rocket, each once", got)
	}
	if got := f.fake.Reactions(diff); !reflect.DeepEqual(got, []string{"confused"}) {
		t.Errorf("diff comment: %v", got)
	}
	if err := f.client.React(ctx, "acme", "api", 424242, false, "eyes"); !errors.Is(err, ghapp.ErrNotFound) {
		t.Errorf("a comment that is not there: %v, want ErrNotFound", err)
	}
	if err := f.client.React(ctx, "acme", "api", diff, false, "eyes"); !errors.Is(err, ghapp.ErrNotFound) {
		t.Errorf("a diff comment's id as a conversation comment: %v, want ErrNotFound", err)
	}
	if err := f.client.React(ctx, "acme", "api", issue, false, "thumbsup"); !errors.Is(err, ghapp.ErrUnprocessable) {
		t.Errorf("an unknown reaction: %v, want ErrUnprocessable", err)
	}
}
