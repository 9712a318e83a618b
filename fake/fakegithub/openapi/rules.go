package openapi

import (
	"fmt"
	"strings"
)

// Where GitHub's description and GitHub itself part, each narrowly and
// with the reason. Rules the description states only in prose are
// added (prose); the few places where GitHub takes what the schema
// refuses or names are relaxed (relax, repositoryAlias, acceptException).
// Notes from reading the description are in /work/shared/RESEARCH.md.

// repositoryAlias maps /repositories/{id}/… to /repos/{owner}/{repo}/…:
// GitHub's own Link headers page through such paths, which the
// description does not list (the repository named by its id).
func repositoryAlias(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/repositories/")
	if !ok {
		return "", false
	}
	id, tail, ok := strings.Cut(rest, "/")
	if !ok || id == "" || tail == "" {
		return "", false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return "/repos/{owner}/{repo}/" + tail, true
}

// preview is one of GitHub's API preview media types
// (application/vnd.github.<name>-preview, with +json or without): the
// previews graduated and GitHub answers them with JSON, which the
// description, written after, does not list. go-github v56 still asks
// for squirrel-girl-preview (reactions) when it lists issue comments.
func preview(mt string) bool {
	name, ok := strings.CutPrefix(strings.TrimSuffix(mt, "+json"), "application/vnd.github.")
	return ok && strings.HasSuffix(name, "-preview") && len(name) > len("-preview")
}

// acceptException: a pull request is served as a diff or a patch (the
// media types GitHub's REST documentation lists for pull requests in
// prose), though the description of GET …/pulls/{n} lists only JSON.
func acceptException(op *Operation, mt string) bool {
	if op.OperationID != "pulls/get" {
		return false
	}
	switch mt {
	case "application/vnd.github.diff", "application/vnd.github.patch", "application/vnd.github.v3.diff", "application/vnd.github.v3.patch":
		return true
	}
	return false
}

// relax drops the schema violations GitHub does not hold against a
// request. A reply in a review thread (POST …/pulls/{n}/comments with
// in_reply_to) needs only its body: the description requires commit_id
// and path of every review comment, but says "when using in_reply_to,
// all parameters other than body are ignored", and GitHub takes a reply
// without them.
func relax(op *Operation, body any, violations []string) []string {
	obj, _ := body.(map[string]any)
	if op.OperationID != "pulls/create-review-comment" || obj["in_reply_to"] == nil {
		return violations
	}
	var out []string
	for _, v := range violations {
		if v == "commit_id: is required" || v == "path: is required" {
			continue
		}
		out = append(out, v)
	}
	return out
}

// prose checks the rules GitHub's description gives in its text, not in
// its schemas, and GitHub enforces (422):
//   - a review whose event is COMMENT or REQUEST_CHANGES needs a body;
//   - a multi-line review comment (start_line) needs start_side, in a
//     review as for a single comment ("Required when using multi-line
//     comments");
//   - a review's comments take side and start_side LEFT or RIGHT, as a
//     single review comment's schema enumerates (the review's schema
//     leaves them open strings).
func prose(op *Operation, body any) []string {
	obj, _ := body.(map[string]any)
	if obj == nil {
		return nil
	}
	var out []string
	switch op.OperationID {
	case "pulls/create-review":
		if ev, _ := obj["event"].(string); ev == "COMMENT" || ev == "REQUEST_CHANGES" {
			if b, _ := obj["body"].(string); strings.TrimSpace(b) == "" {
				out = append(out, fmt.Sprintf("body: is required when event is %s", ev))
			}
		}
		comments, _ := obj["comments"].([]any)
		for i, c := range comments {
			cm, _ := c.(map[string]any)
			out = append(out, multiLine(fmt.Sprintf("comments[%d].", i), cm)...)
			for _, side := range []string{"side", "start_side"} {
				if v, ok := cm[side]; ok && v != "LEFT" && v != "RIGHT" {
					out = append(out, fmt.Sprintf("comments[%d].%s: %s is not one of [\"LEFT\",\"RIGHT\"]", i, side, show(v)))
				}
			}
		}
	case "pulls/create-review-comment":
		if obj["in_reply_to"] == nil {
			out = append(out, multiLine("", obj)...)
		}
	}
	return out
}

func multiLine(at string, c map[string]any) []string {
	if c == nil || c["start_line"] == nil {
		return nil
	}
	if _, ok := c["start_side"]; !ok {
		return []string{at + "start_side: is required with start_line (a multi-line comment)"}
	}
	return nil
}
