package webhook

import (
	"strings"

	"github.com/prq-dev/prq/jobs"
)

// commandOf returns the command a comment gives (command), or else one
// that takes arguments: a line that is the bot's mention then `learn`,
// `learnings` or `forget`, the arguments being the rest of that line and
// the lines after it (learn) or the rest of the line (forget), as
// written.
func (h *Handler) commandOf(body string) (name, args string, ok bool) {
	if name, ok := h.command(body); ok {
		return name, "", true
	}
	if h.cfg.AppSlug == "" {
		return "", "", false
	}
	at := "@" + strings.ToLower(h.cfg.AppSlug)
	lines := strings.Split(body, "\n")
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if len(line) <= len(at) || !strings.EqualFold(line[:len(at)], at) || (line[len(at)] != ' ' && line[len(at)] != '\t') {
			continue
		}
		word, rest, _ := strings.Cut(strings.TrimSpace(line[len(at):]), " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToLower(strings.TrimRight(word, ".!:")) {
		case jobs.CommandLearnings:
			if rest == "" {
				return jobs.CommandLearnings, "", true
			}
		case jobs.CommandForget:
			if rest != "" {
				return jobs.CommandForget, rest, true
			}
		case jobs.CommandLearn:
			text := strings.TrimSpace(strings.Join(append([]string{rest}, lines[i+1:]...), "\n"))
			if text != "" {
				return jobs.CommandLearn, text, true
			}
		}
	}
	return "", "", false
}

// mayChange reports whether a commenter of association may give a
// command: learn and forget change what every later review of the
// repository is told, so they take a maintainer (OWNER, MEMBER or
// COLLABORATOR), and with --org, which reaches every repository of the
// installation, an OWNER or MEMBER of the organisation; the pull
// request's author alone is not enough. Other commands are for whoever
// may chat.
func mayChange(name, args, association string) bool {
	if name != jobs.CommandLearn && name != jobs.CommandForget {
		return true
	}
	a := strings.ToUpper(association)
	if org, _ := jobs.OrgArgs(args); org {
		return a == "OWNER" || a == "MEMBER"
	}
	return a == "OWNER" || a == "MEMBER" || a == "COLLABORATOR"
}
