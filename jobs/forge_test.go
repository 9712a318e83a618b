package jobs

import "testing"

// TestTenantsUpgrade is the upgrade story of forge-qualified tenants:
// a GitHub installation keeps its id, its forge and its keys exactly as
// before GitLab existed; a GitLab tenant can never share one.
func TestTenantsUpgrade(t *testing.T) {
	gh := PR{Installation: 424242, Owner: "acme", Repo: "api", Number: 7}
	if got, want := gh.Key(), "424242.acme.api.7"; got != want {
		t.Errorf("GitHub key = %q, want %q (unchanged by the forge port)", got, want)
	}
	if gh.Forge() != ForgeGitHub {
		t.Errorf("forge of a GitHub installation = %q", gh.Forge())
	}
	tenant, err := GitLabTenant(424242)
	if err != nil {
		t.Fatal(err)
	}
	gl := PR{Installation: tenant, Owner: "acme/platform", Repo: "api", Number: 7}
	if gl.Forge() != ForgeGitLab || gl.Validate() != nil {
		t.Errorf("GitLab tenant %d: forge %q, validate %v", tenant, gl.Forge(), gl.Validate())
	}
	if gl.Key() == gh.Key() || tenant == gh.Installation {
		t.Errorf("GitLab group 424242 shares GitHub installation 424242's identity: %q", gl.Key())
	}
	if got, want := gl.Key(), "4503599627794738.acme%2Fplatform.api.7"; got != want {
		t.Errorf("GitLab key = %q, want %q", got, want)
	}
	if gh.String() != "acme/api#7" || gl.String() != "acme/platform/api!7" {
		t.Errorf("names: %s and %s", gh, gl)
	}
	for _, bad := range []int64{0, -1, GitLabTenantBase} {
		if _, err := GitLabTenant(bad); err == nil {
			t.Errorf("GitLabTenant(%d) accepted", bad)
		}
	}
}
