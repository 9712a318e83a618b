package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// TestRelay pins the gateway's one reader of a provider's server-sent
// events: lines come whole however the reads split them (here a byte a
// read), without their line ends, a blank line as an empty one; a last
// line cut before its line end is handed over before io.EOF; a line over
// the cap ends the stream with errLineTooLong; the caller's false stops
// it (err nil) without reading further; an idle stream is cancelled and
// said to be idle.
func TestRelay(t *testing.T) {
	t.Parallel()
	g := &Gateway{cfg: Config{StreamIdle: time.Hour, MaxLine: 40}}
	run := func(body io.Reader, stopAt int) ([]string, bool, error) {
		var lines []string
		idle, err := g.relay(&http.Response{Body: io.NopCloser(body)}, func() {}, func(l []byte) bool {
			lines = append(lines, string(l))
			return len(lines) != stopAt
		})
		return lines, idle, err
	}
	stream := "event: message_start\r\ndata: {\"type\":\"message_start\"}\r\n\r\n" +
		"data: {\"type\":\"message_stop\"}\n\ndata: {\"type\":\"cut"
	want := []string{"event: message_start", `data: {"type":"message_start"}`, "", `data: {"type":"message_stop"}`, "", `data: {"type":"cut`}
	lines, idle, err := run(iotest.OneByteReader(strings.NewReader(stream)), -1)
	if !errors.Is(err, io.EOF) || idle || strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("split a byte a read: lines %q, idle %v, err %v; want %q, io.EOF", lines, idle, err, want)
	}

	rd := strings.NewReader(stream)
	lines, _, err = run(iotest.OneByteReader(rd), 2)
	if err != nil || len(lines) != 2 || rd.Len() == 0 {
		t.Fatalf("stopped at the second line: lines %q, err %v, %d bytes left", lines, err, rd.Len())
	}

	lines, _, err = run(strings.NewReader("data: short\n"+"data: "+strings.Repeat("x", 60)+"\ndata: after\n"), -1)
	if !errors.Is(err, errLineTooLong) || len(lines) != 1 {
		t.Fatalf("a line over the cap: lines %q, err %v; want one line, errLineTooLong", lines, err)
	}

	g2 := &Gateway{cfg: Config{StreamIdle: time.Millisecond, MaxLine: 40}}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	go func() { <-ctx.Done(); pw.CloseWithError(ctx.Err()) }() // as the transport does when its request is cancelled
	pw2 := make(chan struct{})
	go func() { pw.Write([]byte("data: {}\n")); close(pw2) }()
	idle, err = g2.relay(&http.Response{Body: pr}, cancel, func([]byte) bool { return true })
	<-pw2
	if !idle || !errors.Is(err, context.Canceled) {
		t.Fatalf("an idle stream: idle %v, err %v; want idle, context.Canceled", idle, err)
	}
}
