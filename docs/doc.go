// Package docs holds the project's documentation as Markdown. It has no Go
// code; its test checks that the links of the README, these pages and the
// chart's README lead somewhere.
package docs
