package app

import (
	"runtime"
	"testing"
)

// `version` prints the version and commit set at build time, and the Go
// version and platform the binary was built with.
func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	oldVersion, oldCommit := Version, Commit
	t.Cleanup(func() { Version, Commit = oldVersion, oldCommit })
	Version, Commit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"

	out, _, err := runCLICommand(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	want := "version: v1.2.3\ncommit: 0123456789abcdef0123456789abcdef01234567\ngo: " +
		runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if out != want {
		t.Errorf("version printed\n%s\nwant\n%s", out, want)
	}
}
