package admission

import (
	"context"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
)

// luaDecode runs ticket.lua's decode on Redis and returns its fields in
// storedTicket's order, as strings, exactly as Lua holds them.
var luaDecode = redis.NewScript(ticketLua + `
local t = decode(ARGV[1], ARGV[2])
return {t.id, t.class, t.tenant, t.rank, string.format('%d', t.tokens), string.format('%d', t.enq), t.queue, string.format('%.3f', t.prio),
  string.format('%d', t.input), string.format('%d', t.output)}
`)

var luaStamp = redis.NewScript(ticketLua + `
return stamp(ARGV[1], ARGV[2])
`)

// TestTicketCodecRoundTrip: Go encodes, Lua (on the real Redis) decodes,
// Go rebuilds the stored ticket from Lua's fields and decodes Go's
// encoding; all three must agree field by field.
func TestTicketCodecRoundTrip(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	cases := map[string]Ticket{
		"chat":             {ID: "chat-1.o.r.7-99", Queue: "chat", Model: "m", Class: ClassChat, Tenant: "42", Tokens: 1200},
		"batch mid-PR":     {ID: "review-1.o.r.7-abc-3", Queue: "paid", Model: "m", Class: "paid", Tenant: "1", PRSeq: 1_700_000_000_123, Index: 3, Total: 9, Tokens: 5000, Enqueued: time.UnixMicro(1_900_000_000_123_456)},
		"last file":        {ID: "x", Queue: "free", Model: "m", Class: "free", Tenant: "t", Index: 9, Total: 10, Tokens: 0},
		"empty tenant":     {ID: "y", Queue: "trial", Model: "m", Class: "trial", Index: 1, Total: 3, Tokens: 7},
		"unicode and dots": {ID: "z.ü", Queue: "trial", Model: "m", Class: "trial", Tenant: "ténant.name", Tokens: 1 << 40},
		"split":            {ID: "s", Queue: "paid", Model: "m", Class: "paid", Tenant: "1", Tokens: 3300, Output: 300},
		"all output":       {ID: "o", Queue: "chat", Model: "m", Class: ClassChat, Tenant: "1", Tokens: 512, Output: 512},
	}
	for name, tk := range cases {
		t.Run(name, func(t *testing.T) {
			if err := tk.validate(); err != nil {
				t.Fatal(err)
			}
			want := tk.stored()
			enc := encodeTicket(want)
			got, err := decodeTicket(enc)
			if err != nil {
				t.Fatal(err)
			}
			// prio travels with 3 decimals
			want.Prio, _ = strconv.ParseFloat(strconv.FormatFloat(want.Prio, 'f', 3, 64), 64)
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("Go decode of %q:\n got %+v\nwant %+v", enc, got, want)
			}
			f, err := luaDecode.Run(ctx, rdb, []string{"{codec}"}, tk.ID, enc).StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			if f[0] != tk.ID {
				t.Fatalf("Lua id %q, want %q", f[0], tk.ID)
			}
			tokens, _ := strconv.ParseInt(f[4], 10, 64)
			enq, _ := strconv.ParseInt(f[5], 10, 64)
			prio, _ := strconv.ParseFloat(f[7], 64)
			// input and output: the parts when split, else all tokens each
			in, _ := strconv.ParseInt(f[8], 10, 64)
			out, _ := strconv.ParseInt(f[9], 10, 64)
			wantIn, wantOut := tk.Tokens-tk.Output, tk.Output
			if tk.Output == 0 {
				wantIn, wantOut = tk.Tokens, tk.Tokens
			}
			if in != wantIn || out != wantOut {
				t.Fatalf("Lua decode of %q: input %d output %d, want %d and %d", enc, in, out, wantIn, wantOut)
			}
			fromLua := storedTicket{Class: f[1], Tenant: f[2], Rank: f[3], Tokens: tokens, EnqueuedUS: enq, Queue: f[6], Prio: prio}
			if in+out == tokens && out > 0 {
				fromLua.Output = out
			}
			if !reflect.DeepEqual(want, fromLua) {
				t.Fatalf("Lua decode of %q:\n got %+v\nwant %+v", enc, fromLua, want)
			}
			if again := encodeTicket(fromLua); again != enc {
				t.Fatalf("Go → Lua → Go: %q, want %q", again, enc)
			}
		})
	}
}

// TestTicketStamp: Lua's stamp sets only the enqueue time, and Go still
// decodes the result.
func TestTicketStamp(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	tk := Ticket{ID: "a", Queue: "paid", Model: "m", Class: "paid", Tenant: "1", PRSeq: 5, Index: 2, Total: 4, Tokens: 300, Output: 100}
	want := tk.stored()
	enc, err := luaStamp.Run(context.Background(), rdb, []string{"{codec}"}, encodeTicket(want), "1900000000000001").Text()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeTicket(enc)
	if err != nil {
		t.Fatalf("decode %q: %v", enc, err)
	}
	want.EnqueuedUS = 1900000000000001
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("stamped %q:\n got %+v\nwant %+v", enc, got, want)
	}
}

func TestDecodeTicketRefusesBadInput(t *testing.T) {
	t.Parallel()
	for name, enc := range map[string]string{
		"empty":        "",
		"short":        "paid|1|000|10|0|paid",
		"tokens":       "paid|1|000|ten|0|paid|1.000",
		"enqueue time": "paid|1|000|10|now|paid|1.000",
		"priority":     "paid|1|000|10|0|paid|high",
		"output":       "paid|1|000|10|0|paid|1.000|many",
	} {
		if _, err := decodeTicket(enc); err == nil {
			t.Errorf("%s: decoded %q", name, enc)
		}
	}
}

func TestKeySetOrderMatchesLua(t *testing.T) {
	t.Parallel()
	k := keySet{State: "1", Tickets: "2", Lex: "3", Chat: "4", HeadsPaid: "5", HeadsTrial: "6", HeadsFree: "7", VirtualTimes: "8",
		Age: "9", Released: "10", Stats: "11", Reservations: "12", ReservationAge: "13", Delayed: "14", Paused: "15", Waits: "16",
		HeadsChat: "17", BatchAge: "18"}
	for i, key := range k.list() {
		if key != strconv.Itoa(i+1) {
			t.Fatalf("KEYS[%d] is %s", i+1, key)
		}
	}
}
