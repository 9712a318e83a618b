// Package appmanifest registers prq's GitHub App with GitHub's App
// manifest flow ("Registering a GitHub App from a manifest"), the step
// behind `prq setup github`.
//
// Run serves a page on loopback that posts the manifest (prq's
// github-app-manifest.json with the App's name, webhook URL and the
// page's own callback filled in) to GitHub's settings/apps/new, for the
// signed-in user or an organisation, on github.com or an Enterprise
// Server. GitHub asks the person to confirm, registers the App and
// redirects to the callback with a code and the state the page sent;
// Run checks the state, exchanges the code (POST
// /app-manifests/{code}/conversions, which answers once and within an
// hour) and writes the App's id, slug and webhook secret to an env file
// and its private key to a key file, both mode 0600, replacing neither
// unless told to.
//
// It owns the flow and the two files. It does not install the App (the
// person does, at Result.InstallURL), read prq's configuration, or print
// anything: the caller reports Result, which holds no secret.
package appmanifest
