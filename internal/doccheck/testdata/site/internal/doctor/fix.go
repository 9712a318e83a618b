package doctor

var fixes = []string{
	"check the key (see docs/guide.md#getting-started)",
	"rotate the secret (see README, Runbook: rotating)",
}
