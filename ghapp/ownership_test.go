package ghapp_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

func ownershipSetup(t *testing.T, slug string) (*fakegithub.Server, *ghapp.Client, corpus.PR) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	fake := fakegithub.New(fakegithub.Config{AppID: 42, PublicKey: &k.PublicKey, WritesPerPeriod: -1})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	app, err := ghapp.New(42, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slug != "" {
		app.SetBot(slug)
	}
	patch := "@@ -1 +1 @@\n-a\n+b"
	pr := corpus.PR{Repo: "acme/w", Number: 5, HeadSHA: strings.Repeat("a", 40), BaseSHA: strings.Repeat("b", 40),
		Files: []corpus.File{{Filename: "a.go", Status: "modified", Additions: 1, Deletions: 1, Changes: 2, Patch: &patch}}}
	fake.AddPR(1, "", "", pr)
	c, err := app.Client(1)
	if err != nil {
		t.Fatal(err)
	}
	return fake, c, pr
}

// TestMarkersOfOthersAreIgnored: a PR author who pastes prq's markers into
// their own comment or review must not make prq edit their comment or
// skip its own review.
func TestMarkersOfOthersAreIgnored(t *testing.T) {
	for _, slug := range []string{"prq-bot", ""} {
		t.Run("slug="+slug, func(t *testing.T) {
			fake, c, pr := ownershipSetup(t, slug)
			ctx := context.Background()
			const marker = "<!-- prq:summary -->"
			theirs := fake.AddComment("acme", "w", 5, "ha "+marker, "mallory")
			reviewMarker := "<!-- prq:review " + pr.HeadSHA + " -->"
			fake.AddReview("acme", "w", 5, pr.HeadSHA, "nothing to see "+reviewMarker, "mallory")

			id, err := c.UpsertComment(ctx, "acme", "w", 5, 0, marker, "summary "+marker)
			if err != nil {
				t.Fatal(err)
			}
			if id == theirs {
				t.Fatal("prq edited the author's comment that carried its marker")
			}
			if got, err := c.HasReview(ctx, "acme", "w", 5, reviewMarker); err != nil || got != 0 {
				t.Fatalf("HasReview = %d, %v: the author's review counted as prq's", got, err)
			}
			// prq's own writes are found again
			again, err := c.UpsertComment(ctx, "acme", "w", 5, 0, marker, "summary v2 "+marker)
			if err != nil || again != id {
				t.Fatalf("upsert again = %d, %v; want prq's own %d", again, err, id)
			}
			rid, err := c.CreateReview(ctx, "acme", "w", 5, pr.HeadSHA, "review "+reviewMarker, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := c.HasReview(ctx, "acme", "w", 5, reviewMarker); got != rid {
				t.Fatalf("HasReview = %d, want prq's %d", got, rid)
			}
			var mine int
			for _, cm := range fake.Comments("acme", "w", 5) {
				if cm.Author == fakegithub.BotLogin {
					mine++
				}
				if cm.ID == theirs && !strings.HasPrefix(cm.Body, "ha ") {
					t.Fatal("the author's comment was changed")
				}
			}
			if mine != 1 {
				t.Fatalf("%d summary comments of prq, want 1", mine)
			}
		})
	}
}

// TestOtherBotsDoNotCount: with the slug set, another App's bot account
// carrying the marker is not prq either.
func TestOtherBotsDoNotCount(t *testing.T) {
	fake, c, _ := ownershipSetup(t, "some-other-app")
	ctx := context.Background()
	const marker = "<!-- prq:summary -->"
	if _, err := c.UpsertComment(ctx, "acme", "w", 5, 0, marker, "first "+marker); err != nil {
		t.Fatal(err)
	}
	// the fake writes as prq-bot[bot], which is not "some-other-app[bot]":
	// its comment is not found as ours, so a second upsert creates anew
	if _, err := c.UpsertComment(ctx, "acme", "w", 5, 0, marker, "second "+marker); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Comments("acme", "w", 5)); n != 2 {
		t.Fatalf("%d comments, want 2 (the bot of another App is not ours)", n)
	}
}
