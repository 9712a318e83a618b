package admission

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/ratelimit"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// lua returns one of admission's Lua files.
func lua(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("admission: no Lua file " + name) // a build without it cannot admit: fail at start
	}
	return string(b)
}

var (
	ticketLua = lua("ticket.lua")
	// sharedFiles are admission's files every operation's script starts
	// with, after the bucket library, in order (prelude.lua's header
	// says what each gives the next; TestLuaLayout checks it).
	sharedFiles = []string{"ticket.lua", "prelude.lua", "reservation.lua", "memo.lua", "memo_hash.lua", "order.lua"}
	// shared is what every operation's script starts with.
	shared = ratelimit.LuaLibrary + "\n" + strings.Join(sharedParts(), "\n")
)

func sharedParts() []string {
	parts := make([]string, len(sharedFiles))
	for i, f := range sharedFiles {
		parts[i] = lua(f)
	}
	return parts
}

// opScript builds one operation's script: the shared part, OP (the
// operation's name, for a file serving two) and the operation's files,
// so one EVALSHA decides and charges atomically.
func opScript(op string, files ...string) *redis.Script {
	parts := []string{shared, "local OP = '" + op + "'"}
	for _, f := range files {
		parts = append(parts, lua(f))
	}
	return redis.NewScript(strings.Join(parts, "\n"))
}

// opFiles are each operation's own files, after the shared ones: one
// script per operation (each file's header says its ARGV and reply;
// prelude.lua's, the KEYS they all take: keyTable).
var opFiles = map[string][]string{
	"register": {"register.lua"}, "cancel": {"cancel.lua"}, "delay": {"delay.lua"},
	"started": {"start.lua"}, "calling": {"start.lua"}, "sent": {"sent.lua"},
	"settle": {"settle.lua"}, "expire": {"expire.lua"}, "admit": {"admit_pick.lua", "admit_backfill.lua", "admit.lua"},
	"position": {"position.lua"}, "stats": {"stats.lua"},
}

var (
	registerScript = opScript("register", opFiles["register"]...)
	cancelScript   = opScript("cancel", opFiles["cancel"]...)
	delayScript    = opScript("delay", opFiles["delay"]...)
	startedScript  = opScript("started", opFiles["started"]...)
	callingScript  = opScript("calling", opFiles["calling"]...)
	sentScript     = opScript("sent", opFiles["sent"]...)
	settleScript   = opScript("settle", opFiles["settle"]...)
	expireScript   = opScript("expire", opFiles["expire"]...)
	admitScript    = opScript("admit", opFiles["admit"]...)
	positionScript = opScript("position", opFiles["position"]...)
	statsScript    = opScript("stats", opFiles["stats"]...)
)

// ScriptHashes names admission's Lua scripts by their SHA-1 (the EVALSHA
// a client sends), so a measurement can say which script Redis ran.
func ScriptHashes() map[string]string {
	m := map[string]string{processScript.Hash(): "admission.process", releaseScript.Hash(): "admission.release"}
	for name, s := range map[string]*redis.Script{
		"register": registerScript, "cancel": cancelScript, "delay": delayScript, "started": startedScript,
		"calling": callingScript, "sent": sentScript, "settle": settleScript, "expire": expireScript,
		"admit": admitScript, "position": positionScript, "stats": statsScript,
	} {
		m[s.Hash()] = "admission " + name
	}
	return m
}
