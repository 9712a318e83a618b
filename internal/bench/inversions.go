package bench

import "time"

// inversions counts batch calls made while a chat job of the same model
// waited that chat's cap (scheduler.chat_cap) entitled to go first. While
// chat waits, admission serves the two classes by start-time fair
// queuing with weights cap and 1-cap: a batch job may go while chat has
// had at least its share of the tokens since the oldest waiting chat
// arrived (batch/(1-cap) <= chat/cap), or once it has waited past the
// aging bound. With cap 1, any batch call while chat waits counts.
func inversions(calls []callRecord, chatCap float64, aging time.Duration) int {
	n := 0
	for _, c := range calls {
		if c.Class == "chat" || c.Class == "" || c.Outcome == "429" {
			continue
		}
		if aging > 0 && c.At-c.Created > aging.Milliseconds() {
			continue
		}
		oldest := int64(-1) // the oldest chat of the model waiting at c's call
		for _, ch := range calls {
			if ch.Class == "chat" && ch.Outcome != "429" && ch.Model == c.Model && ch.Created < c.At && ch.At > c.At &&
				(oldest < 0 || ch.Created < oldest) {
				oldest = ch.Created
			}
		}
		if oldest < 0 {
			continue
		}
		if chatCap >= 1 {
			n++
			continue
		}
		var chat, batch float64 // tokens called since the oldest waiting chat arrived
		for _, x := range calls {
			if x.Model != c.Model || x.Outcome == "429" || x.At < oldest || x.At >= c.At || x.Class == "" {
				continue
			}
			if x.Class == "chat" {
				chat += float64(x.Tokens)
			} else {
				batch += float64(x.Tokens)
			}
		}
		if batch/(1-chatCap) > chat/chatCap {
			n++
		}
	}
	return n
}
