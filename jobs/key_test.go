package jobs

import (
	"math/rand"
	"strings"
	"testing"
)

func TestKeyIsInjective(t *testing.T) {
	tricky := []string{"my.lib", "my_lib", "my-lib", "my%2Elib", "my%lib", "a.b.c", "a_b_c", "a", "a.", ".a", "_a",
		"{tag}", "x:y", "x y", "café", "cafe\u0301", "", "1", "1.2", "1_2", "%", "%25", "%%"}
	seen := map[string]PR{}
	check := func(p PR) {
		k := p.Key()
		if prev, dup := seen[k]; dup && prev != p {
			t.Fatalf("%+v and %+v share the key %q", prev, p, k)
		}
		seen[k] = p
		if strings.ContainsAny(k, "{}: \t\n") {
			t.Fatalf("key %q has a character Redis Cluster tags or asynq ids cannot hold", k)
		}
	}
	for _, o := range tricky {
		for _, r := range tricky {
			for _, n := range []int{1, 12} {
				check(PR{Installation: 7, Owner: o, Repo: r, Number: n})
				check(PR{Installation: 71, Owner: o, Repo: r, Number: n})
			}
		}
	}
	rng := rand.New(rand.NewSource(1))
	alphabet := []byte("ab._-%2E:{} é")
	word := func() string {
		b := make([]byte, rng.Intn(5))
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		return string(b)
	}
	for i := 0; i < 20000; i++ {
		check(PR{Installation: int64(rng.Intn(3)), Owner: word(), Repo: word(), Number: rng.Intn(3)})
	}
}

// TestFileTaskIDsOfTwoRunsDiffer: a head planned again gets jobs of its
// own, whatever of the earlier run is still in flight.
func TestFileTaskIDsOfTwoRunsDiffer(t *testing.T) {
	f := File{PR: PR{Installation: 1, Owner: "o", Repo: "r", Number: 1}, HeadSHA: "abc", Kind: KindSummary, Index: 3, PRSeq: 1_700_000_000_000}
	g := f
	g.PRSeq += 1000
	if FileTaskID(f) == FileTaskID(g) {
		t.Fatalf("two runs of a head share the job id %q", FileTaskID(f))
	}
}
