package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set by the release build (.goreleaser.yaml) with
// -ldflags "-X main.releaseVersion=... -X main.releaseCommit=...". Empty in
// a build from a checkout or by `go install`, where the module build info
// describes the build instead.
var (
	releaseVersion string
	releaseCommit  string
)

// buildInfo describes this binary; `fencepub version -o json` prints it and
// --version prints buildInfo.String.
type buildInfo struct {
	Version   string `json:"version"`  // release tag, module version, or "(devel)"
	Commit    string `json:"commit"`   // full VCS revision; "" when unknown (a build outside a VCS checkout)
	Modified  bool   `json:"modified"` // built from a tree with uncommitted changes
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

// currentBuild returns this binary's buildInfo. The version and commit come
// from the release build's ldflags when set, else from the module build
// info: the module version (a tag for `go install ...@vX`, "(devel)" for a
// build from a checkout) and the vcs.revision and vcs.modified settings.
func currentBuild() buildInfo {
	b := buildInfo{Version: "unknown", GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.Version, b.GoVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if releaseVersion != "" {
		b.Version, b.Commit, b.Modified = releaseVersion, releaseCommit, false
	}
	return b
}

// String is the --version line: version, short commit (with "(modified)"
// for a dirty tree), Go version and platform.
func (b buildInfo) String() string {
	v := b.Version
	if b.Commit != "" {
		v += ", commit " + b.Commit[:min(12, len(b.Commit))]
		if b.Modified {
			v += " (modified)"
		}
	}
	return fmt.Sprintf("%s, %s, %s/%s", v, b.GoVersion, b.OS, b.Arch)
}

// newVersionCmd builds `fencepub version`: the --version line, or with
// -o json the buildInfo document.
func newVersionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version and platform of this binary",
		Long: `version prints what --version prints. With -o json it prints one document:
schema_version, version (the release tag, the module version of a go install,
or "(devel)" for a build from a checkout), commit and modified (when the build
knows its VCS revision), go_version, os and arch. No server is contacted.`,
		Args: cobra.NoArgs,
	}
	format := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		b := currentBuild()
		if *format == "json" {
			return printJSON(c.OutOrStdout(), b)
		}
		_, err := fmt.Fprintln(c.OutOrStdout(), b.String())
		return err
	}
	return cmd
}
