package admission

import "testing"

// The loops count the chat tickets that may still wait: a chat ticket
// counts, an attempt that admitted chats takes them off, one that found
// nothing waiting at all clears the count; batch tickets do not count.
func TestWakesCountWaitingChats(t *testing.T) {
	w := newWakes("me")
	w.hear("t|paid|10")
	if w.chatWaits() {
		t.Fatal("a batch ticket counts as a waiting chat")
	}
	w.hear("t|chat|11")
	w.hear("t|chat|12")
	if !w.chatWaits() {
		t.Fatal("chat tickets heard, none counted")
	}
	w.hear(announcement("other", 13, 5000, true, 1))
	if !w.chatWaits() {
		t.Fatal("one of two chats admitted, none left counted")
	}
	if w.leads() {
		t.Fatal("another process announced last, yet this one leads")
	}
	w.hear(announcement("me", 14, 5000, true, 1))
	if !w.leads() {
		t.Fatal("this process announced last, yet does not lead")
	}
	if w.chatWaits() {
		t.Fatal("both chats admitted, one still counted")
	}
	w.hear("t|chat|15")
	w.hear(announcement("other", 16, 0, true, 0)) // nothing waits at all
	if w.chatWaits() {
		t.Fatal("an attempt found nothing waiting, a chat still counted")
	}
	if any, _ := w.uncovered(); any {
		t.Fatal("a ticket registered before a complete attempt is not covered")
	}
	w.hear("t|chat|20")
	if any, chat := w.uncovered(); !any || !chat {
		t.Fatal("a chat ticket after the last attempt is not uncovered chat")
	}
}
