package store

// ScriptHashes names the store's Lua scripts by their SHA-1 (the EVALSHA
// a client sends), so a measurement can say which script Redis ran.
func ScriptHashes() map[string]string {
	return map[string]string{chatLimitScript.Hash(): "store.chatlimit", completeScript.Hash(): "store.complete", startScript.Hash(): "store.start",
		finalizedScript.Hash(): "store.finalized", markStuckScript.Hash(): "store.stuck", unlockScript.Hash(): "store.unlock", lockScript.Hash(): "store.lock",
		addLearningScript.Hash(): "store.learn_add", removeLearningScript.Hash(): "store.learn_remove", votesScript.Hash(): "store.votes"}
}
