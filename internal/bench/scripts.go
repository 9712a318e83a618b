package bench

import (
	"crypto/sha1"
	"encoding/hex"
	"maps"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// asynqVersion is the asynq release asynqScripts was read from; the
// test reads that release's source in the module cache and fails when
// the table and the source disagree (an upgrade renames or edits a script).
const asynqVersion = "v0.26.0"

// asynqScripts names asynq's Lua scripts (internal/rdb, unexported) by
// the SHA-1 of their source: go-redis's EVALSHA hash. Scripts with the
// same source share one entry, their names joined by "/".
var asynqScripts = map[string]string{
	"074af2c5a4623800684c1b0e4e328c2500f06815": "asynq.addToGroup",
	"0c80fc1868e3aae205155ae2017ce995a3a7cec0": "asynq.memoryUsage",
	"0f24d56b49f2c17216165b5df7914bc75b10c33e": "asynq.archiveAllAggregating",
	"117dca952700588e559c7ace20b925096d587974": "asynq.markAsComplete",
	"1241eaa1c73409baaf1fea0c08d203a4911bda15": "asynq.done",
	"1463a65d3fd6698099862e1314658984affe6ed7": "asynq.getTaskInfo",
	"16988a462595f6ee317be300951533b004f27f5c": "asynq.listLeaseExpired",
	"1d0a1f59e02d7de4c1ffdc680ba4f5984b1a590c": "asynq.runAll",
	"21ba63720a304c8939d592261cb5f6aeacdecad1": "asynq.historicalStats",
	"297b3f9abfd963a3316434ef9d88fc5bf8a7ddc3": "asynq.enqueueUnique",
	"2fb646810e3433bbe85fba1a6b407eb3eced7b63": "asynq.runTask",
	"313393fb34cf7668d3ae712d88666ce651da3861": "asynq.writeSchedulerEntries",
	"3c8548ad44d0dfcfde50f07ea9271d77f656042c": "asynq.writeServerState",
	"49c4326d80c1db9c476da2aa7f4438d03688f82b": "asynq.deleteExpiredCompletedTasks",
	"522b1a6ae66fe79ea2f24a9af58798ab71879035": "asynq.forward",
	"5feb3e91ca9086f0335575fa366ac2b94ec7b886": "asynq.recordSchedulerEnqueueEvent",
	"65fa409c88198a681c53e0892d8276eca0145694": "asynq.retry",
	"74ba718a5ed06d87a29e289ce500f34eac8759fc": "asynq.readAggregationSet",
	"767783fddcb7e4702c368fd352ae6a3d9393d273": "asynq.groupStats",
	"79cf8dbc80deca37314fdfdeb9fe33a12c9baad7": "asynq.clearServerState",
	"7c08714194a1ed81153180b36590c51f1ccd7d42": "asynq.reclaimStateAggregationSets",
	"7f02b3d3e0a1e6e4ad5aaac4a558573b7b5aa95e": "asynq.archiveAll",
	"8495598cb6d9a2efdaf2ae98021a8f4ef1803b3d": "asynq.currentStats",
	"87a4d4356874805c7c2132b517c0587b9021aba2": "asynq.deleteAll",
	"8c58fe6e892f2c0a29249a47799023654d4551c9": "asynq.deleteAllPending",
	"8ce4326dbba042f10ec098fa779168e0a9e8c6c8": "asynq.listZSetEntries",
	"8ce6b38a99b73194585c251eb3c2a89559f37a87": "asynq.schedule",
	"95d6ff8ea96c4e9441a0d202a7babf13c5421285": "asynq.runAllAggregating",
	"98d28b42650870a743450ffda9791e9e19c6991b": "asynq.enqueue",
	"9c3b1eb9947ce2ee5304ac013a0a365ec364fd2d": "asynq.archive",
	"a095473ab1d8e275758ea446baa43bb582eac0a8": "asynq.removeQueueForce",
	"a0bdc8d8212813666a7df7c612f4b6ee09df0b2d": "asynq.updateTaskPayload",
	"a2631c71357a54b4c3e7450b1757e7f3f49d6c81": "asynq.doneUnique",
	"a3812898e6caa8ef58d4cda34cd41a1023157e43": "asynq.aggregationCheck",
	"a8153319360adc71cdc370107f8ab9786f204765": "asynq.dequeue",
	"c3183bd2c882c715c12e3e44b9c09df7d91de1ad": "asynq.archiveTask",
	"c78daecbbe3c90b1d8d3470c5c68132818fbdf21": "asynq.archiveAllPending",
	"ce6833ccce362a8c0ee53beee413341daf52e39c": "asynq.markAsCompleteUnique",
	"d3473f4c26d0b12bcf434f271d79f9f8431b549c": "asynq.removeQueue",
	"deeb77b98fd021a8a0279d8e7dd11a8a4546611a": "asynq.addToGroupUnique",
	"e33b162cbcaa58a573d0f5a5067b4c3e2246e079": "asynq.listMessages",
	"e90e63534c2b576147c8426713da4c8270138a89": "asynq.deleteAllAggregating",
	"e9b8aa859a976a1fce09eaf723b4fccd02ba799e": "asynq.scheduleUnique",
	"ec6970a9c80b182f05628a1377dcfee7df765fb4": "asynq.listSchedulerKeys/listServerKeys/listWorkers", // one source, three names
	"f34cbfd11d1fc8019af55b50c447fc68eb8b29e5": "asynq.requeue",
	"f78335554f1a49a26ac08c02e9f50237e38fae18": "asynq.deleteAggregationSet",
	"ffa79e9140e5aafb8e967e8d3e5f4eaefb648091": "asynq.deleteTask",
}

// opScripts take their operation as ARGV[1] (one script, several
// operations); a call to one is named by script and operation.
var opScripts = map[string]bool{"ratelimit.bucket": true, "workers.write_lane": true}

// opWord reports whether s looks like an operation argument: a short
// lower-case word. Anything else (a timestamp, an id) is not taken for one.
func opWord(s string) bool {
	if len(s) < 2 || len(s) > 20 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < 'a' || s[i] > 'z') && s[i] != '_' {
			return false
		}
	}
	return true
}

// scriptNamer names the scripts a Redis client runs by their SHA-1.
type scriptNamer map[string]string

// newScriptNamer knows prq's scripts (each package's ScriptHashes) and
// asynq's.
func newScriptNamer() scriptNamer {
	n := scriptNamer{}
	maps.Copy(n, asynqScripts)
	for _, m := range []map[string]string{admission.ScriptHashes(), ratelimit.ScriptHashes(), store.ScriptHashes(), workers.ScriptHashes()} {
		maps.Copy(n, m)
	}
	return n
}

// name is how a script call is reported: the script's name, with its
// operation for a script that takes one ("admission admit"); an unknown
// script as "script <first 8 hex digits>" (asynq's as well, should
// an upgrade change one before the table).
func (n scriptNamer) name(sha, firstArg string) string {
	name, ok := n[sha]
	if !ok {
		if len(sha) > 8 {
			sha = sha[:8]
		}
		return "script " + sha
	}
	if opScripts[name] && opWord(firstArg) {
		return name + " " + firstArg
	}
	return name
}

// sha1Hex is the SHA-1 of a script's source, as EVALSHA names it.
func sha1Hex(src string) string {
	h := sha1.Sum([]byte(src))
	return hex.EncodeToString(h[:])
}
