package forge

// OwnComment is one of the bot's own diff comments on a change request
// (a finding, or a reply in a thread).
type OwnComment struct {
	ID   int64
	Body string
}

// Votes are the people's 👍 and 👎 on a comment, by login: each person
// once, the bot's own left out. A person who put both on the comment is
// in neither: their vote says nothing.
type Votes struct {
	Up, Down []string
}

// Vote is one person's 👍 (Up) or 👎 on a comment, as a forge lists it.
type Vote struct {
	Who string
	Up  bool
}

// CountVotes makes Votes of a comment's 👍 and 👎 as listed (the bot's
// own already left out): a person counts once, and not at all when
// they gave both.
func CountVotes(vs []Vote) Votes {
	gave := map[string][2]bool{} // who: [up, down]
	var order []string
	for _, v := range vs {
		g, seen := gave[v.Who]
		if !seen {
			order = append(order, v.Who)
		}
		if v.Up {
			g[0] = true
		} else {
			g[1] = true
		}
		gave[v.Who] = g
	}
	var out Votes
	for _, who := range order {
		switch g := gave[who]; {
		case g[0] && !g[1]:
			out.Up = append(out.Up, who)
		case g[1] && !g[0]:
			out.Down = append(out.Down, who)
		}
	}
	return out
}
