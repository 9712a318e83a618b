package workers

// ScriptHashes names the workers' Lua scripts by their SHA-1 (the
// EVALSHA a client sends), so a measurement can say which script Redis ran.
func ScriptHashes() map[string]string {
	return map[string]string{lane.Hash(): "workers.write_lane", attemptsAdd.Hash(): "workers.attempts", attemptsWait.Hash(): "workers.attempts_wait"}
}
