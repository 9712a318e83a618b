package admission

// ScriptHashes names admission's Lua scripts by their SHA-1 (the EVALSHA
// a client sends), so a measurement can say which script Redis ran.
func ScriptHashes() map[string]string {
	return map[string]string{script.Hash(): "admission", processScript.Hash(): "admission.process"}
}
