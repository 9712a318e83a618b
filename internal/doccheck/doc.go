// Package doccheck keeps the Markdown docs true: it parses a page's
// headings (with GitHub's anchor slugs), explicit anchors, links and
// fenced code blocks, and checks that every relative link and #anchor
// resolves, in Markdown files and in the doc references other files carry
// (alert runbooks, doctor's fix texts, chart comments).
//
// It does not fetch external links, and it does not know what a YAML
// example should contain: CheckExamples takes the validator (the tests
// pass prq's configuration loader). The tests of this package run the
// checks on the repository's own docs, so `go test ./...` fails when a
// doc link breaks.
package doccheck
