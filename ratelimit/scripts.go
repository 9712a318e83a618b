package ratelimit

// ScriptHashes names the limiter's Lua scripts by their SHA-1 (the
// EVALSHA a client sends), so a measurement can say which script Redis ran.
func ScriptHashes() map[string]string {
	return map[string]string{bucketScript.Hash(): "ratelimit.bucket", quotaScript.Hash(): "ratelimit.quota",
		windowLikeIncr.Hash(): "ratelimit.windowlike_incr", windowLikeGet.Hash(): "ratelimit.windowlike_get", autoGet.Hash(): "ratelimit.auto_get"}
}
