package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// addJSONAlias adds --json, the alias of -o json the commands had before
// -o: hidden, so that help shows one way, and kept so that scripts work.
func addJSONAlias(cmd *cobra.Command) {
	cmd.Flags().Bool("json", false, "the same as -o json")
	cmd.Flags().MarkHidden("json")
}

// wantJSON reports whether cmd is to print JSON: -o json, or --json.
func (c *CLI) wantJSON(cmd *cobra.Command) bool {
	if c.output == "json" {
		return true
	}
	v, err := cmd.Flags().GetBool("json")
	return err == nil && v
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// writeJSONLine prints v as JSON on one line, for the readiness line of
// run and dev that a script reads as soon as it comes.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
