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
	// shared is what every operation's script starts with: the bucket
	// library, the ticket codec and what the operations share.
	shared = ratelimit.LuaLibrary + "\n" + ticketLua + "\n" + lua("order.lua")
)

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

// One script per operation (each file's header says its ARGV and reply;
// order.lua's, the KEYS they all take: keySet.list).
var (
	registerScript = opScript("register", "register.lua")
	cancelScript   = opScript("cancel", "cancel.lua")
	delayScript    = opScript("delay", "delay.lua")
	startedScript  = opScript("started", "start.lua")
	callingScript  = opScript("calling", "start.lua")
	sentScript     = opScript("sent", "sent.lua")
	arrivedScript  = opScript("arrived", "arrived.lua")
	settleScript   = opScript("settle", "settle.lua")
	admitScript    = opScript("admit", "admit_pick.lua", "admit_backfill.lua", "admit.lua")
	positionScript = opScript("position", "position.lua")
	statsScript    = opScript("stats", "stats.lua")
)

// ScriptHashes names admission's Lua scripts by their SHA-1 (the EVALSHA
// a client sends), so a measurement can say which script Redis ran.
func ScriptHashes() map[string]string {
	m := map[string]string{processScript.Hash(): "admission.process"}
	for name, s := range map[string]*redis.Script{
		"register": registerScript, "cancel": cancelScript, "delay": delayScript, "started": startedScript,
		"calling": callingScript, "sent": sentScript, "arrived": arrivedScript, "settle": settleScript,
		"admit": admitScript, "position": positionScript, "stats": statsScript,
	} {
		m[s.Hash()] = "admission " + name
	}
	return m
}
