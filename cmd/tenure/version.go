package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…"; when it
// is not, the build info of the binary gives it (buildVersion).
var version = ""

// VersionInfo is what `tenure version -o json` prints.
type VersionInfo struct {
	// Version is the -X main.version stamp, else the module version of a
	// `go install …@v0.3.0` build, else "dev".
	Version string `json:"version"`
	// Revision is the VCS revision the binary was built from, shortened
	// to 12 hex digits ("" when the build recorded none).
	Revision string `json:"revision"`
	// Time is the commit time of Revision (RFC 3339).
	Time string `json:"time"`
	// Modified: the working tree had uncommitted changes.
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
}

// buildVersion reads the version of this binary: stamped wins, else the
// module version and VCS settings the Go toolchain recorded.
func buildVersion(stamped string) VersionInfo {
	v := VersionInfo{Version: stamped, Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if v.Version == "" {
			v.Version = "dev"
		}
		return v
	}
	v.Go = bi.GoVersion
	if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value[:min(len(s.Value), 12)]
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the version runners register and the CLI sends as its
// User-Agent: the version, and for a development build its revision
// ("dev+0123456789ab", "+dirty" when modified).
func (v VersionInfo) String() string {
	if v.Version != "dev" || v.Revision == "" {
		return v.Version
	}
	s := v.Version + "+" + v.Revision
	if v.Modified {
		s += ".dirty"
	}
	return s
}

// text is the one line `tenure version` prints.
func (v VersionInfo) text() string {
	var parts []string
	if v.Revision != "" {
		rev := "revision " + v.Revision
		if v.Modified {
			rev += " (modified)"
		}
		parts = append(parts, rev)
	}
	if v.Time != "" {
		parts = append(parts, v.Time)
	}
	parts = append(parts, v.Go)
	return fmt.Sprintf("tenure %s (%s)", v.Version, strings.Join(parts, ", "))
}

func newVersionCmd(cli *CLI) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Long: `Prints the version: the one stamped with -ldflags "-X main.version=V", else
the module version of a ` + "`go install github.com/tenurehq/tenure/cmd/tenure@V`" + `
build ("dev" for a build from a checkout), with the VCS revision, its time
and whether the tree was modified. -o json prints {"version", "revision",
"time", "modified", "go"}.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error { return printVersion(cli) },
	}
}

func printVersion(cli *CLI) error {
	v := buildVersion(version)
	if cli.output == "json" {
		return writeJSON(cli.Stdout, v)
	}
	_, err := fmt.Fprintln(cli.Stdout, v.text())
	return err
}

// noArgs refuses positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}
