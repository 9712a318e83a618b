package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
)

// writeBench prints the table and writes results.md, results.json and
// admitted.svg into the output directory.
func writeBench(out io.Writer, b Flags, results, scale []benchResult) error {
	var md strings.Builder
	fmt.Fprintf(&md, "Workload %s: %s simulated at %gx compression (limits per %s), seed %d, %d worker processes x %d, provider counting by %s.\n\n",
		b.workload, b.sim, b.compress, "minute/"+fmt.Sprint(b.compress), b.seed, b.processes, b.concurrency, b.providerLimiter)
	if b.sendLag >= 0 {
		fmt.Fprintf(&md, "scheduler.send_lag: %s (real time).\n\n", b.sendLag)
	}
	if b.gitlabTenants > 0 {
		fmt.Fprintf(&md, "%d of the 10 tenants are GitLab groups (on a fake GitLab, through /webhook/gitlab), on the same workers.\n\n", b.gitlabTenants)
	}
	if b.windowMargin > 0 {
		fmt.Fprintf(&md, "prq-window's window_margin: %s (real time).\n\n", b.windowMargin)
	}
	md.WriteString("| | " + strings.Join(names(results), " | ") + " |\n|---|" + strings.Repeat("---|", len(results)) + "\n")
	row := func(label string, f func(r benchResult) string) {
		cells := make([]string, len(results))
		for i, r := range results {
			cells[i] = f(r)
		}
		md.WriteString("| " + label + " | " + strings.Join(cells, " | ") + " |\n")
	}
	row("PRs published", func(r benchResult) string { return fmt.Sprintf("%d/%d", r.PRsDone, r.PRs) })
	if b.gitlabTenants > 0 {
		row("of them GitLab merge requests", func(r benchResult) string { return fmt.Sprintf("%d/%d", r.GitLabDone, r.GitLabPRs) })
	}
	row("chats answered", func(r benchResult) string { return fmt.Sprintf("%d/%d", r.ChatsAnswered, r.Chats) })
	row("provider 429s", func(r benchResult) string { return fmt.Sprint(r.Provider429s) })
	row("TPM utilisation while queued (review model)", func(r benchResult) string { return pctf(r.TPMUtilisation) })
	if b.providerLimiter == fakeopenai.LimiterWindow {
		// against a window the figure above is its mean fill from the
		// first admission to the last; the bucket's measure (the mean fill
		// up to a window after the last admission) is kept beside it
		row("TPM utilisation, bucket's measure (total / limit·(1+span/W))", func(r benchResult) string { return pctf(r.TPMUtilisationBucket) })
		row("TPM utilisation, mean fill of the windows a review job waited throughout (windows sampled)", func(r benchResult) string {
			return fmt.Sprintf("%s (%d)", pctf(r.TPMBacklogged), r.BacklogWindows)
		})
		row("prq's hold past the window, mean at the review model's calls (ms: the window margin, measured unless --window-margin; a call whose reply came within the window, its way)", func(r benchResult) string {
			if r.HoldMS == 0 {
				return "—"
			}
			return fmt.Sprintf("%.1f", r.HoldMS)
		})
		row("of those windows, unused: below the smallest waiting ticket / prq's longer count / admitted, not sent / a waiting ticket fit (held by the order, or not yet acted on)", func(r benchResult) string {
			return pctf(r.WindowGap.Packing) + " / " + pctf(r.WindowGap.Hold) + " / " + pctf(r.WindowGap.Transit) + " / " + pctf(r.WindowGap.Fitting)
		})
		row("the same fill with no latency, same calls and hold (simulated): in order / files of a run reordered / any order", func(r benchResult) string {
			return pctf(r.Ideal.InOrder) + " / " + pctf(r.Ideal.SameRun) + " / " + pctf(r.Ideal.AnyOrder)
		})
	}
	row("unused TPM: lost while jobs waited / while none did / left at the end", func(r benchResult) string {
		return pctf(r.Loss.WhileQueued) + " / " + pctf(r.Loss.NothingQueued) + " / " + pctf(r.Loss.LeftAtEnd)
	})
	row("left at the end: built up over the last (s) / of it while jobs waited", func(r benchResult) string {
		return fmt.Sprintf("%.1f / %s", r.Loss.LeftSinceS, pctf(r.Loss.LeftWhileQueued))
	})
	row("RPM utilisation while queued", func(r benchResult) string { return pctf(r.RPMUtilisation) })
	row("worst interval / allowance (burst + rate·t)", func(r benchResult) string { return fmt.Sprintf("%.3f", r.WorstVsAllowance) })
	row("worst one-minute window / TPM", func(r benchResult) string { return fmt.Sprintf("%.2f", r.WorstWindowVsTPM) })
	row("LLM calls (admitted by the provider)", func(r benchResult) string { return fmt.Sprint(r.LLMCalls) })
	row("handler runs per LLM call", func(r benchResult) string { return fmt.Sprintf("%.2f", r.HandlerRunsPerLLM) })
	row("Redis commands per LLM call", func(r benchResult) string { return fmt.Sprintf("%.0f", r.RedisCmdsPerLLM) })
	row("Redis commands per admitted job, saturated (marginal)", func(r benchResult) string {
		return fmt.Sprintf("%.0f", r.RedisCost.MarginalCmdsPerJob)
	})
	row("of which the top 3 commands", func(r benchResult) string {
		var parts []string
		for _, c := range r.RedisCost.TopPerJob[:min(3, len(r.RedisCost.TopPerJob))] {
			parts = append(parts, fmt.Sprintf("%s %.0f", strings.ToLower(c.Command), c.PerJob))
		}
		return strings.Join(parts, ", ")
	})
	row("Redis CPU per LLM call, saturated (ms)", func(r benchResult) string { return fmt.Sprintf("%.2f", r.RedisCost.CPUMsPerCall) })
	row("idle Redis commands/s per worker process", func(r benchResult) string { return fmt.Sprintf("%.0f", r.RedisCost.IdleCmdsPerSec) })
	row("chat wait p50 / p99 (s, uncompressed)", func(r benchResult) string { return fmt.Sprintf("%.1f / %.1f", r.ChatWaitP50, r.ChatWaitP99) })
	chatStageRows(row)
	for _, tier := range []string{"paid", "trial", "free"} {
		tier := tier
		row("PR time p50 / p95, "+tier+" (s)", func(r benchResult) string {
			return fmt.Sprintf("%.0f / %.0f", r.PRTimeP50[tier], r.PRTimeP95[tier])
		})
	}
	row("priority inversions (batch called while chat waited within its cap)", func(r benchResult) string { return fmt.Sprint(r.Inversions) })
	for _, tier := range []string{"paid", "trial", "free"} {
		tier := tier
		row("Jain's index across tenants, "+tier, func(r benchResult) string {
			if v, ok := r.Jain[tier]; ok {
				return fmt.Sprintf("%.3f", v)
			}
			return "n/a"
		})
	}
	for _, tier := range []string{"paid", "trial", "free"} {
		tier := tier
		row("Jain's index, tokens summed while all "+tier+" tenants wait", func(r benchResult) string {
			if v, ok := r.JainSummed[tier]; ok {
				return fmt.Sprintf("%.3f", v)
			}
			return "n/a"
		})
	}
	row(tierShareLabel(), func(r benchResult) string {
		if r.ShareWindows == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%s / %s (%d windows)", pctf(r.TierShares["paid"]), pctf(r.TierShares["trial"]), r.ShareWindows)
	})
	row("dollars at list prices: per PR published / in all (prq's own count)", func(r benchResult) string {
		return fmt.Sprintf("%.4f / %.3f (%.3f)", r.Bill.PerPR, r.Bill.Dollars, r.Bill.Counted)
	})
	row("the same prompts without the prompt cache, in all (dollars) / with it, of that", func(r benchResult) string {
		if r.Bill.NoCache == 0 {
			return "—"
		}
		return fmt.Sprintf("%.3f / %.2f×", r.Bill.NoCache, r.Bill.Dollars/r.Bill.NoCache)
	})
	row("input served from the prompt cache", func(r benchResult) string { return pctf(r.Bill.CachedShare) })
	if b.provider == ProviderAnthropic {
		row("review model's input tokens per minute (cache reads included) / its input limit", func(r benchResult) string { return fmt.Sprintf("%.2f×", r.InputPerLimit) })
	}
	row("dollars by lane: standard / flex / batch", func(r benchResult) string {
		return fmt.Sprintf("%.3f / %.3f / %.3f", r.Bill.ByLane[fakeopenai.LaneSync], r.Bill.ByLane[fakeopenai.LaneFlex], r.Bill.ByLane[fakeopenai.LaneBatch])
	})
	row("makespan (s, uncompressed)", func(r benchResult) string { return fmt.Sprintf("%.0f", r.MakespanS) })
	row("peak worker RSS (MB)", func(r benchResult) string { return fmt.Sprintf("%.0f", r.PeakRSSMB) })
	if len(scale) > 0 {
		md.WriteString("\nScale (prq, same workload):\n\n| processes | PRs | provider 429s | TPM utilisation | worst interval / allowance | makespan (s) |\n|---|---|---|---|---|---|\n")
		for _, r := range scale {
			fmt.Fprintf(&md, "| %d | %d/%d | %d | %s | %.3f | %.0f |\n", r.Processes, r.PRsDone, r.PRs, r.Provider429s, pctf(r.TPMUtilisation), r.WorstVsAllowance, r.MakespanS)
		}
	}
	fmt.Fprint(out, "\n"+md.String())
	if err := os.WriteFile(filepath.Join(b.out, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(map[string]any{"flags": map[string]any{"processes": b.processes, "concurrency": b.concurrency, "duration": b.sim.String(),
		"compress": b.compress, "seed": b.seed}, "results": results, "scale": scale}, "", "  ")
	if err := os.WriteFile(filepath.Join(b.out, "results.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.out, "admitted.svg"), []byte(svgChart(results)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwrote %s, %s and %s\n", filepath.Join(b.out, "results.md"), filepath.Join(b.out, "results.json"), filepath.Join(b.out, "admitted.svg"))
	return nil
}

func names(rs []benchResult) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Strategy
	}
	return out
}

func pctf(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// svgChart draws admitted tokens per second over time for each strategy
// against the limit line, one panel per strategy.
func svgChart(rs []benchResult) string {
	const w, ph, pad = 900, 150, 40
	colors := []string{"#2563eb", "#f59e0b", "#059669", "#b42318"}
	h := len(rs)*(ph+30) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, w, h)
	b.WriteString(`<rect width="100%" height="100%" fill="#fff"/>`)
	var tmax, ymax float64
	for _, r := range rs {
		for _, p := range r.Series {
			tmax = max(tmax, p.T)
			ymax = max(ymax, p.Tokens)
		}
		ymax = max(ymax, r.LimitPerS)
	}
	ymax *= 1.1
	if tmax == 0 || ymax == 0 {
		return b.String() + "</svg>"
	}
	for i, r := range rs {
		top := 20 + i*(ph+30)
		x := func(t float64) float64 { return pad + (w-pad-10)*t/tmax }
		y := func(v float64) float64 { return float64(top+ph) - float64(ph)*v/ymax }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s: admitted tokens/s of the review model (limit dashed)</text>`, pad, top-5, r.Strategy)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fbfcfd" stroke="#dde1e7"/>`, pad, top, w-pad-10, ph)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#b42318" stroke-dasharray="6 4"/>`, pad, w-10, y(r.LimitPerS), y(r.LimitPerS))
		fmt.Fprintf(&b, `<text x="2" y="%.1f">%.0f</text>`, y(r.LimitPerS)+4, r.LimitPerS)
		var pts []string
		for _, p := range r.Series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T), y(p.Tokens)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, colors[i%len(colors)], strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d">0s</text><text x="%d" y="%d" text-anchor="end">%.0fs real</text>`, pad, top+ph+12, w-10, top+ph+12, tmax)
	}
	b.WriteString("</svg>")
	return b.String()
}

// tierShareLabel names the tier-share row with the shares the weights
// give (the bench runs the default tiers; free has no reviews).
func tierShareLabel() string {
	t := config.Default().Tiers
	p, tr := float64(t["paid"].Weight), float64(t["trial"].Weight)
	return fmt.Sprintf("paid / trial share of review tokens while both wait (weights: %s / %s)", pctf(p/(p+tr)), pctf(tr/(p+tr)))
}

// chatStageRows adds a row per stage of chat's wait (chatstages.go).
func chatStageRows(row func(string, func(benchResult) string)) {
	for k, name := range chatStageNames {
		row("chat wait by stage: "+name+" p50 / p99 / in the slowest chat (s)", func(r benchResult) string {
			if k >= len(r.ChatStages) {
				return "—"
			}
			st := r.ChatStages[k]
			return fmt.Sprintf("%.2f / %.2f / %.2f", st.P50, st.P99, st.Slowest)
		})
	}
}
